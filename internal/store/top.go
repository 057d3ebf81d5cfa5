package store

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"loupe/internal/flow"
)

// GroupBy is what Top groups records by.
type GroupBy int

const (
	// BySrc groups by source address.
	BySrc GroupBy = iota
	// ByDst groups by destination address.
	ByDst
	// ByPair groups by (source, destination) address pair.
	ByPair
	// ByPort groups by (service port, protocol): the port of the side
	// that accepted the connection, whichever direction a record has
	// (service.go).
	ByPort
	// BySrcPort groups by (source port, protocol).
	BySrcPort
	// ByDstPort groups by (destination port, protocol).
	ByDstPort
	numGroupBy
)

var groupNames = [numGroupBy]string{"src", "dst", "pair", "port", "src-port", "dst-port"}

func (g GroupBy) String() string {
	if g >= 0 && g < numGroupBy {
		return groupNames[g]
	}
	return fmt.Sprintf("groupby(%d)", int(g))
}

// ParseGroupBy is the inverse of GroupBy.String.
func ParseGroupBy(s string) (GroupBy, error) {
	for g := range numGroupBy {
		if g.String() == s {
			return g, nil
		}
	}
	return 0, fmt.Errorf("unknown grouping %q (want %s)", s, strings.Join(groupNames[:], ", "))
}

// byPort reports whether g groups by a port and protocol.
func (g GroupBy) byPort() bool { return g >= ByPort }

// TopEntry is one group of a Top answer. Only the fields of the grouping
// are set: Src for BySrc, Dst for ByDst, both for ByPair, Port and Proto
// for the port groupings. Non-IP flows group under the zero netip.Addr;
// flows without ports (non-IP, ICMP, other protocols) under port 0 in
// ByPort, and under their port fields (ICMP type and code) in BySrcPort
// and ByDstPort.
type TopEntry struct {
	Src, Dst netip.Addr
	Port     uint16
	Proto    uint8
	Packets  uint64
	Bytes    uint64
	// Flows counts distinct flows: distinct flow.Keys among the group's
	// records. A flow exported over several eviction intervals, as
	// several records, counts once.
	Flows uint64
}

// topLess orders entries for Top: bytes, packets and flows descending, then
// the group key ascending, so equal totals come out in a fixed order.
func topLess(a, b *TopEntry) bool {
	if c := cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(b.Packets, a.Packets), cmp.Compare(b.Flows, a.Flows),
		a.Src.Compare(b.Src), a.Dst.Compare(b.Dst), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port)); c != 0 {
		return c < 0
	}
	return false
}

// topState is what the workers of one Top share.
type topState struct {
	cq    *compiled
	by    GroupBy
	in    *interner // canonical addresses: groups
	raw   *interner // addresses whose canonical form differs: flow identity
	ctxs  *ctxInterner
	table *partTable // ByPair and the port groupings
	keys  *keySet
	svc   *serviceTable // ByPort
	vlan  int           // the VLAN column, or -1 if this format has none
}

// topWorker holds one goroutine's partial aggregate.
type topWorker struct {
	st      *topState
	direct  []agg // BySrc, ByDst: indexed by global address id
	buf     partBuf
	keyBuf  keyBuf
	fresh   []uint64
	remap   []uint32
	rawMap  []uint32
	ctx     ctxCache
	matched uint64
	pending uint64 // records buffered since the last flush
}

