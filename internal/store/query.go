package store

import (
	"fmt"
	"math"
	"net/netip"
	"path"
	"time"

	"loupe/internal/flow"
)

// Any is the Port, Proto or Direction of a Query that matches every value.
const Any = -1

// Query selects records. Note that the zero Query matches only port 0,
// protocol 0 and ingress: start from NewQuery, which matches everything.
type Query struct {
	// Since and Until select records whose [first_seen, last_seen]
	// interval overlaps [Since, Until], both ends inclusive. A zero value
	// is unbounded.
	Since, Until time.Time
	// Src and Dst select records whose source / destination address is in
	// the prefix; the zero Prefix matches all. An IPv4 prefix matches IPv4
	// flows, an IPv6 prefix IPv6 flows, and non-IP flows match neither,
	// just as flow.Key.SrcIP/DstIP and netip.Prefix.Contains behave.
	Src, Dst netip.Prefix
	// Port matches the source or the destination port (Any for all).
	// ICMP flows carry type and code in the ports, as in flow.Key.
	Port int
	// Proto is the IP protocol number (Any for all).
	Proto int
	// Ifaces selects records whose interface name matches one of these
	// globs (path.Match syntax: "eth*", "veth?"); empty selects all.
	Ifaces []string
	// Direction is a flow.Direction (Any for both).
	Direction int
	// Namespace selects records either end of which is in this
	// Kubernetes namespace (src_namespace or dst_namespace); "" selects
	// all.
	Namespace string
	// Workload selects records either end of which belongs to this
	// workload: "NAME" (src_workload or dst_workload), or "NS/NAME" (an
	// end with both that namespace and that workload); "" selects all.
	// It composes with Namespace as every filter does: both must hold,
	// each at either end.
	Workload string
	// MinRTT selects records whose largest smoothed RTT (rtt_max_ns) is
	// at least this long, which only records with an RTT sample have; 0
	// selects all.
	MinRTT time.Duration
	// Has selects records that measured every one of these signals
	// (Signal says what each means); empty selects all.
	Has []Signal
	// Accuracy selects records of one of these accuracies; empty selects
	// all.
	Accuracy []flow.Accuracy
	// Report, if set, is filled with what the query read, including the
	// corrupt segments it skipped.
	Report *Report
}

// NewQuery returns a query that matches every record.
func NewQuery() Query { return Query{Port: Any, Proto: Any, Direction: Any} }

func (q *Query) report() *Report {
	if q.Report != nil {
		*q.Report = Report{}
		return q.Report
	}
	return &Report{}
}

type compiled struct {
	since, until int64
	src, dst     netip.Prefix
	port, proto  int
	dir          int
	ifaces       []string
	namespace    string
	// workloadNS and workload are Query.Workload split at its slash.
	workloadNS, workload string
	measured             *measuredQuery // nil: no such filter
}

func (q *Query) compile() (compiled, error) {
	c := compiled{since: math.MinInt64, until: math.MaxInt64, port: q.Port, proto: q.Proto, dir: q.Direction, ifaces: q.Ifaces}
	if q.Port < Any || q.Port > math.MaxUint16 {
		return c, fmt.Errorf("store: query port %d out of range (-1 for any, 0-65535)", q.Port)
	}
	if q.Proto < Any || q.Proto > math.MaxUint8 {
		return c, fmt.Errorf("store: query protocol %d out of range (-1 for any, 0-255)", q.Proto)
	}
	if !q.Since.IsZero() {
		c.since = q.Since.UnixNano()
	}
	if !q.Until.IsZero() {
		c.until = q.Until.UnixNano()
	}
	if q.Direction < Any || q.Direction > int(flow.Egress) {
		return c, fmt.Errorf("store: query direction %d out of range (-1 for any, 0 ingress, 1 egress)", q.Direction)
	}
	for _, g := range q.Ifaces {
		if _, err := path.Match(g, ""); err != nil {
			return c, fmt.Errorf("store: query interface pattern %q: %w", g, err)
		}
	}
	if c.since > c.until {
		return c, fmt.Errorf("store: query since %v is after until %v", q.Since, q.Until)
	}
	c.namespace = q.Namespace
	var err error
	if q.Workload != "" {
		if c.workloadNS, c.workload, err = ParseWorkload(q.Workload); err != nil {
			return c, fmt.Errorf("store: query %w", err)
		}
	}
	if c.measured, err = compileMeasured(q); err != nil {
		return c, err
	}
	if q.Src.IsValid() {
		c.src = q.Src.Masked()
	}
	if q.Dst.IsValid() {
		c.dst = q.Dst.Masked()
	}
	return c, nil
}

// addrOf is the netip.Addr flow.Key.SrcIP/DstIP returns for an entry. It
// asks flow.Key itself, so that filters and groups follow its rules (for
// instance, what a malformed IPv4 address maps to) by construction.
func addrOf(k addrKey) netip.Addr {
	key := flow.Key{SrcAddr: k.a}
	switch k.fam {
	case famV4:
		key.EtherType = flow.EtherTypeIPv4
	case famV6:
		key.EtherType = flow.EtherTypeIPv6
	}
	return key.SrcIP()
}

