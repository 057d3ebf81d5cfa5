// Package promflow turns flow records into Prometheus traffic counters, one
// per counter field of flow.Fields, named by flow's registry
// (loupe_traffic_packets_total, _bytes_total, _segments_total and
// _wire_bytes_total), by interface, direction and protocol, plus the
// aggregation keys the operator chose (ports, CIDR groups, EtherType, DSCP,
// VLAN).
//
// Series are bounded twice. By construction: every label has a bounded set
// of values, and there are no per-flow labels (addresses only through CIDR
// groups). And by a hard cap: past MaxSeries label sets, a new label set is
// counted in the fold series, whose every label but direction is "other",
// and loupe_traffic_series_folded_total counts the records folded. Nothing
// is lost: the sum over all series always equals the sum over all records.
//
// Series that carried nothing for IdleTTL are deleted, so that container
// churn does not fill the cap with dead interfaces. A deleted series that
// comes back later starts again from zero, which Prometheus reads as a
// counter reset (rate and increase handle it); a raw sum of the counters
// across series, however, drops when a series is deleted, so dashboards
// should sum rates, not counters.
package promflow

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/flow"
)

// Defaults of Options.
const (
	DefaultMaxSeries = 4096
	DefaultIdleTTL   = time.Hour
)

// foldLogInterval bounds how often the sink warns while it folds.
const foldLogInterval = time.Minute

// Options configure the sink. The zero value is valid: labels iface,
// direction and proto, at most 4096 series, idle series dropped after 1 h.
type Options struct {
	// MaxSeries is the hard cap on label sets (one label set counts once,
	// for all the counters), the two fold series included. Default 4096. With 1, the one
	// series is the fold series, and its direction is "other" too.
	MaxSeries int
	// Keys are aggregation keys added as labels. Default none.
	Keys []Key
	// Groups are the CIDR groups of the src_group and dst_group keys.
	Groups []Group
	// IdleTTL is how long a series may carry nothing before it is deleted
	// at the next Flush. Default 1h.
	IdleTTL time.Duration
	// Now is the clock (tests pass a fake one). Default time.Now.
	Now func() time.Time
	// Logger receives cap warnings. Default slog.Default().
	Logger *slog.Logger
}

// Validate checks options as the configuration gives them, with messages
// that name the configuration key (prometheus.* in the agent's).
func (o *Options) Validate() error {
	switch {
	case o.MaxSeries < 0:
		return fmt.Errorf("max_series: %d is negative", o.MaxSeries)
	case o.IdleTTL < 0:
		return fmt.Errorf("idle_ttl: %v is negative", o.IdleTTL)
	}
	var seen [keyCount]bool
	wantGroups := false
	for _, k := range o.Keys {
		if !k.valid() {
			return fmt.Errorf("keys: unknown key %v", k)
		}
		if seen[k] {
			return fmt.Errorf("keys: %q listed twice", k)
		}
		seen[k] = true
		wantGroups = wantGroups || k == KeySrcGroup || k == KeyDstGroup
	}
	if err := validateGroups(o.Groups); err != nil {
		return err
	}
	// Groups without a group key are allowed (the agent warns that they
	// are unused): a configuration may define them before using them.
	if wantGroups && len(o.Groups) == 0 {
		return fmt.Errorf("keys: src_group and dst_group need cidr_groups")
	}
	return nil
}

// seriesKey identifies a label set. It is fixed-size and holds no pointer
// (the interface name is interned), so it hashes as 28 plain bytes; fields
// of keys that are not configured stay zero. Label strings are only built
// when a series is created.
type seriesKey struct {
	iface    uint32 // interned name, see Sink.ifaceID
	srcPort  uint32 // portNone when the protocol has no ports
	dstPort  uint32
	proto    uint16 // protoNone for non-IP flows
	ethType  uint16
	srcGroup uint16 // group index, see groupTable
	dstGroup uint16
	vlan     uint16
	// namespace and workload are interned names (as iface), of the
	// record's pod (localPod); the interned "" is none.
	namespace, workload uint32
	dscp                uint8 // dscpNone for non-IP flows
	dir                 flow.Direction
	fold                bool // the fold series of dir; every other field is zero
}

// dirAny is the direction of the single fold series when MaxSeries is 1.
const dirAny flow.Direction = 0xff

