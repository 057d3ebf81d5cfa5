package promflow

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/flow"
)

// The kernel signals and DNS as metrics: histograms of the RTTs and DNS
// latencies the records measured, and counters of their retransmissions,
// drops and DNS exchanges. Every label has a bounded set of values: the
// interface, direction and protocol as the traffic counters have them, the
// kernel's drop reasons (its enum skb_drop_reason names: a few hundred at
// most) and the DNS response codes (4 096 at most, a handful in practice).
// Their label sets have a cap of their own, max_series as well, past which
// a new one folds into its metric's fold series (every label "other").
//
// A record on no interface (the signals of a 5-tuple that no record of the
// interval carried: a socket whose egress the agent does not watch) has
// iface="none".

// NoIface is the iface label of the signals measured on no interface.
const NoIface = "none"

// sigKind is one signal metric.
type sigKind uint8

const (
	sigRTT sigKind = iota
	sigHandshake
	sigDNSLatency
	sigDNSExchanges
	sigRetransmits
	sigDrops
	sigDropBytes
	numSigKinds
)

// sigMetrics describes each signal metric: its name, help, labels beyond
// iface, and whether it is a histogram (of seconds).
var sigMetrics = [numSigKinds]struct {
	name, help string
	labels     []string
	histogram  bool
}{
	sigRTT: {"loupe_flow_rtt_seconds", "Smoothed RTT of TCP sockets: one observation per socket and eviction interval, its last smoothed RTT (rtt_last_ns), by the interface of the record that carries it.",
		nil, true},
	sigHandshake: {"loupe_flow_handshake_rtt_seconds", "TCP handshake RTTs timed at the hooks (handshake_rtt_ns).", nil, true},
	sigDNSLatency: {"loupe_flow_dns_latency_seconds", "DNS latency at the hooks, from a query to its response (dns_latency_ns), by response code.",
		[]string{"rcode"}, true},
	sigDNSExchanges: {"loupe_flow_dns_queries_total", `DNS queries seen at the hooks, by response code (rcode="none": no response).`,
		[]string{"rcode"}, false},
	sigRetransmits: {"loupe_flow_retransmits_total", "TCP segments retransmitted (retransmits).", nil, false},
	sigDrops: {"loupe_flow_drops_total", "Packets the kernel dropped, by the flow record's interface, direction and protocol and the kernel's drop reason (drop_reasons).",
		[]string{"direction", "proto", "reason"}, false},
	sigDropBytes: {"loupe_flow_dropped_bytes_total", "IP length of the packets the kernel dropped (drop_bytes).",
		[]string{"direction", "proto"}, false},
}

// sigBuckets are the histograms' upper bounds, seconds: 50 µs to 10 s.
var sigBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// sigKey identifies a signal series. Fixed-size and without pointers, as
// seriesKey: iface is an interned name (0: none), label an interned reason
// or response code.
type sigKey struct {
	iface uint32
	label uint32
	proto uint16
	kind  sigKind
	dir   flow.Direction
	fold  bool
}

type sigSeries struct {
	labels  []string
	value   uint64   // a counter's value, a histogram's count
	sum     float64  // a histogram's sum, seconds
	buckets []uint64 // a histogram's counts per bucket (not cumulative)
	updated time.Time
}

// sigState is the sink's signal series.
type sigState struct {
	descs  [numSigKinds]*prometheus.Desc
	series map[sigKey]*sigSeries
	// labels interns the reasons and response codes; both sets are
	// bounded, so nothing is forgotten.
	labels    map[string]uint32
	labelName []string
	folded    uint64
	foldDesc  *prometheus.Desc
	countDesc *prometheus.Desc
}

func newSigState() sigState {
	st := sigState{series: make(map[sigKey]*sigSeries), labels: make(map[string]uint32), labelName: []string{""}}
	for k, m := range sigMetrics {
		st.descs[k] = prometheus.NewDesc(m.name, m.help, append([]string{"iface"}, m.labels...), nil)
	}
	st.foldDesc = prometheus.NewDesc("loupe_flow_signal_series_folded_total",
		`Observations counted in a signal metric's fold series (every label "other") because the series cap was reached.`, nil, nil)
	st.countDesc = prometheus.NewDesc("loupe_flow_signal_series",
		"Label sets of the loupe_flow_* signal metrics now (their cap is max_series too).", nil, nil)
	return st
}

func (st *sigState) label(s string) uint32 {
	if id, ok := st.labels[s]; ok {
		return id
	}
	id := uint32(len(st.labelName))
	st.labels[s] = id
	st.labelName = append(st.labelName, s)
	return id
}

