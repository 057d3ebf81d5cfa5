// Package query holds the latency capability's CLI verb, `loupe latency`,
// which reads the latency records of one or more stores (internal/store's
// latency log) directly, so that it works whether the agents run or not,
// and joins the records of two nodes' stores into paths that cross from
// one node to the other.
package query

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"loupe/internal/hop"
)

// Record is one line of `loupe latency --json`: a matched request or
// sampled segment, its hops in path order, across every store it was seen
// in. The first eight names are the CLI's contract.
type Record struct {
	TraceID string     `json:"trace_id"`
	SpanID  string     `json:"span_id"`
	SrcAddr netip.Addr `json:"src_addr"`
	DstAddr netip.Addr `json:"dst_addr"`
	SrcPort uint16     `json:"src_port"`
	DstPort uint16     `json:"dst_port"`
	Seq     uint32     `json:"seq"`
	Hops    []hop.Hop  `json:"hops"`

	Time  time.Time `json:"time"`
	Kind  string    `json:"kind"`
	Nodes []string  `json:"nodes,omitempty"`
	// RoundTrip is the time on the wire between two nodes both ways,
	// from this segment and the first reply segment seen by both nodes,
	// each node's part on its own clock: it needs no clock sync.
	RoundTrip *RoundTrip `json:"round_trip,omitempty"`
}

// RoundTrip is (A's reply arrival - A's send) - (B's reply send - B's
// arrival): what the network between A's last hook and B's first hook
// took there and back.
type RoundTrip struct {
	FromNode  string `json:"from_node"`
	FromIface string `json:"from_iface"`
	ToNode    string `json:"to_node"`
	ToIface   string `json:"to_iface"`
	LatencyNs int64  `json:"latency_ns"`
	ReplySeq  uint32 `json:"reply_seq"`
}

// segKey is a segment's identity across nodes: its inner 5-tuple and
// first byte (no NAT between the nodes' hooks).
type segKey struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
	seq          uint32
}

func keyOf(r *hop.Request) segKey {
	return segKey{r.SrcAddr, r.DstAddr, r.SrcPort, r.DstPort, r.Proto, r.Seq}
}

// sighting is a record with the store it came from.
type sighting struct {
	*hop.Request
	store int
}

// join turns the records of the stores (one slice per store) into output
// records. With one store every record is its own. With more, the records
// of one segment from different stores are put in path order (the node it
// left first: its first hook's time, on the wall clock) and joined: a hop
// from one node's last hook to the next node's first hook is reported, one
// way, only when the clocks are in sync (clockSync, or every record's
// agent said latency.clock_sync) or both records come from one machine
// (same boot id: one monotonic clock). Records seen by a single store
// are printed as they are.
func join(stores [][]*hop.Request, clockSync bool) []*Record {
	multi := len(stores) > 1
	bySeg := map[segKey][]sighting{}
	var order []segKey
	for si, rs := range stores {
		for _, r := range rs {
			k := keyOf(r)
			if _, ok := bySeg[k]; !ok {
				order = append(order, k)
			}
			bySeg[k] = append(bySeg[k], sighting{r, si})
		}
	}
	var out []*Record
	var joined []*joinedSeg
	for _, k := range order {
		for _, group := range splitByStore(bySeg[k]) {
			rec, js := joinOne(group, clockSync, multi)
			out = append(out, rec)
			if js != nil {
				joined = append(joined, js)
			}
		}
	}
	roundTrips(joined)
	slices.SortStableFunc(out, func(a, b *Record) int { return a.Time.Compare(b.Time) })
	return out
}

// splitByStore pairs the sightings of one segment: a retransmission is
// seen again by every store, so the i-th sighting of each store (in time
// order) is the i-th crossing.
func splitByStore(ss []sighting) [][]sighting {
	per := map[int][]sighting{}
	n := 0
	for _, s := range ss {
		per[s.store] = append(per[s.store], s)
		n = max(n, len(per[s.store]))
	}
	groups := make([][]sighting, n)
	for _, l := range per {
		slices.SortFunc(l, func(a, b sighting) int { return a.Time.Compare(b.Time) })
		for i, s := range l {
			groups[i] = append(groups[i], s)
		}
	}
	return groups
}

// joinedSeg is a segment seen by two nodes, for round trips.
type joinedSeg struct {
	rec        *Record
	from, to   sighting
	sent, recv hop.Point // the from node's last hook, the to node's first
}

