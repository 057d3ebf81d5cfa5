package store

import (
	"fmt"
	"strings"
	"time"

	"loupe/internal/flow"
)

// The filters on what was measured of a record: the kernel signals, DNS
// and accuracy (Query.MinRTT, Has and Accuracy). Their columns are sparse
// (format.go): a segment where no record measured a signal has no column
// for it, so a filter that needs the signal skips such a segment whole,
// and the common segment, all exact and without signals, costs nothing.

// Signal is something a record can have measured (Query.Has).
type Signal int

const (
	// SignalRTT: a smoothed RTT sample (rtt_max_ns present).
	SignalRTT Signal = iota
	// SignalHandshakeRTT: a TCP handshake's RTT (handshake_rtt_ns).
	SignalHandshakeRTT
	// SignalRetransmits: at least one retransmitted segment.
	SignalRetransmits
	// SignalDrops: at least one packet dropped by the kernel.
	SignalDrops
	// SignalDNS: a DNS message (dns_id or dns_qname present).
	SignalDNS
	numSignals
)

var signalNames = [numSignals]string{"rtt", "handshake_rtt", "retransmits", "drops", "dns"}

func (s Signal) String() string {
	if s >= 0 && s < numSignals {
		return signalNames[s]
	}
	return fmt.Sprintf("signal(%d)", int(s))
}

// SignalNames lists the names ParseSignal accepts.
func SignalNames() []string { return signalNames[:] }

// ParseSignal is the inverse of Signal.String.
func ParseSignal(s string) (Signal, error) {
	for g := range numSignals {
		if g.String() == s {
			return g, nil
		}
	}
	return 0, fmt.Errorf("unknown signal %q (want %s)", s, strings.Join(signalNames[:], ", "))
}

// measuredQuery is the compiled form of MinRTT, Has and Accuracy; nil
// when the query has none of them.
type measuredQuery struct {
	minRTT uint64 // nanoseconds; 0: none
	has    [numSignals]bool
	// pres are the presence bits every matching record has.
	pres flow.Presence
	// acc says which accuracies match; nil: all.
	acc []bool
}

func compileMeasured(q *Query) (*measuredQuery, error) {
	if q.MinRTT < 0 {
		return nil, fmt.Errorf("store: query minimum RTT %v is negative", q.MinRTT)
	}
	if q.MinRTT == 0 && len(q.Has) == 0 && len(q.Accuracy) == 0 {
		return nil, nil
	}
	m := &measuredQuery{minRTT: uint64(q.MinRTT / time.Nanosecond)}
	for _, s := range q.Has {
		if s < 0 || s >= numSignals {
			return nil, fmt.Errorf("store: query %v: not a signal", s)
		}
		m.has[s] = true
	}
	if len(q.Accuracy) > 0 {
		m.acc = make([]bool, 256)
		for _, a := range q.Accuracy {
			m.acc[a] = true
		}
	}
	if m.has[SignalRTT] || m.minRTT > 0 {
		m.pres |= flow.HasRTTMax
	}
	if m.has[SignalHandshakeRTT] {
		m.pres |= flow.HasHandshakeRTT
	}
	return m, nil
}

// cols are the columns the filter reads.
func (m *measuredQuery) cols() []int {
	out := []int{cPresence}
	if m.minRTT > 0 {
		out = append(out, cRTTMax)
	}
	if m.has[SignalRetransmits] {
		out = append(out, cRetransmits)
	}
	if m.has[SignalDrops] {
		out = append(out, cDropPackets)
	}
	if m.acc != nil {
		out = append(out, cAccuracy)
	}
	return out
}

// possible reports whether a record of s can match: a signal the filter
// needs has a column in s, and an accuracy other than exact is asked for
// where s holds only exact records.
func (m *measuredQuery) possible(s *segment) bool {
	c := &s.cols
	if len(c[cPresence]) == 0 && (m.pres != 0 || m.has[SignalDNS] || m.has[SignalRetransmits] || m.has[SignalDrops]) {
		return false
	}
	if m.has[SignalRetransmits] && len(c[cRetransmits]) == 0 || m.has[SignalDrops] && len(c[cDropPackets]) == 0 {
		return false
	}
	if m.minRTT > 0 && len(c[cRTTMax]) == 0 {
		return false
	}
	return m.acc == nil || len(c[cAccuracy]) > 0 || m.acc[flow.Exact]
}

// match tests row i of s.
func (m *measuredQuery) match(s *segment, i int) bool {
	c := &s.cols
	has := flow.Presence(sparseU32(c[cPresence], i))
	if has&m.pres != m.pres {
		return false
	}
	if m.minRTT > 0 && sparseU64(c[cRTTMax], i) < m.minRTT {
		return false
	}
	if m.has[SignalDNS] && !has.Any(flow.HasDNSID|flow.HasDNSQName) {
		return false
	}
	if m.has[SignalRetransmits] && sparseU64(c[cRetransmits], i) == 0 {
		return false
	}
	if m.has[SignalDrops] && sparseU64(c[cDropPackets], i) == 0 {
		return false
	}
	return m.acc == nil || m.acc[sparseU8(c[cAccuracy], i)]
}