// Top returns the n groups with the most bytes among the records matching
// q (all groups if n <= 0), ordered by bytes, packets and flows descending,
// ties broken by the group key ascending. Segments are aggregated in
// parallel, one goroutine per CPU. Memory grows with the number of
// distinct flows matched, which Top counts exactly.
func (r *Reader) Top(ctx context.Context, q Query, by GroupBy, n int) ([]TopEntry, error) {
	if by < 0 || by >= numGroupBy {
		return nil, fmt.Errorf("store: top: unknown grouping %d", by)
	}
	cq, err := q.compile()
	if err != nil {
		return nil, err
	}
	rep := q.report()
	sn, err := r.snapshot(ctx, cq.since, cq.until, rep)
	if err != nil {
		return nil, err
	}
	defer sn.close()
	st := &topState{cq: &cq, by: by, in: &interner{}, raw: &interner{}, ctxs: &ctxInterner{},
		table: &partTable{}, keys: &keySet{}, vlan: -1}
	if c, ok := fieldCol("vlan_id"); ok {
		st.vlan = c
	}
	if by == ByPort {
		if st.svc, err = r.servicePass(ctx, sn, st); err != nil {
			return nil, err
		}
	}
	workers := make([]*topWorker, maxWorkers())
	for i := range workers {
		workers[i] = &topWorker{st: st}
	}
	err = r.parallel(ctx, sn, rep, func(w int, s *segment) error {
		return workers[w].segment(ctx, s)
	})
	if err != nil {
		return nil, err
	}
	for _, w := range workers {
		w.flush()
	}
	// Fold the other workers' direct aggregates into the first.
	total := workers[0]
	total.direct = slices.Grow(total.direct, st.in.size()-len(total.direct))[:st.in.size()]
	for _, w := range workers[1:] {
		total.matched += w.matched
		for i := range w.direct {
			total.direct[i].add(&w.direct[i])
		}
	}
	rep.Matched = total.matched
	return total.top(n), nil
}

// segment aggregates one segment. It checks the segment's index columns
// before touching the aggregate, so a corrupt segment is skipped whole.
func (w *topWorker) segment(ctx context.Context, s *segment) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st := w.st
	f, ok, err := st.check(s)
	if err != nil || !ok {
		return err
	}
	w.remap = st.in.remap(s, w.remap)
	w.rawMap = st.raw.rawIDs(s, w.remap, w.rawMap)
	if n := st.in.size(); len(w.direct) < n {
		w.direct = slices.Grow(w.direct, n-len(w.direct))[:n]
	}
	w.ctx.reset()
	var vlanCol []byte
	if st.vlan >= 0 {
		vlanCol = s.cols[st.vlan]
	}
	c := &s.cols
	bytes, packets := c[cBytes], c[cPackets]
	src, dst, sport, dport, proto, eth := c[cSrcAddr], c[cDstAddr], c[cSrcPort], c[cDstPort], c[cProto], c[cEthType]
	remap, rawMap, direct := w.remap, w.rawMap, w.direct
	simple := f.simple()
	by := st.by
	var matched uint64
	for i := range s.n {
		if !simple && !f.match(s, i) {
			continue
		}
		sa, da := le.Uint32(src[4*i:]), le.Uint32(dst[4*i:])
		sp, dp := le.Uint16(sport[2*i:]), le.Uint16(dport[2*i:])
		var g uint64
		switch by {
		case BySrc:
			g = uint64(remap[sa])
		case ByDst:
			g = uint64(remap[da])
		case ByPair:
			g = uint64(remap[sa])<<32 | uint64(remap[da])
		case ByPort:
			var port uint16
			if hasPorts(le.Uint16(eth[2*i:]), proto[i]) {
				port = st.svc.port(remap[sa], remap[da], sp, dp, proto[i])
			}
			g = uint64(proto[i])<<16 | uint64(port)
		case BySrcPort:
			g = uint64(proto[i])<<16 | uint64(sp)
		case ByDstPort:
			g = uint64(proto[i])<<16 | uint64(dp)
		}
		b, p := le.Uint64(bytes[8*i:]), le.Uint64(packets[8*i:])
		if by == BySrc || by == ByDst {
			a := &direct[g]
			a.bytes += b
			a.packets += p
		} else {
			w.buf.add(g, b, p, 0)
		}
		k := flowKey{
			a: uint64(rawMap[sa])<<32 | uint64(rawMap[da]),
			b: uint64(w.ctx.id(s, i, vlanCol, st.ctxs)+1)<<32 | uint64(sp)<<16 | uint64(dp),
		}
		w.keyBuf.add(k, g)
		matched++
	}
	w.matched += matched
	w.pending += matched
	if w.pending >= flushEvery {
		w.flush()
	}
	return nil
}

// flushEvery is how many records a worker buffers before it folds them
// into the shared tables. Large folds keep each partition's table in the
// CPU caches while it takes its keys (a table is 1/256 of the whole);
// the buffers take about 40 bytes a record.
const flushEvery = 1 << 20