// observe counts what r measured. iface is r's interned interface name,
// 0 for a record on no interface.
func (s *Sink) observe(r *flow.Record, iface uint32, now time.Time) {
	h := r.Has
	if !h.Any(flow.HasRTTLast | flow.HasHandshakeRTT | flow.HasDNSID | flow.HasDNSRcode | flow.HasDNSLatency |
		flow.HasRetransmits | flow.HasDropReasons | flow.HasDropBytes) {
		return
	}
	st := &s.sig
	base := sigKey{iface: iface}
	if h.Any(flow.HasRTTLast) {
		s.sigAdd(sigKey{iface: iface, kind: sigRTT}, now, 1, r.RTTLastNs)
	}
	if h.Any(flow.HasHandshakeRTT) {
		s.sigAdd(sigKey{iface: iface, kind: sigHandshake}, now, 1, r.HandshakeRTTNs)
	}
	if h.Any(flow.HasDNSID | flow.HasDNSRcode | flow.HasDNSLatency) {
		rcode := None
		if h.Any(flow.HasDNSRcode) {
			rcode = flow.RcodeName(r.DNSRcode)
		}
		k := base
		k.kind, k.label = sigDNSExchanges, st.label(rcode)
		s.sigAdd(k, now, 1, 0)
		if h.Any(flow.HasDNSLatency) {
			k.kind = sigDNSLatency
			s.sigAdd(k, now, 1, r.DNSLatencyNs)
		}
	}
	if h.Any(flow.HasRetransmits) {
		s.sigAdd(sigKey{iface: iface, kind: sigRetransmits}, now, r.Retransmits, 0)
	}
	proto := uint16(r.Proto)
	if !r.IsIP() {
		proto = protoNone
	}
	if h.Any(flow.HasDropReasons) {
		for reason, n := range r.DropReasons {
			s.sigAdd(sigKey{iface: iface, kind: sigDrops, dir: r.Direction, proto: proto, label: st.label(reason)}, now, n, 0)
		}
	}
	if h.Any(flow.HasDropBytes) {
		s.sigAdd(sigKey{iface: iface, kind: sigDropBytes, dir: r.Direction, proto: proto}, now, r.DropBytes, 0)
	}
}

// sigAdd adds n to a counter, or one observation of ns nanoseconds to a
// histogram, in k's series: a new one while there is room (max_series),
// else k's metric's fold series.
func (s *Sink) sigAdd(k sigKey, now time.Time, n, ns uint64) {
	st := &s.sig
	t := st.series[k]
	if t == nil {
		if len(st.series) >= s.opts.MaxSeries {
			st.folded++
			k = sigKey{kind: k.kind, fold: true}
			t = st.series[k]
		}
		if t == nil {
			t = &sigSeries{labels: s.sigLabels(k)}
			if sigMetrics[k.kind].histogram {
				t.buckets = make([]uint64, len(sigBuckets))
			}
			st.series[k] = t // a fold series may take the cap's last slots: at most one per metric more
		}
	}
	t.updated = now
	if t.buckets == nil {
		t.value += n
		return
	}
	sec := float64(ns) / 1e9
	t.value++
	t.sum += sec
	for i, ub := range sigBuckets {
		if sec <= ub {
			t.buckets[i]++
			break
		}
	}
}

// sigLabels builds the label values of a new signal series.
func (s *Sink) sigLabels(k sigKey) []string {
	m := sigMetrics[k.kind]
	out := make([]string, 0, 1+len(m.labels))
	if k.fold {
		for range 1 + len(m.labels) {
			out = append(out, Other)
		}
		return out
	}
	iface := NoIface
	if k.iface != 0 {
		if iface = s.ifaceName[k.iface]; iface == "" {
			iface = UnknownIface
		}
	}
	out = append(out, iface)
	for _, l := range m.labels {
		switch l {
		case "direction":
			out = append(out, k.dir.String())
		case "proto":
			out = append(out, protoLabel(k.proto))
		default: // reason, rcode
			out = append(out, s.sig.labelName[k.label])
		}
	}
	return out
}

// sigExpire deletes the signal series idle longer than IdleTTL.
func (s *Sink) sigExpire(now time.Time) (expired bool) {
	for k, t := range s.sig.series {
		if now.Sub(t.updated) > s.opts.IdleTTL {
			delete(s.sig.series, k)
			expired = true
		}
	}
	return expired
}

// sigSnapshot copies the signal series, under the sink's lock.
func (s *Sink) sigSnapshot() (snap []sigSnap, folded uint64) {
	for k, t := range s.sig.series {
		c := sigSnap{kind: k.kind, s: *t}
		c.s.buckets = append([]uint64(nil), t.buckets...)
		snap = append(snap, c)
	}
	return snap, s.sig.folded
}

type sigSnap struct {
	kind sigKind
	s    sigSeries
}

// sigCollect sends the signal metrics of a snapshot.
func (s *Sink) sigCollect(ch chan<- prometheus.Metric, snap []sigSnap, folded uint64) {
	for _, c := range snap {
		d := s.sig.descs[c.kind]
		if !sigMetrics[c.kind].histogram {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(c.s.value), c.s.labels...)
			continue
		}
		cum := make(map[float64]uint64, len(sigBuckets))
		var acc uint64
		for i, ub := range sigBuckets {
			acc += c.s.buckets[i]
			cum[ub] = acc
		}
		ch <- prometheus.MustNewConstHistogram(d, c.s.value, c.s.sum, cum, c.s.labels...)
	}
	ch <- prometheus.MustNewConstMetric(s.sig.foldDesc, prometheus.CounterValue, float64(folded))
	ch <- prometheus.MustNewConstMetric(s.sig.countDesc, prometheus.GaugeValue, float64(len(snap)))
}
