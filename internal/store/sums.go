package store

import (
	"container/heap"
	"context"
	"slices"

	"loupe/internal/flow"
)

// Top's first pass (top.go): bytes, packets and records per group, and
// the candidates, the groups that may be among the first n.

// sumWorker is one goroutine of the first pass: bytes, packets and
// records per group (agg.flows counts records until the second pass
// counts flows).
type sumWorker struct {
	st      *topState
	direct  []agg    // BySrc, ByDst, ByPair (as source): indexed by global address id
	buf     partBuf  // the port groupings' other groups, and the name groupings: folded into st.table
	ports   portSums // the port groupings' TCP and UDP groups: folded into st.table at the end
	remap   []uint32 // the segment's global address ids: read-only
	byEntry [2][]agg // BySrc, ByDst, ByPair: a segment's sums per address entry (local)
	conns   connCache
	col     []uint32  // ByPort: a segment's groups, unless st.ports keeps them
	names   nameCache // the name groupings
	matched uint64
	est     errSums // but for ByPair, whose groups pairPass sums
	sig     sigSums // as est

	// ByPair: sums per address as destination, and the biggest records
	// (pairs.go).
	dstDirect []agg
	big       bigRecords
	// ByPair with st.addrs: the error and signal sums of each address as
	// a source and as a destination, for BySrc and ByDst (TopUncountedMany).
	addrEst [2]errSums
	addrSig [2]sigSums
}

// sums is the answer of the first pass.
type sums struct {
	*sumWorker            // the workers' sums, folded into the first's
	files      []snapFile // the segments with a matching record
}

// sumPass runs the first pass (for ByPort, the first after the SYNs':
// service.go).
func (r *Reader) sumPass(ctx context.Context, st *topState, files []snapFile, rep *Report, n int) (*sums, error) {
	ws := make([]*sumWorker, maxWorkers())
	for i := range ws {
		ws[i] = &sumWorker{st: st, big: bigRecords{max: bigRecordsKept(n)}, est: errSums{}, sig: sigSums{},
			addrEst: [2]errSums{{}, {}}, addrSig: [2]sigSums{{}, {}}}
	}
	out := &sums{}
	matching, err := r.pass(ctx, st, files, rep, func(w int, s *segment, f *segFilter, ok bool) (bool, error) {
		return ok && ws[w].segment(s, f), nil
	})
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		w.ports.fold(st.table, &w.buf)
	}
	total := ws[0]
	total.grow()
	for _, w := range ws[1:] {
		total.matched += w.matched
		for i := range w.direct {
			total.direct[i].add(&w.direct[i])
		}
		for i := range w.dstDirect {
			total.dstDirect[i].add(&w.dstDirect[i])
		}
		total.big.h = append(total.big.h, w.big.h...)
		total.est.merge(w.est)
		total.sig.merge(w.sig)
		for end := range 2 {
			total.addrEst[end].merge(w.addrEst[end])
			total.addrSig[end].merge(w.addrSig[end])
		}
	}
	out.sumWorker, out.files = total, matching
	return out, nil
}

// local returns the worker's sums per address entry of a segment, for
// one end (0: source, 1: destination) of BySrc, ByDst and ByPair: n
// zeroed aggregates. A record adds to its entry's, which the caches hold
// (a segment has tens of thousands of entries), where the aggregates by
// global id span every address of the store; fold then adds each entry's
// sums to its global id's, once per entry instead of once per record.
func (w *sumWorker) local(end, n int) []agg {
	// Every aggregate past the last segment's is zero: fold zeroed
	// what that segment used, and fresh memory is zero.
	w.byEntry[end] = slices.Grow(w.byEntry[end][:0], n)[:n]
	return w.byEntry[end]
}

// fold adds each entry's sums in local to its global id's in direct, in
// order of id (interner.sortedOf), and zeroes local for the next segment.
func fold(direct, local []agg, byID []uint64) {
	for _, x := range byID {
		if a := &local[uint32(x)]; a.flows > 0 {
			direct[x>>32].add(a)
			*a = agg{}
		}
	}
}

func (w *sumWorker) grow() {
	n := w.st.in.size()
	if len(w.direct) < n {
		w.direct = slices.Grow(w.direct, n-len(w.direct))[:n]
	}
	if w.st.by == ByPair && len(w.dstDirect) < n {
		w.dstDirect = slices.Grow(w.dstDirect, n-len(w.dstDirect))[:n]
	}
}