type series struct {
	labels  []string // label values, in the order of the Descs' labels
	counts  [flow.NumCounters]uint64
	updated time.Time
}

// Sink is both an export.Sink and a prometheus.Collector.
type Sink struct {
	opts   Options
	keys   [keyCount]bool
	groups *groupTable
	log    *slog.Logger

	counters             [flow.NumCounters]*prometheus.Desc // one per counter field
	folded, count, limit *prometheus.Desc

	mu     sync.Mutex
	series map[seriesKey]*series
	// ifaces interns interface names for seriesKey. IDs are never reused;
	// names no series uses any more are forgotten at Flush.
	ifaces    map[string]uint32
	ifaceName map[uint32]string
	nextIface uint32
	// missingFolds is the number of fold series (one per direction, or
	// one in all if MaxSeries is 1) that do not exist now. Regular series
	// may only use the room they leave, so a fold series can always be
	// created: the invariant is len(series)+missingFolds <= MaxSeries.
	missingFolds int
	foldings     uint64
	logged       uint64 // foldings at the last warning
	loggedAt     time.Time
	snapshot     []series // reused by Collect
	// sig are the kernel signals' and DNS metrics (signals.go).
	sig sigState
}

// Open validates opts and creates the sink.
func Open(opts Options) (*Sink, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	return New(opts), nil
}

