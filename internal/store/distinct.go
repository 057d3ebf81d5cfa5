package store

import (
	"context"
	"slices"
	"sync/atomic"

	"loupe/internal/flow"
)

// Top's second pass counts the distinct flows of the candidate groups
// exactly. Every record has its flow's id (flowids.go), and a candidate's
// flow count goes up by one when a bit per id goes from clear to set: a
// bit set with an atomic OR after a plain load finds it clear, so that
// the workers share the bits without a lock and most records, of flows
// seen before, write nothing.
//
// Where a flow's group is a function of its key (every grouping but the
// name groupings), the candidates share one bit per id: a flow is in one
// candidate only. Under a name grouping a flow's records may name its ends
// differently (an address that changed holders), and the flow counts once
// in each group: each candidate has its own bits, and when they would take
// more than a budget the pass reads the segments once per share of the
// candidates.

// topLimits bound what Top's passes hold.
type topLimits struct {
	bitsBudget int  // bytes of bits one reading of the flow pass holds at most
	readings   *int // for tests: told how many readings the flow pass took
	pairCells  int  // cells of pairRound's dense matrix at most; 0: pairDenseCells
}

// flowBitsBudget is Top's bitsBudget: 64 MiB, the bits of a name
// grouping's 53 candidates over 10 million flows.
const flowBitsBudget = 64 << 20

// flowPass counts the distinct flows of each candidate in files.
func (r *Reader) flowPass(ctx context.Context, st *topState, files []snapFile, cands []topCand, lim topLimits) ([]uint64, error) {
	flows := make([]uint64, len(cands))
	if len(cands) == 0 {
		return flows, nil
	}
	// Every segment's ids first, so that the bits cover all of them.
	if err := st.flows.prepare(ctx, st.segsOf(files)); err != nil {
		return nil, err
	}
	words := (st.flows.size() + 63) / 64
	sh := &flowShared{st: st}
	sh.match(cands)
	share := len(cands)
	if st.by.isNames() {
		share = max(1, min(len(cands), lim.bitsBudget/(8*max(words, 1))))
	}
	ws := make([]*flowWorker, maxWorkers())
	for i := range ws {
		ws[i] = &flowWorker{sh: sh, flows: padded(len(cands))}
	}
	for sh.lo = 0; sh.lo < len(cands); sh.lo += share {
		sh.hi = min(len(cands), sh.lo+share)
		sh.bits = make([][]uint64, 1)
		if st.by.isNames() {
			sh.bits = make([][]uint64, sh.hi-sh.lo)
		}
		for i := range sh.bits {
			sh.bits[i] = make([]uint64, words)
		}
		_, err := r.pass(ctx, st, files, nil, func(w int, s *segment, f *segFilter, ok bool) (bool, error) {
			if ok {
				ws[w].segment(s, f)
			}
			return false, nil
		})
		if err != nil {
			return nil, err
		}
		if lim.readings != nil {
			*lim.readings++
		}
	}
	for _, w := range ws {
		for i, n := range w.flows {
			flows[i] += n
		}
	}
	return flows, nil
}

// padded returns n counters that share no cache line with another
// object: each worker counts a new flow in its own, and counters of two
// workers in one line made every count a cache miss on the other CPU.
func padded(n int) []uint64 {
	const line = 8 // words in a cache line
	return make([]uint64, n+2*line)[line : line+n : line+n]
}

// flowShared is what the workers of the second pass share.
type flowShared struct {
	st *topState
	// The candidates, as the records' dictionaries find them: canonical
	// addresses (BySrc, ByDst: the candidate's index; ByPair: an index
	// into pairs), or group keys (the port and name groupings).
	addrs  interner
	pairs  u64Map
	groups u64Map
	// addrOf is, per global address id (topState.in), its id in addrs, or
	// noID: what a segment's entries find, from the ids the first pass
	// gave them, without hashing an address.
	addrOf []uint32
	// This reading counts the candidates lo to hi-1, in bits: one per
	// candidate under a name grouping, else one for all.
	lo, hi int
	bits   [][]uint64
}