// segment sums one segment and reports whether a record matched.
func (w *sumWorker) segment(s *segment, f *segFilter) bool {
	st := w.st
	c := &s.cols
	bytes, packets := c[cBytes], c[cPackets]
	simple := f.simple()
	var matched uint64
	// Where every record matches, the segment's sums per address stand
	// for its records (addrsums.go).
	var ss *segAddrSums
	if simple && (st.by == BySrc || st.by == ByDst || st.by == ByPair) {
		ss = w.addrSumsOf(s)
	}
	switch by := st.by; by {
	case BySrc, ByDst:
		w.remap = st.in.remapOf(s)
		w.grow()
		col := c[cSrcAddr]
		if by == ByDst {
			col = c[cDstAddr]
		}
		remap := w.remap
		if ss != nil {
			ss.add(int(by-BySrc), w.direct)
			matched = uint64(s.n)
		} else {
			local := w.local(0, s.nAddr)
			for i := range s.n {
				if !f.match(s, i) {
					continue
				}
				a := &local[le.Uint32(col[4*i:])]
				a.bytes += le.Uint64(bytes[8*i:])
				a.packets += le.Uint64(packets[8*i:])
				a.flows++
				matched++
			}
			fold(w.direct, local, st.in.sortedOf(s))
		}
		group := func(i int) (uint64, bool) { return uint64(remap[le.Uint32(col[4*i:])]), true }
		w.est.segment(s, f, group)
		w.sig.segment(s, f, group)
	case ByPair:
		w.remap = st.in.remapOf(s)
		w.grow()
		src, dst, remap := c[cSrcAddr], c[cDstAddr], w.remap
		if ss != nil {
			ss.add(0, w.direct)
			ss.add(1, w.dstDirect)
			if len(ss.big) >= w.big.max || len(ss.big) == s.n {
				for _, r := range ss.big {
					if w.big.wants(r.bytes) {
						w.big.add(r.bytes, r.pair)
					}
				}
			} else {
				// More of the biggest records than the segment keeps
				// (n above 12): from the bytes.
				for i := range s.n {
					if b := le.Uint64(bytes[8*i:]); w.big.wants(b) {
						w.big.add(b, uint64(remap[le.Uint32(src[4*i:])])<<32|uint64(remap[le.Uint32(dst[4*i:])]))
					}
				}
			}
			matched = uint64(s.n)
		} else {
			asSrc, asDst := w.local(0, s.nAddr), w.local(1, s.nAddr)
			matched = sumByEntry(s, f, asSrc, asDst, &w.big, remap)
			byID := st.in.sortedOf(s)
			fold(w.direct, asSrc, byID)
			fold(w.dstDirect, asDst, byID)
		}
		if st.addrs {
			for end, col := range [2][]byte{src, dst} {
				group := func(i int) (uint64, bool) { return uint64(remap[le.Uint32(col[4*i:])]), true }
				w.addrEst[end].segment(s, f, group)
				w.addrSig[end].segment(s, f, group)
			}
		}
	default:
		if by.isNames() {
			w.names.reset(s, st)
		}
		if w.names.bare {
			// One group for every record: summed here, added once.
			var b, p uint64
			for i := range s.n {
				if !simple && !f.match(s, i) {
					continue
				}
				b, p = b+le.Uint64(bytes[8*i:]), p+le.Uint64(packets[8*i:])
				matched++
			}
			if matched > 0 {
				w.buf.add(w.names.group, b, p, matched)
			}
		} else if by.byPort() {
			w.ports.init()
			// ByPort's groups, found in a loop of their own (and kept
			// for the flow pass): a record's service port takes
			// several columns and, for some, a connection's lookup.
			var col []uint32
			if by == ByPort {
				if st.ports != nil {
					col = make([]uint32, s.n)
					st.ports.put(s.id, col)
				} else {
					col = slices.Grow(w.col[:0], s.n)[:s.n]
					w.col = col
				}
				st.svc.groups(s, &w.conns, col)
			}
			var ids []uint32
			if st.counting != nil {
				ids = st.flows.idsOf(s)
			}
			for i := range s.n {
				if !simple && !f.match(s, i) {
					continue
				}
				var g uint64
				if col != nil {
					g = uint64(col[i])
				} else {
					g = st.group(s, i, &w.conns, &w.names)
				}
				b, p := le.Uint64(bytes[8*i:]), le.Uint64(packets[8*i:])
				fl := uint64(1) // a record, or when counting, a flow new to the bits
				if ids != nil {
					fl = st.newFlow(ids, i, b, p)
				}
				if a := w.ports.at(g); a != nil {
					a.bytes, a.packets, a.flows = a.bytes+b, a.packets+p, a.flows+fl
				} else {
					w.buf.add(g, b, p, fl)
				}
				matched++
			}
		} else {
			for i := range s.n {
				if !simple && !f.match(s, i) {
					continue
				}
				w.buf.add(st.group(s, i, &w.conns, &w.names), le.Uint64(bytes[8*i:]), le.Uint64(packets[8*i:]), 1)
				matched++
			}
		}
		st.table.flush(&w.buf)
		group := func(i int) (uint64, bool) { return st.group(s, i, &w.conns, &w.names), true }
		w.est.segment(s, f, group)
		w.sig.segment(s, f, group)
	}
	w.matched += matched
	return matched > 0
}

