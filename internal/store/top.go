package store

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
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
	// ByPort groups by (destination port, protocol).
	ByPort
)

func (g GroupBy) String() string {
	switch g {
	case BySrc:
		return "src"
	case ByDst:
		return "dst"
	case ByPair:
		return "pair"
	case ByPort:
		return "port"
	}
	return fmt.Sprintf("groupby(%d)", int(g))
}

// ParseGroupBy is the inverse of GroupBy.String.
func ParseGroupBy(s string) (GroupBy, error) {
	for g := BySrc; g <= ByPort; g++ {
		if g.String() == s {
			return g, nil
		}
	}
	return 0, fmt.Errorf("unknown grouping %q (want src, dst, pair or port)", s)
}

// TopEntry is one group of a Top answer. Only the fields of the grouping
// are set: Src for BySrc, Dst for ByDst, both for ByPair, Port and Proto
// for ByPort. Non-IP flows group under the zero netip.Addr.
type TopEntry struct {
	Src, Dst netip.Addr
	Port     uint16
	Proto    uint8
	Packets  uint64
	Bytes    uint64
	// Flows counts records: a flow exported over several eviction
	// intervals counts once per interval.
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

// topWorker holds one goroutine's partial aggregate.
type topWorker struct {
	direct  []agg      // BySrc, ByDst: indexed by global address id
	table   *partTable // ByPair, ByPort: shared by all workers
	buf     partBuf
	remap   []uint32
	matched uint64
}

// Top returns the n groups with the most bytes among the records matching
// q (all groups if n <= 0), ordered by bytes, packets and flows descending,
// ties broken by the group key ascending. Segments are aggregated in
// parallel, one goroutine per CPU.
func (r *Reader) Top(ctx context.Context, q Query, by GroupBy, n int) ([]TopEntry, error) {
	if by < BySrc || by > ByPort {
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
	in := &interner{}
	table := &partTable{}
	workers := make([]*topWorker, runtime.GOMAXPROCS(0))
	for i := range workers {
		workers[i] = &topWorker{table: table}
	}
	err = r.parallel(ctx, sn, rep, func(w int, s *segment) error {
		return workers[w].segment(ctx, s, &cq, by, in)
	})
	if err != nil {
		return nil, err
	}
	// Fold the other workers' direct aggregates into the first.
	total := workers[0]
	total.direct = slices.Grow(total.direct, in.size()-len(total.direct))[:in.size()]
	for _, w := range workers[1:] {
		total.matched += w.matched
		for i := range w.direct {
			total.direct[i].add(&w.direct[i])
		}
	}
	rep.Matched = total.matched
	return total.top(in, by, n), nil
}

// segment aggregates one segment. It checks the segment's index columns
// before touching the aggregate, so a corrupt segment is skipped whole.
func (w *topWorker) segment(ctx context.Context, s *segment, cq *compiled, by GroupBy, in *interner) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, ok, err := cq.forSegment(s)
	if err != nil || !ok {
		return err
	}
	needSrc, needDst := by == BySrc || by == ByPair, by == ByDst || by == ByPair
	need := []int{cBytes, cPackets}
	if needSrc {
		need = append(need, cSrcAddr)
	}
	if needDst {
		need = append(need, cDstAddr)
	}
	if needSrc || needDst {
		need = append(need, bAddrDict, bAddrFam)
	}
	if by == ByPort {
		need = append(need, cDstPort, cProto)
	}
	if err := s.verify(need...); err != nil {
		return err
	}
	if needSrc {
		if err := s.checkIndex(cSrcAddr, s.nAddr); err != nil {
			return err
		}
	}
	if needDst {
		if err := s.checkIndex(cDstAddr, s.nAddr); err != nil {
			return err
		}
	}
	if needSrc || needDst {
		w.remap = in.remap(s, w.remap)
		if n := in.size(); len(w.direct) < n {
			w.direct = slices.Grow(w.direct, n-len(w.direct))[:n]
		}
	}
	c := &s.cols
	bytes, packets := c[cBytes], c[cPackets]
	src, dst, dport, proto := c[cSrcAddr], c[cDstAddr], c[cDstPort], c[cProto]
	remap, direct := w.remap, w.direct
	simple := !f.checkTime && f.port < 0 && f.proto < 0 && f.srcOK == nil && f.dstOK == nil
	var matched uint64
	switch by {
	case BySrc, ByDst:
		col := src
		if by == ByDst {
			col = dst
		}
		for i := range s.n {
			if !simple && !f.match(s, i) {
				continue
			}
			a := &direct[remap[le.Uint32(col[4*i:])]]
			a.bytes += le.Uint64(bytes[8*i:])
			a.packets += le.Uint64(packets[8*i:])
			a.flows++
			matched++
		}
	default:
		buf := &w.buf
		for i := range s.n {
			if !simple && !f.match(s, i) {
				continue
			}
			var k uint64
			if by == ByPair {
				k = uint64(remap[le.Uint32(src[4*i:])])<<32 | uint64(remap[le.Uint32(dst[4*i:])])
			} else {
				k = uint64(proto[i])<<16 | uint64(le.Uint16(dport[2*i:]))
			}
			buf.add(k, le.Uint64(bytes[8*i:]), le.Uint64(packets[8*i:]))
			matched++
		}
		w.table.flush(buf)
	}
	w.matched += matched
	return nil
}

// entryOf builds the TopEntry of one group key.
func entryOf(in *interner, by GroupBy, k uint64, a *agg) TopEntry {
	e := TopEntry{Packets: a.packets, Bytes: a.bytes, Flows: a.flows}
	switch by {
	case BySrc:
		e.Src = addrOf(in.keys[k])
	case ByDst:
		e.Dst = addrOf(in.keys[k])
	case ByPair:
		e.Src, e.Dst = addrOf(in.keys[k>>32]), addrOf(in.keys[uint32(k)])
	case ByPort:
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

func (w *topWorker) top(in *interner, by GroupBy, n int) []TopEntry {
	h := &topHeap{}
	offer := func(k uint64, a *agg) {
		if a.flows == 0 {
			return
		}
		full := n > 0 && h.Len() >= n
		// Most groups lose on bytes alone; only build an entry (addresses
		// and all) for those that may enter the heap.
		if full && a.bytes < (*h)[0].Bytes {
			return
		}
		e := entryOf(in, by, k, a)
		switch {
		case !full:
			heap.Push(h, e)
		case topLess(&e, &(*h)[0]):
			(*h)[0] = e
			heap.Fix(h, 0)
		}
	}
	if by == BySrc || by == ByDst {
		for i := range w.direct {
			offer(uint64(i), &w.direct[i])
		}
	} else {
		w.table.each(offer)
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