// match indexes the candidates for the per-record lookups.
func (sh *flowShared) match(cands []topCand) {
	st := sh.st
	keys := st.in.keysNow()
	switch st.by {
	case BySrc, ByDst:
		// Candidates are distinct addresses: the ids interned here are
		// the candidates' indices.
		for _, c := range cands {
			sh.note(keys, uint32(c.g))
		}
	case ByPair:
		sh.pairs.init(len(cands))
		for i, c := range cands {
			src, dst := sh.note(keys, uint32(c.g>>32)), sh.note(keys, uint32(c.g))
			sh.pairs.put(uint64(src)<<32|uint64(dst), uint32(i))
		}
	default:
		sh.groups.init(len(cands))
		for i, c := range cands {
			sh.groups.put(c.g, uint32(i))
		}
	}
}

// note interns the address of global id g into addrs, and returns its id
// there.
func (sh *flowShared) note(keys []addrKey, g uint32) uint32 {
	if len(sh.addrOf) < len(keys) {
		n := len(sh.addrOf)
		sh.addrOf = slices.Grow(sh.addrOf, len(keys)-n)[:len(keys)]
		for i := n; i < len(keys); i++ {
			sh.addrOf[i] = noID
		}
	}
	id := sh.addrs.intern(keys[g])
	sh.addrOf[g] = id
	return id
}

// set sets the bit of flow id of candidate c, and reports whether it was
// clear; c must be counted in this reading.
func (sh *flowShared) set(c, id uint32) bool {
	b := sh.bits[0]
	if len(sh.bits) > 1 {
		b = sh.bits[int(c)-sh.lo]
	}
	return flowBits(b).add(id) != 0
}

// flowBits is a bit per flow id, set by the workers of a pass as they
// meet the flows.
type flowBits []uint64

// add sets the bit of flow id, and returns 1 if it was clear, else 0. A
// flow met before costs a plain load; only a new one takes the atomic OR.
func (b flowBits) add(id uint32) uint64 {
	w, sh := &b[id>>6], id&63
	if atomic.LoadUint64(w)>>sh&1 != 0 {
		return 0
	}
	return ^atomic.OrUint64(w, 1<<sh) >> sh & 1
}

// newFlow is what a record adds to its group's flows when the flows are
// counted as the records are summed (topState.counting): 1 if it is its
// flow's first record met, else 0. A record of signals alone (no
// traffic) is no flow, as in the flow pass.
func (st *topState) newFlow(ids []uint32, i int, bytes, packets uint64) uint64 {
	if bytes|packets == 0 {
		return 0
	}
	return st.counting.add(ids[i])
}

// countWhileSumming prepares the flow ids of files and the bits with which
// the records' summing counts their groups' flows (topState.counting),
// where that replaces the flow pass: when the ranking is by bytes and the
// grouping is ByPair (its pairs are summed in pairPass, after the first
// pass has checked every segment) or ByPort (summed after its SYN pass
// has). BySrcPort and ByDstPort sum in the query's first pass, before the
// segments are checked, so they count while summing only where an earlier
// query gave every segment its ids (and checked it): a warm query
// (warmCounting).
//
// Why it is exact: a flow's group is a function of its key for these
// groupings, so a group's flows are the distinct ids of its records, and
// each id's bit is set once, by its first record met, which adds 1 to
// that group. agg.flows then counts flows instead of records, which only
// changes which groups without any flow (records of signals alone) are
// kept, and those carry no bytes nor packets and are no candidates by
// bytes. A pair that is a candidate has every record summed (pairPass), so
// every one of its flows is counted; a pair summed in part is none.
func (r *Reader) countWhileSumming(ctx context.Context, st *topState, files []snapFile) error {
	if err := st.flows.prepare(ctx, st.segsOf(files)); err != nil {
		return err
	}
	st.counting = make(flowBits, (st.flows.size()+63)/64)
	return nil
}