// flush folds the worker's buffered keys and groups into the shared
// tables.
func (w *topWorker) flush() {
	st := w.st
	w.fresh = st.keys.flush(&w.keyBuf, w.fresh[:0])
	if by := st.by; by == BySrc || by == ByDst {
		if n := st.in.size(); len(w.direct) < n {
			w.direct = slices.Grow(w.direct, n-len(w.direct))[:n]
		}
		for _, g := range w.fresh {
			w.direct[g].flows++
		}
	} else {
		for _, g := range w.fresh {
			w.buf.add(g, 0, 0, 1)
		}
		st.table.flush(&w.buf)
	}
	w.pending = 0
}

// check verifies what Top reads of a segment: the filter's blocks, the
// whole flow key and the counters (and for ByPort what the service pass
// reads), and the dictionary indices. Both passes call it, so that they
// skip the same damaged segments. ok is false if no record can match q
// (the segment may still hold SYNs of the window).
func (st *topState) check(s *segment) (f *segFilter, ok bool, err error) {
	f, ok, err = st.cq.forSegment(s)
	if err != nil {
		return nil, false, err
	}
	need := []int{cBytes, cPackets, cSrcAddr, cDstAddr, bAddrDict, bAddrFam, cSrcMAC, cDstMAC, bMACDict,
		cIfIndex, cEthType, cSrcPort, cDstPort, cProto, cDirection}
	if st.vlan >= 0 {
		need = append(need, st.vlan)
	}
	if st.by == ByPort {
		need = append(need, cTCPFlags, cFirst, cLast)
	}
	if err := s.verify(need...); err != nil {
		return nil, false, err
	}
	for _, c := range [...]struct{ col, limit int }{{cSrcAddr, s.nAddr}, {cDstAddr, s.nAddr}, {cSrcMAC, s.nMAC}, {cDstMAC, s.nMAC}} {
		if err := s.checkIndex(c.col, c.limit); err != nil {
			return nil, false, err
		}
	}
	return f, ok, nil
}

// hasPorts reports whether a record of this EtherType and protocol carries
// transport ports (flow.Key.PortKind, per record without building a Key).
func hasPorts(ethType uint16, proto uint8) bool {
	return (ethType == flow.EtherTypeIPv4 || ethType == flow.EtherTypeIPv6) && flow.HasPorts(proto)
}

// entryOf builds the TopEntry of one group key.
func (w *topWorker) entryOf(k uint64, a *agg) TopEntry {
	in := w.st.in
	e := TopEntry{Packets: a.packets, Bytes: a.bytes, Flows: a.flows}
	switch by := w.st.by; {
	case by == BySrc:
		e.Src = addrOf(in.keys[k])
	case by == ByDst:
		e.Dst = addrOf(in.keys[k])
	case by == ByPair:
		e.Src, e.Dst = addrOf(in.keys[k>>32]), addrOf(in.keys[uint32(k)])
	case by.byPort():
		e.Proto, e.Port = uint8(k>>16), uint16(k)
	}
	return e
}

// topHeap keeps the n best entries seen so far, worst at the root.
type topHeap []TopEntry

func (h topHeap) Len() int           { return len(h) }
func (h topHeap) Less(i, j int) bool { return topLess(&h[j], &h[i]) }
func (h topHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *topHeap) Push(x any)        { *h = append(*h, x.(TopEntry)) }
func (h *topHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (w *topWorker) top(n int) []TopEntry {
	h := &topHeap{}
	offer := func(k uint64, a *agg) {
		if a.flows == 0 {
			return // an address no matching record has
		}
		full := n > 0 && h.Len() >= n
		// Most groups lose on bytes alone; only build an entry (addresses
		// and all) for those that may enter the heap.
		if full && a.bytes < (*h)[0].Bytes {
			return
		}
		e := w.entryOf(k, a)
		switch {
		case !full:
			heap.Push(h, e)
		case topLess(&e, &(*h)[0]):
			(*h)[0] = e
			heap.Fix(h, 0)
		}
	}
	if by := w.st.by; by == BySrc || by == ByDst {
		for i := range w.direct {
			offer(uint64(i), &w.direct[i])
		}
	} else {
		w.st.table.each(offer)
	}
	out := []TopEntry(*h)
	slices.SortFunc(out, func(a, b TopEntry) int {
		if topLess(&a, &b) {
			return -1
		}
		if topLess(&b, &a) {
			return 1
		}
		return 0
	})
	return out
}