// portSums sums the groups of a port grouping whose protocol is TCP or
// UDP, most records on any network, in an array indexed by protocol and
// port: a record costs an add, where a group key of another protocol is
// hashed into a buffer and folded into a shared table.
type portSums []agg

// init allocates the array on first use.
func (p *portSums) init() {
	if *p == nil {
		*p = make(portSums, 2<<16)
	}
}

// at returns the sums of group key g (protocol << 16 | port), or nil if
// its protocol is neither TCP nor UDP.
func (p portSums) at(g uint64) *agg {
	if i, ok := portIndex(g); ok {
		return &p[i]
	}
	return nil
}

// portIndex returns the index of a port grouping's group key g (protocol
// << 16 | port) among the TCP and UDP groups (TCP's 2^16 ports, then
// UDP's), if its protocol is one of the two.
func portIndex(g uint64) (int, bool) {
	switch uint8(g >> 16) {
	case flow.ProtoTCP:
		return int(uint16(g)), true
	case flow.ProtoUDP:
		return 1<<16 | int(uint16(g)), true
	}
	return 0, false
}

// fold adds the groups that have a record to t, through b.
func (p portSums) fold(t *partTable, b *partBuf) {
	for i := range p {
		if a := &p[i]; !a.none() {
			proto := uint64(flow.ProtoTCP)
			if i>>16 != 0 {
				proto = flow.ProtoUDP
			}
			b.add(proto<<16|uint64(uint16(i)), a.bytes, a.packets, a.flows)
		}
	}
	t.flush(b)
}

// group returns the group key of row i of s for the port and name
// groupings; names must have been reset for s.
func (st *topState) group(s *segment, i int, conns *connCache, names *nameCache) uint64 {
	c := &s.cols
	switch st.by {
	case ByNamespace, ByWorkload, ByService:
		return st.nameGroup(s, i, names)
	case ByPort:
		return uint64(c[cProto][i])<<16 | uint64(st.svc.port(conns, s, i))
	case BySrcPort:
		return uint64(c[cProto][i])<<16 | uint64(le.Uint16(c[cSrcPort][2*i:]))
	}
	return uint64(c[cProto][i])<<16 | uint64(le.Uint16(c[cDstPort][2*i:]))
}

// topCand is a group that may be among the first n, with its sums.
type topCand struct {
	g uint64
	agg
}

// each visits every group of the first pass (for ByPair, of pairPass).
func (w *sumWorker) each(fn func(g uint64, a *agg)) {
	if by := w.st.by; by == BySrc || by == ByDst {
		for i := range w.direct {
			fn(uint64(i), &w.direct[i])
		}
		return
	}
	w.st.table.each(fn)
}

// candidates returns the groups that may be among the first n: all of
// them if n <= 0 or there are at most n, else those whose (bytes,
// packets) is at least the n-th best. Groups without a matching record
// (an address only records outside the query have) are none, and so are
// groups that carried nothing (records of kernel signals alone, on no
// interface): they are no talkers.
func (w *sumWorker) candidates(n int) []topCand {
	var least volume
	if n > 0 {
		h := &volumeHeap{}
		w.each(func(_ uint64, a *agg) {
			switch v := (volume{a.bytes, a.packets}); {
			case a.flows == 0:
			case h.Len() < n:
				heap.Push(h, v)
			case (*h)[0].less(v):
				(*h)[0] = v
				heap.Fix(h, 0)
			}
		})
		if h.Len() == n {
			least = (*h)[0]
		}
	}
	var out []topCand
	w.each(func(g uint64, a *agg) {
		if a.flows > 0 && !(volume{a.bytes, a.packets}).less(least) && (a.bytes > 0 || a.packets > 0) {
			out = append(out, topCand{g, *a})
		}
	})
	return out
}

// volume is a group's (bytes, packets), which topLess orders first.
type volume struct{ bytes, packets uint64 }

func (a volume) less(b volume) bool {
	return a.bytes < b.bytes || (a.bytes == b.bytes && a.packets < b.packets)
}

// volumeHeap keeps the n largest volumes seen so far, the least at the
// root.
type volumeHeap []volume

func (h volumeHeap) Len() int           { return len(h) }
func (h volumeHeap) Less(i, j int) bool { return h[i].less(h[j]) }
func (h volumeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *volumeHeap) Push(x any)        { *h = append(*h, x.(volume)) }
func (h *volumeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