// warmCounting sets up countWhileSumming's bits for the segments of
// files if every one of them has its flow ids already, and reports
// whether it did.
func (st *topState) warmCounting(files []snapFile) bool {
	if !st.flows.have(st.segsOf(files)) {
		return false
	}
	st.counting = make(flowBits, (st.flows.size()+63)/64)
	return true
}

// segsOf returns the mapped segments of files.
func (st *topState) segsOf(files []snapFile) []*segment {
	segs := make([]*segment, 0, len(files))
	for _, sf := range files {
		if cs := st.segs.segs[sf.e.id]; cs != nil {
			segs = append(segs, cs.s)
		}
	}
	return segs
}

// noID marks an address entry or a group that is no candidate.
const noID = ^uint32(0)

// flowWorker is one goroutine of the second pass.
type flowWorker struct {
	sh    *flowShared
	cand  []uint32 // per address entry: what sh.addrs finds for its canonical form, or noID
	conns connCache
	names nameCache // the name groupings
	flows []uint64  // per candidate: the flows new to its bits
}

// segment counts the flows of one segment's candidate records that are
// new to the bits.
func (w *flowWorker) segment(s *segment, f *segFilter) {
	sh := w.sh
	st := sh.st
	by := st.by
	if by <= ByPair {
		// The first pass gave every entry of the segment its global id.
		w.cand = slices.Grow(w.cand[:0], s.nAddr)[:s.nAddr]
		for e, g := range st.in.remapOf(s) {
			w.cand[e] = noID
			if int(g) < len(sh.addrOf) {
				w.cand[e] = sh.addrOf[g]
			}
		}
	}
	// A segment without names is one name group: a candidate or not.
	bare := noID
	if by.isNames() {
		w.names.reset(s, st)
		if w.names.bare {
			if bare = sh.groups.find(w.names.group); bare == noID {
				return
			}
		}
	}
	ids, groups := st.flows.idsOf(s), st.ports.get(s.id)
	c := &s.cols
	src, dst, packets, bytes := c[cSrcAddr], c[cDstAddr], c[cPackets], c[cBytes]
	lo, hi := uint32(sh.lo), uint32(sh.hi)
	simple := f.simple()
	for i := range s.n {
		if !simple && !f.match(s, i) {
			continue
		}
		if le.Uint64(packets[8*i:]) == 0 && le.Uint64(bytes[8*i:]) == 0 {
			continue // a record of signals alone (no traffic) is no flow
		}
		var k uint32
		switch by {
		case BySrc:
			k = w.cand[le.Uint32(src[4*i:])]
		case ByDst:
			k = w.cand[le.Uint32(dst[4*i:])]
		case ByPair:
			k = noID
			if sa, da := w.cand[le.Uint32(src[4*i:])], w.cand[le.Uint32(dst[4*i:])]; sa != noID && da != noID {
				k = sh.pairs.find(uint64(sa)<<32 | uint64(da))
			}
		default:
			switch {
			case bare != noID:
				k = bare
			case groups != nil:
				k = sh.groups.find(uint64(groups[i]))
			default:
				k = sh.groups.find(st.group(s, i, &w.conns, &w.names))
			}
		}
		if k < lo || k >= hi {
			continue // no candidate (noID), or one of another reading
		}
		if sh.set(k, ids[i]) {
			w.flows[k]++
		}
	}
}

// fieldCol returns the column that holds flow field name in this version
// of the segment format, if there is one: columns are the fields' store
// kinds in flow's registry, so a column added there is found here.
func fieldCol(name string) (int, bool) {
	f, ok := flow.FieldByName(name)
	if !ok || f.Wire.Store < 1 || f.Wire.Store > numCols {
		return 0, false
	}
	return int(f.Wire.Store) - 1, true
}