func joinOne(ss []sighting, clockSync, multi bool) (*Record, *joinedSeg) {
	slices.SortFunc(ss, func(a, b sighting) int {
		return cmp.Or(firstWall(a).Compare(firstWall(b)), cmp.Compare(a.store, b.store))
	})
	r0 := ss[0].Request
	rec := &Record{
		TraceID: r0.TraceID, SpanID: r0.SpanID, SrcAddr: r0.SrcAddr, DstAddr: r0.DstAddr,
		SrcPort: r0.SrcPort, DstPort: r0.DstPort, Seq: r0.Seq, Time: r0.Time, Kind: r0.Kind,
		Hops: []hop.Hop{},
	}
	var js *joinedSeg
	for i, s := range ss {
		if rec.TraceID == "" {
			rec.TraceID, rec.SpanID = s.TraceID, s.SpanID
		}
		if s.Kind == hop.KindNameRequest {
			rec.Kind = s.Kind
		}
		if multi {
			rec.Nodes = append(rec.Nodes, s.Node)
		}
		if i > 0 {
			prev := ss[i-1]
			from, to := prev.Path[len(prev.Path)-1], s.Path[0]
			if ns, ok := crossLatency(prev, from, s, to, clockSync); ok {
				rec.Hops = append(rec.Hops, hop.Hop{
					FromIface: from.Iface, ToIface: to.Iface, Direction: hop.Out,
					LatencyNs: ns, FromNode: prev.Node, ToNode: s.Node, FromPod: from.Pod, ToPod: to.Pod,
				})
			}
			if i == 1 {
				js = &joinedSeg{rec: rec, from: prev, to: s, sent: from, recv: to}
			}
		}
		for _, h := range s.Hops {
			if multi {
				h.FromNode, h.ToNode = s.Node, s.Node
			}
			rec.Hops = append(rec.Hops, h)
		}
	}
	return rec, js
}

func firstWall(s sighting) time.Time {
	if len(s.Path) == 0 {
		return s.Time
	}
	return s.Wall(s.Path[0])
}

func sameClock(a, b sighting) bool { return a.BootID != "" && a.BootID == b.BootID }

// crossLatency is the one-way time from a's hook p to b's hook q, when it
// can be known.
func crossLatency(a sighting, p hop.Point, b sighting, q hop.Point, clockSync bool) (int64, bool) {
	switch {
	case sameClock(a, b):
		return int64(q.TimeNs - p.TimeNs), true
	case clockSync || (a.ClockSync && b.ClockSync):
		return b.Wall(q).Sub(a.Wall(p)).Nanoseconds(), true
	}
	return 0, false
}

// roundTrips pairs each segment seen by two nodes with the first reply
// segment (reversed 5-tuple, sent back by the receiving node after it
// arrived there) seen by the same two nodes.
func roundTrips(js []*joinedSeg) {
	type conn struct {
		src, dst     netip.Addr
		sport, dport uint16
	}
	replies := map[conn][]*joinedSeg{}
	for _, j := range js {
		c := conn{j.rec.SrcAddr, j.rec.DstAddr, j.rec.SrcPort, j.rec.DstPort}
		replies[c] = append(replies[c], j)
	}
	for _, j := range js {
		back := conn{j.rec.DstAddr, j.rec.SrcAddr, j.rec.DstPort, j.rec.SrcPort}
		var best *joinedSeg
		for _, r := range replies[back] {
			if r.from.store != j.to.store || r.to.store != j.from.store {
				continue
			}
			// The reply leaves the far node after the segment arrived.
			if r.from.Wall(r.sent).Before(j.to.Wall(j.recv)) && !sameClock(r.from, j.to) {
				continue
			}
			if sameClock(r.from, j.to) && r.sent.TimeNs < j.recv.TimeNs {
				continue
			}
			if best == nil || r.to.Wall(r.recv).Before(best.to.Wall(best.recv)) {
				best = r
			}
		}
		if best == nil {
			continue
		}
		near := int64(best.recv.TimeNs - j.sent.TimeNs) // on the sender's clock
		far := int64(best.sent.TimeNs - j.recv.TimeNs)  // on the receiver's
		j.rec.RoundTrip = &RoundTrip{
			FromNode: j.from.Node, FromIface: j.sent.Iface, ToNode: j.to.Node, ToIface: j.recv.Iface,
			LatencyNs: near - far, ReplySeq: best.rec.Seq,
		}
	}
}