// canonical maps an entry to a key that is equal exactly when the
// netip.Addr is: e.g. all non-IP entries are one group, whatever bytes
// they carry.
func canonical(k addrKey) addrKey {
	a := addrOf(k)
	switch {
	case !a.IsValid():
		return addrKey{}
	case a.Is4():
		return addrKey{a.As16(), famV4}
	}
	return addrKey{a.As16(), famV6}
}

// segFilter is a query specialised to one segment: address prefixes and
// interface globs become one bool per dictionary entry, and the per-record
// time test is dropped when the whole segment is inside the window.
type segFilter struct {
	checkTime    bool
	since, until int64
	port, proto  int
	dir          int
	srcOK, dstOK []bool
	ifaceOK      []bool
	names        *nameFilter    // Namespace and Workload, or nil
	measured     *measuredQuery // MinRTT, Has and Accuracy, or nil
}

// simple reports whether every record of the segment matches: no
// per-record test is needed.
func (f *segFilter) simple() bool {
	return !f.checkTime && f.port < 0 && f.proto < 0 && f.dir < 0 && f.srcOK == nil && f.dstOK == nil && f.ifaceOK == nil && f.names == nil && f.measured == nil
}

// window returns the query's time window alone: what Top's service-port
// pass reads, whatever the other filters say.
func (c *compiled) window() compiled {
	return compiled{since: c.since, until: c.until, port: Any, proto: Any, dir: Any}
}

// matchIface reports whether name matches one of the globs.
func matchIface(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// forSegment returns ok=false if no record of s can match. It verifies the
// blocks the filter reads.
func (c *compiled) forSegment(s *segment) (f *segFilter, ok bool, err error) {
	if s.n == 0 || s.maxLast < c.since || s.minFirst > c.until {
		return nil, false, nil
	}
	f = &segFilter{
		checkTime: !(s.maxFirst <= c.until && s.minLast >= c.since),
		since:     c.since, until: c.until, port: c.port, proto: c.proto, dir: c.dir,
	}
	var need []int
	if f.checkTime {
		need = append(need, cFirst, cLast)
	}
	if f.proto >= 0 {
		need = append(need, cProto)
	}
	if f.port >= 0 {
		need = append(need, cSrcPort, cDstPort)
	}
	if f.dir >= 0 {
		need = append(need, cDirection)
	}
	if c.src.IsValid() {
		need = append(need, cSrcAddr, bAddrDict, bAddrFam)
	}
	if c.dst.IsValid() {
		need = append(need, cDstAddr, bAddrDict, bAddrFam)
	}
	if len(c.ifaces) > 0 {
		need = append(need, cIface, bNames)
	}
	if c.measured != nil {
		need = append(need, c.measured.cols()...)
	}
	if err := s.verify(need...); err != nil {
		return nil, false, err
	}
	for _, p := range [...]struct {
		pfx netip.Prefix
		col int
		ok  *[]bool
	}{{c.src, cSrcAddr, &f.srcOK}, {c.dst, cDstAddr, &f.dstOK}} {
		if !p.pfx.IsValid() {
			continue
		}
		if err := s.checkIndex(p.col, s.nAddr); err != nil {
			return nil, false, err
		}
		mask := make([]bool, s.nAddr)
		some := false
		for i := range mask {
			mask[i] = p.pfx.Contains(addrOf(s.addrKey(uint32(i))))
			some = some || mask[i]
		}
		if !some {
			return nil, false, nil
		}
		*p.ok = mask
	}
	if len(c.ifaces) > 0 {
		names, err := s.nameDict()
		if err != nil {
			return nil, false, err
		}
		if err := s.checkIndex(cIface, len(names)); err != nil {
			return nil, false, err
		}
		mask := make([]bool, len(names))
		some := false
		for i, n := range names {
			mask[i] = matchIface(c.ifaces, n)
			some = some || mask[i]
		}
		if !some {
			return nil, false, nil
		}
		f.ifaceOK = mask
	}
	if c.namespace != "" || c.workload != "" {
		if f.names, ok, err = c.nameFilter(s); err != nil || !ok {
			return nil, false, err
		}
	}
	if c.measured != nil {
		if !c.measured.possible(s) {
			return nil, false, nil
		}
		f.measured = c.measured
	}
	return f, true, nil
}

// match tests row i; the dictionary columns were index-checked by
// forSegment.
func (f *segFilter) match(s *segment, i int) bool {
	c := &s.cols
	if f.checkTime && (int64(le.Uint64(c[cFirst][8*i:])) > f.until || int64(le.Uint64(c[cLast][8*i:])) < f.since) {
		return false
	}
	if f.proto >= 0 && int(c[cProto][i]) != f.proto {
		return false
	}
	if f.port >= 0 && int(le.Uint16(c[cSrcPort][2*i:])) != f.port && int(le.Uint16(c[cDstPort][2*i:])) != f.port {
		return false
	}
	if f.dir >= 0 && int(c[cDirection][i]) != f.dir {
		return false
	}
	if f.srcOK != nil && !f.srcOK[le.Uint32(c[cSrcAddr][4*i:])] {
		return false
	}
	if f.dstOK != nil && !f.dstOK[le.Uint32(c[cDstAddr][4*i:])] {
		return false
	}
	if f.ifaceOK != nil && !f.ifaceOK[le.Uint32(c[cIface][4*i:])] {
		return false
	}
	if f.names != nil && !f.names.match(s, i) {
		return false
	}
	if f.measured != nil && !f.measured.match(s, i) {
		return false
	}
	return true
}
