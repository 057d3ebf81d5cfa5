package store

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"loupe/internal/flow"
)

// Top's groups say what the kernel signals and DNS said of their records
// (TopEntry.Signals), and Top can rank the groups by them (Sort). Few
// records carry a signal, and the sums are kept apart as the error sums
// are (accuracy.go): in a map of the groups that have one, filled by a loop
// of its own over the segments with a presence column (the others have
// none: format.go's sparse columns), so that segments without signals cost
// nothing more.

// Sort is what Top ranks its groups by.
type Sort int

const (
	// SortBytes ranks by bytes, packets and flows: the default.
	SortBytes Sort = iota
	// SortRTT ranks by the largest smoothed RTT a record of the group
	// saw (rtt_max_ns), among the groups with an RTT.
	SortRTT
	// SortDrops ranks by the packets the kernel dropped (drop_packets,
	// summed), among the groups with drops.
	SortDrops
	// SortRetransmits ranks by the segments retransmitted (retransmits,
	// summed), among the groups whose records counted them.
	SortRetransmits
	// SortDNSLatency ranks by the longest DNS latency (dns_latency_ns),
	// among the groups with an answered query.
	SortDNSLatency
	numSorts
)

var sortNames = [numSorts]string{"bytes", "rtt", "drops", "retransmits", "dns_latency"}

func (s Sort) String() string {
	if s >= 0 && s < numSorts {
		return sortNames[s]
	}
	return fmt.Sprintf("sort(%d)", int(s))
}

// ParseSort is the inverse of Sort.String.
func ParseSort(s string) (Sort, error) {
	for o := range numSorts {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("unknown ranking %q (want %s)", s, strings.Join(sortNames[:], ", "))
}

// field is the presence bit a group needs to be ranked by s.
func (s Sort) field() flow.Presence {
	switch s {
	case SortRTT:
		return flow.HasRTTMax
	case SortDrops:
		return flow.HasDropPackets
	case SortRetransmits:
		return flow.HasRetransmits
	case SortDNSLatency:
		return flow.HasDNSLatency
	}
	return 0
}

// SignalSums are what the records of a Top group said of the kernel
// signals and DNS. Has says which of the sums hold something: a group
// none of whose records measured a signal has none of its bits.
type SignalSums struct {
	Has flow.Presence
	// RTTMinNs and RTTMaxNs are the smallest rtt_min_ns and the largest
	// rtt_max_ns of the group's records (flow.HasRTTMin, HasRTTMax).
	RTTMinNs, RTTMaxNs uint64
	// Retransmits, DropPackets and DropBytes are summed (HasRetransmits,
	// HasDropPackets, HasDropBytes).
	Retransmits            uint64
	DropPackets, DropBytes uint64
	// DNSLatencyMaxNs is the longest dns_latency_ns (HasDNSLatency).
	DNSLatencyMaxNs uint64
}

// sigFields are the presence bits SignalSums sums.
const sigFields = flow.HasRTTMin | flow.HasRTTMax | flow.HasRetransmits | flow.HasDropPackets | flow.HasDropBytes | flow.HasDNSLatency

// sigCols are the columns signal sums read (Top verifies them).
var sigCols = [...]int{cPresence, cRTTMin, cRTTMax, cRetransmits, cDropPackets, cDropBytes, cDNSLatency}

// add adds one record's fields, those of has.
func (s *SignalSums) add(has flow.Presence, rttMin, rttMax, retrans, dropPkts, dropBytes, dnsLat uint64) {
	if has.Any(flow.HasRTTMin) {
		if !s.Has.Any(flow.HasRTTMin) || rttMin < s.RTTMinNs {
			s.RTTMinNs = rttMin
		}
	}
	if has.Any(flow.HasRTTMax) {
		s.RTTMaxNs = max(s.RTTMaxNs, rttMax)
	}
	if has.Any(flow.HasDNSLatency) {
		s.DNSLatencyMaxNs = max(s.DNSLatencyMaxNs, dnsLat)
	}
	s.Retransmits += retrans
	s.DropPackets += dropPkts
	s.DropBytes += dropBytes
	s.Has |= has & sigFields
}

// merge adds the records o summed.
func (s *SignalSums) merge(o *SignalSums) {
	s.add(o.Has, o.RTTMinNs, o.RTTMaxNs, o.Retransmits, o.DropPackets, o.DropBytes, o.DNSLatencyMaxNs)
}

// metric is the sum s ranks a group by.
func (s *SignalSums) metric(o Sort) uint64 {
	switch o {
	case SortRTT:
		return s.RTTMaxNs
	case SortDrops:
		return s.DropPackets
	case SortRetransmits:
		return s.Retransmits
	case SortDNSLatency:
		return s.DNSLatencyMaxNs
	}
	return 0
}

// sigSums are the signal sums of the groups with a record that measured
// one, by group key (as errSums).
type sigSums map[uint64]SignalSums

// segment adds the signals of the records of s that match f to their
// groups (group as in errSums.segment).
func (e sigSums) segment(s *segment, f *segFilter, group func(i int) (uint64, bool)) {
	pres := s.cols[cPresence]
	if len(pres) == 0 {
		return // no record measured anything
	}
	c := &s.cols
	simple := f.simple()
	for i := range s.n {
		has := flow.Presence(le.Uint32(pres[4*i:]))
		if !has.Any(sigFields) || (!simple && !f.match(s, i)) {
			continue
		}
		g, ok := group(i)
		if !ok {
			continue
		}
		sum := e[g]
		sum.add(has, sparseU64(c[cRTTMin], i), sparseU64(c[cRTTMax], i), sparseU64(c[cRetransmits], i),
			sparseU64(c[cDropPackets], i), sparseU64(c[cDropBytes], i), sparseU64(c[cDNSLatency], i))
		e[g] = sum
	}
}

// merge adds o's sums into e.
func (e sigSums) merge(o sigSums) {
	for g, s := range o {
		sum := e[g]
		sum.merge(&s)
		e[g] = sum
	}
}

// signalCandidates returns the groups that may be among the first n by
// the metric of by (all of them if n <= 0), among those with it: the
// groups whose (metric, bytes, packets) is at least the n-th best, ties at
// the n-th place included, as candidates does for bytes.
func (w *sumWorker) signalCandidates(n int, sig sigSums, by Sort) []topCand {
	var out []topCand
	w.each(func(g uint64, a *agg) {
		if s, ok := sig[g]; ok && a.flows > 0 && s.Has.Any(by.field()) {
			out = append(out, topCand{g, *a})
		}
	})
	rank := func(a, b *topCand) int {
		sa, sb := sig[a.g], sig[b.g]
		return cmp.Or(cmp.Compare(sb.metric(by), sa.metric(by)), cmp.Compare(b.bytes, a.bytes), cmp.Compare(b.packets, a.packets))
	}
	slices.SortFunc(out, func(a, b topCand) int { return rank(&a, &b) })
	if n > 0 && len(out) > n {
		last := n
		for last < len(out) && rank(&out[n-1], &out[last]) == 0 {
			last++
		}
		out = out[:last]
	}
	return out
}

// signalLess orders Top's entries for a ranking by a signal: its metric
// descending, then as topLess.
func signalLess(a, b *TopEntry, by Sort) bool {
	if c := cmp.Compare(b.Signals.metric(by), a.Signals.metric(by)); c != 0 {
		return c < 0
	}
	return topLess(a, b)
}