// New creates the sink from options known to be valid (tests, benchmarks,
// the zero Options); it panics if opts.Validate fails. Configuration goes
// through Open.
func New(opts Options) *Sink {
	if err := opts.Validate(); err != nil {
		panic("promflow: " + err.Error())
	}
	if opts.MaxSeries == 0 {
		opts.MaxSeries = DefaultMaxSeries
	}
	if opts.IdleTTL == 0 {
		opts.IdleTTL = DefaultIdleTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Sink{
		opts:         opts,
		groups:       newGroupTable(opts.Groups),
		log:          opts.Logger.With("component", "promflow"),
		series:       make(map[seriesKey]*series),
		ifaces:       make(map[string]uint32),
		ifaceName:    make(map[uint32]string),
		missingFolds: 2,
		sig:          newSigState(),
	}
	if opts.MaxSeries == 1 {
		s.missingFolds = 1
	}
	labels := []string{"iface", "direction", "proto"}
	for _, k := range opts.Keys {
		s.keys[k] = true
	}
	for k := Key(1); k < keyCount; k++ {
		if s.keys[k] {
			labels = append(labels, k.String())
		}
	}
	for i, f := range flow.CounterFields() {
		s.counters[i] = prometheus.NewDesc(f.Wire.Metric.Prom,
			f.Wire.Metric.Help+", by interface, direction, protocol and the configured keys.", labels, nil)
	}
	s.folded = prometheus.NewDesc("loupe_traffic_series_folded_total",
		`Records counted in the fold series (proto="other") because the series cap was reached.`, nil, nil)
	s.count = prometheus.NewDesc("loupe_traffic_series",
		"Label sets of the loupe_traffic_*_total counters now (each counter has the same).", nil, nil)
	s.limit = prometheus.NewDesc("loupe_traffic_series_limit",
		"The cap on loupe_traffic_series (max_series); past it new label sets fold.", nil, nil)
	return s
}

// Name implements export.Sink.
func (s *Sink) Name() string { return "prometheus" }

// Write implements export.Sink. Records with a direction other than
// ingress or egress (which the datapath never produces) are not counted,
// and reported in the error.
func (s *Sink) Write(_ context.Context, batch []flow.Record) error {
	now := s.opts.Now()
	var bad int
	s.mu.Lock()
	defer s.mu.Unlock()
	// Consecutive records often share a label set (one interface, few
	// keys): remember the last one to skip the map.
	var lastKey seriesKey
	var last *series
	var lastFolded bool
	var lastIface string
	var lastIfaceID uint32
	for i := range batch {
		r := &batch[i]
		if r.Direction > flow.Egress {
			bad++
			continue
		}
		if r.Has != 0 {
			iface := uint32(0) // signals on no interface
			if r.IfIndex != 0 || r.Iface != "" {
				iface = s.ifaceID(r.Iface)
			}
			s.observe(r, iface, now)
		}
		if r.Counters() == ([flow.NumCounters]uint64{}) {
			continue // adds nothing (a record of signals alone): no series for it
		}
		if r.Iface != lastIface || last == nil {
			lastIface, lastIfaceID = r.Iface, s.ifaceID(r.Iface)
		}
		k := s.keyOf(r, lastIfaceID)
		t := last
		switch {
		case t != nil && k == lastKey:
			if lastFolded {
				s.foldings++
			}
		default:
			t, lastFolded = s.series[k], false
			if t == nil {
				t, lastFolded = s.create(k)
			}
			lastKey, last = k, t
		}
		c := r.Counters()
		for i := range c {
			t.counts[i] += c[i]
		}
		t.updated = now
	}
	if bad > 0 {
		return fmt.Errorf("promflow: %d records with an invalid direction not counted", bad)
	}
	return nil
}

// keyOf computes a record's label set.
func (s *Sink) keyOf(r *flow.Record, iface uint32) seriesKey {
	k := seriesKey{iface: iface, dir: r.Direction, proto: uint16(r.Proto)}
	ip := r.IsIP()
	if !ip {
		k.proto = protoNone
	}
	if s.keys[KeyVlanID] {
		k.vlan = r.VlanID
	}
	if s.keys[KeyEthType] {
		k.ethType = r.EtherType
	}
	if s.keys[KeySrcPort] || s.keys[KeyDstPort] {
		if r.PortKind() == flow.TransportPorts {
			if s.keys[KeySrcPort] {
				k.srcPort = uint32(r.SrcPort)
			}
			if s.keys[KeyDstPort] {
				k.dstPort = uint32(r.DstPort)
			}
		} else {
			if s.keys[KeySrcPort] {
				k.srcPort = portNone
			}
			if s.keys[KeyDstPort] {
				k.dstPort = portNone
			}
		}
	}
	if s.keys[KeySrcGroup] {
		k.srcGroup = s.groups.lookup(r.EtherType, &r.SrcAddr)
	}
	if s.keys[KeyDstGroup] {
		k.dstGroup = s.groups.lookup(r.EtherType, &r.DstAddr)
	}
	if s.keys[KeyDSCP] {
		k.dscp = r.DSCP
		if !ip {
			k.dscp = dscpNone
		}
	}
	if s.keys[KeyNamespace] || s.keys[KeyWorkload] {
		var ns, wl string
		if p := localPod(r); p != nil {
			ns, wl = p.Namespace, p.Workload
		}
		if s.keys[KeyNamespace] {
			k.namespace = s.ifaceID(ns)
		}
		if s.keys[KeyWorkload] {
			k.workload = s.ifaceID(wl)
		}
	}
	return k
}

// create returns the series a new label set is counted in: its own while
// there is room, else its direction's fold series (folded is then true,
// and the record is counted as folded).
func (s *Sink) create(k seriesKey) (t *series, folded bool) {
	if len(s.series)+1+s.missingFolds <= s.opts.MaxSeries {
		t = &series{labels: s.labelValues(k)}
		s.series[k] = t
		return t, false
	}
	s.foldings++
	fk := seriesKey{dir: k.dir, fold: true}
	if s.opts.MaxSeries == 1 {
		fk.dir = dirAny
	}
	if t = s.series[fk]; t != nil {
		return t, true
	}
	// The room for it was reserved.
	t = &series{labels: s.labelValues(fk)}
	s.series[fk] = t
	s.missingFolds--
	return t, true
}

// labelValues builds the label strings of a new series.
func (s *Sink) labelValues(k seriesKey) []string {
	n := 3
	for _, on := range s.keys {
		if on {
			n++
		}
	}
	out := make([]string, 0, n)
	if k.fold {
		dir := Other
		if k.dir != dirAny {
			dir = k.dir.String()
		}
		out = append(out, Other, dir)
		for range n - 2 {
			out = append(out, Other)
		}
		return out
	}
	iface := s.ifaceName[k.iface]
	if iface == "" {
		iface = UnknownIface
	}
	out = append(out, iface, k.dir.String(), protoLabel(k.proto))
	for key := Key(1); key < keyCount; key++ {
		if !s.keys[key] {
			continue
		}
		switch key {
		case KeyEthType:
			out = append(out, ethTypeLabel(k.ethType))
		case KeySrcPort:
			out = append(out, portLabel(k.srcPort))
		case KeyDstPort:
			out = append(out, portLabel(k.dstPort))
		case KeySrcGroup:
			out = append(out, s.groups.names[k.srcGroup])
		case KeyDstGroup:
			out = append(out, s.groups.names[k.dstGroup])
		case KeyDSCP:
			out = append(out, dscpLabel(k.dscp))
		case KeyVlanID:
			out = append(out, vlanLabel(k.vlan))
		case KeyNamespace:
			out = append(out, nameLabel(s.ifaceName[k.namespace]))
		case KeyWorkload:
			out = append(out, nameLabel(s.ifaceName[k.workload]))
		}
	}
	return out
}

// nameLabel is a Kubernetes name's label value: "none" for no name.
func nameLabel(name string) string {
	if name == "" {
		return "none"
	}
	return name
}

// ifaceID interns an interface name, or a Kubernetes name of a label.
func (s *Sink) ifaceID(name string) uint32 {
	if id, ok := s.ifaces[name]; ok {
		return id
	}
	s.nextIface++
	s.ifaces[name] = s.nextIface
	s.ifaceName[s.nextIface] = name
	return s.nextIface
}

// forgetIfaces drops the names no series uses, so that interface churn
// does not grow the intern table.
func (s *Sink) forgetIfaces() {
	used := make(map[uint32]bool, len(s.ifaces))
	for k := range s.series {
		used[k.iface], used[k.namespace], used[k.workload] = true, true, true
	}
	for k := range s.sig.series {
		used[k.iface] = true
	}
	for id, name := range s.ifaceName {
		if !used[id] {
			delete(s.ifaceName, id)
			delete(s.ifaces, name)
		}
	}
}

// Flush implements export.Sink: it deletes idle series, and warns (at
// most once a minute) while records are being folded.
func (s *Sink) Flush(context.Context) error {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	expired := false
	for k, t := range s.series {
		if now.Sub(t.updated) > s.opts.IdleTTL {
			delete(s.series, k)
			expired = true
			if k.fold {
				s.missingFolds++
			}
		}
	}
	if s.sigExpire(now) {
		expired = true
	}
	// Names interned for records that folded, or for expired series, are
	// garbage: a table larger than the series count must hold some.
	if expired || len(s.ifaces) > len(s.series)+len(s.sig.series) {
		s.forgetIfaces()
	}
	if s.foldings > s.logged && (s.logged == 0 || now.Sub(s.loggedAt) >= foldLogInterval) {
		s.log.Warn("series cap reached: new label sets are counted in the fold series (proto=\"other\")",
			"max_series", s.opts.MaxSeries, "series", len(s.series),
			"folded_records", s.foldings, "folded_since_last_warning", s.foldings-s.logged)
		s.logged, s.loggedAt = s.foldings, now
	}
	return nil
}

// Close implements export.Sink. The counters stay readable: the agent
// serves /metrics until it exits.
func (s *Sink) Close() error { return nil }

// Describe implements prometheus.Collector.
func (s *Sink) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.counters {
		ch <- d
	}
	ch <- s.folded
	ch <- s.count
	ch <- s.limit
	for _, d := range s.sig.descs {
		ch <- d
	}
	ch <- s.sig.foldDesc
	ch <- s.sig.countDesc
}

// Collect implements prometheus.Collector. It copies the counters under
// the lock and builds metrics after releasing it, so a scrape holds up
// Write only for the copy.
func (s *Sink) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	snap := s.snapshot[:0]
	for _, t := range s.series {
		snap = append(snap, *t)
	}
	folded := s.foldings
	s.snapshot = nil // Collect may run concurrently: each owns its copy
	sigSnap, sigFolded := s.sigSnapshot()
	s.mu.Unlock()
	s.sigCollect(ch, sigSnap, sigFolded)

	for i := range snap {
		t := &snap[i]
		for c, d := range s.counters {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(t.counts[c]), t.labels...)
		}
	}
	ch <- prometheus.MustNewConstMetric(s.folded, prometheus.CounterValue, float64(folded))
	ch <- prometheus.MustNewConstMetric(s.count, prometheus.GaugeValue, float64(len(snap)))
	ch <- prometheus.MustNewConstMetric(s.limit, prometheus.GaugeValue, float64(s.opts.MaxSeries))

	s.mu.Lock()
	if s.snapshot == nil {
		s.snapshot = snap[:0]
	}
	s.mu.Unlock()
}
