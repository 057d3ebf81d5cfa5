package store

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
)

// ByPair has far more groups than any other grouping (every pair of
// addresses that talked), and summing them all costs a big table and a
// cache miss a record. Most cannot be among the first n, and the first
// pass says which: a pair's bytes are at most its source's bytes as a
// source, and its destination's as a destination. So if some floor is at
// most the n-th biggest pair's bytes, every pair that may be among the
// first n has a source and a destination whose totals reach the floor, and
// pairPass sums only those pairs (all their records: the test is on the
// pair), in a table that stays small.
//
// The floor comes from the biggest records: among the records with the
// most bytes, the n-th distinct pair met, in order, has a record of that
// many bytes, as do the n-1 before it, so n pairs have at least that many
// bytes, and the n-th biggest pair as well. Where the biggest records do
// not name n pairs, the floor is 0 and pairPass sums every pair.

// bigRecordsKept is how many of the biggest records each worker keeps to
// find n distinct pairs among them.
func bigRecordsKept(n int) int {
	if n <= 0 {
		return 0
	}
	return 4*n + 16
}

// bigRecords keeps the biggest records seen, the smallest at the root.
type bigRecords struct {
	h   []bigRecord
	max int
}

type bigRecord struct {
	bytes uint64
	pair  uint64 // source and destination global address ids
}

func (b *bigRecords) wants(bytes uint64) bool {
	return len(b.h) < b.max || (len(b.h) > 0 && bytes > b.h[0].bytes)
}

// add keeps a record that wants said it wants.
func (b *bigRecords) add(bytes, pair uint64) {
	if len(b.h) < b.max {
		heap.Push(b, bigRecord{bytes, pair})
		return
	}
	b.h[0] = bigRecord{bytes, pair}
	heap.Fix(b, 0)
}

func (b *bigRecords) Len() int           { return len(b.h) }
func (b *bigRecords) Less(i, j int) bool { return b.h[i].bytes < b.h[j].bytes }
func (b *bigRecords) Swap(i, j int)      { b.h[i], b.h[j] = b.h[j], b.h[i] }
func (b *bigRecords) Push(x any)         { b.h = append(b.h, x.(bigRecord)) }
func (b *bigRecords) Pop() any {
	x := b.h[len(b.h)-1]
	b.h = b.h[:len(b.h)-1]
	return x
}

// pairFloor returns a floor of the n-th biggest pair's bytes, from the
// biggest records of all workers; 0 if they name fewer than n pairs.
func (b *bigRecords) pairFloor(n int) uint64 {
	if n <= 0 {
		return 0
	}
	recs := slices.SortedFunc(slices.Values(b.h), func(x, y bigRecord) int { return cmp.Compare(y.bytes, x.bytes) })
	seen := make(map[uint64]bool, n)
	for _, r := range recs {
		if !seen[r.pair] {
			seen[r.pair] = true
			if len(seen) == n {
				return r.bytes
			}
		}
	}
	return 0
}

// pairPass sums the pairs whose source and destination totals reach the
// floor into st.table, and returns their error and signal sums.
//
// It raises the floor as it goes. It reads the segments in rounds, the
// first a small share of the records: after a round, the sums of the pairs
// so far are each at most the pair's total, so the n-th biggest of them is
// a floor too, and far higher than the biggest records' on a busy network.
// Every pair that passes a raised floor passed the lower ones, so the
// table holds all of its records; a pair summed in an early round that
// fails a later floor keeps a partial sum, under that floor and so under
// the n-th biggest pair's: it is no candidate.
func (r *Reader) pairPass(ctx context.Context, st *topState, sm *sums, n int, lim topLimits) (errSums, sigSums, error) {
	cells := lim.pairCells
	if cells == 0 {
		cells = pairDenseCells
	}
	floor := sm.big.pairFloor(n)
	ws := make([]*pairWorker, maxWorkers())
	for i := range ws {
		ws[i] = &pairWorker{est: errSums{}, sig: sigSums{}}
	}
	var total, done int64
	for _, sf := range sm.files {
		total += sf.e.size
	}
	files := sm.files
	for share := int64(8); len(files) > 0; share /= 2 {
		// This round's segments: the next 1/share of the bytes (at
		// least one segment), all of them once share is 1 or the
		// groups are not pruned.
		k := len(files)
		if n > 0 && share > 1 {
			for k = 0; k < len(files) && done < total/share; k++ {
				done += files[k].e.size
			}
			k = max(k, 1)
		}
		round := files[:k]
		files = files[k:]
		if err := r.pairRound(ctx, st, sm, ws, round, floor, cells); err != nil {
			return nil, nil, err
		}
		if len(files) > 0 && n > 0 {
			floor = max(floor, st.table.nthBytes(n))
		}
	}
	for _, w := range ws[1:] {
		ws[0].est.merge(w.est)
		ws[0].sig.merge(w.sig)
	}
	return ws[0].est, ws[0].sig, nil
}

// pairDenseCells bounds a round's dense matrix (pairRound): 2^19 cells
// of 24 bytes, 12 MiB per worker.
const pairDenseCells = 1 << 19

// pairRound sums the pairs of files whose source and destination totals
// reach floor into st.table, in a dense matrix of at most maxCells cells
// where it fits.
//
// The addresses that reach the floor are few once the floor has risen,
// while the records of their pairs are many (the busiest addresses carry
// most records). So each is given a rank among its role's, and when the
// ranks make a small enough matrix, a worker sums each record into the
// cell of its two ranks: an add into memory the caches hold, where a
// pair's group key takes a partition buffer's append and a hash table's
// probe. The matrix has one more row and column, where the records of
// addresses below the floor go: the loop has no branch to mispredict on
// the many records that pass and the many that do not. The cells go into
// st.table at the end of the round.
func (r *Reader) pairRound(ctx context.Context, st *topState, sm *sums, ws []*pairWorker, files []snapFile, floor uint64, maxCells int) error {
	// The ranks of the addresses whose totals reach the floor, as source
	// and as destination, by global id, and back.
	rank := make([][2]uint32, len(sm.direct))
	var srcs, dsts []uint32
	for id := range sm.direct {
		if a := &sm.direct[id]; a.flows > 0 && a.bytes >= floor {
			srcs = append(srcs, uint32(id))
		}
		if a := &sm.dstDirect[id]; a.flows > 0 && a.bytes >= floor {
			dsts = append(dsts, uint32(id))
		}
	}
	// The busiest first: their records, most of the round's, then sum
	// into the matrix's first rows and columns, which the caches keep.
	slices.SortStableFunc(srcs, func(a, b uint32) int { return cmp.Compare(sm.direct[b].bytes, sm.direct[a].bytes) })
	slices.SortStableFunc(dsts, func(a, b uint32) int { return cmp.Compare(sm.dstDirect[b].bytes, sm.dstDirect[a].bytes) })
	rows, width := uint32(len(srcs)), uint32(len(dsts))
	dense := int(rows+1)*int(width+1) <= maxCells
	// Below the floor: noID, or in the dense matrix the last row and
	// column. A source's rank is kept as its row's first cell.
	noSrc, noDst := uint32(noID), uint32(noID)
	if dense {
		noSrc, noDst = rows*(width+1), width
	}
	for id := range rank {
		rank[id] = [2]uint32{noSrc, noDst}
	}
	for i, id := range srcs {
		rank[id][0] = uint32(i)
		if dense {
			rank[id][0] *= width + 1
		}
	}
	for i, id := range dsts {
		rank[id][1] = uint32(i)
	}
	if dense {
		cells := int((rows + 1) * (width + 1))
		for _, w := range ws {
			w.cells = slices.Grow(w.cells[:0], cells)[:cells]
			clear(w.cells)
		}
	}
	_, err := r.pass(ctx, st, files, nil, func(wi int, s *segment, f *segFilter, ok bool) (bool, error) {
		if !ok {
			return false, nil
		}
		w := ws[wi]
		w.src = slices.Grow(w.src[:0], s.nAddr)[:s.nAddr]
		w.dst = slices.Grow(w.dst[:0], s.nAddr)[:s.nAddr]
		// The first pass gave every entry of the segment its global id;
		// in their order, the ranks are read forwards.
		for _, x := range st.in.sortedOf(s) {
			e, r := uint32(x), [2]uint32{noSrc, noDst}
			if g := x >> 32; g < uint64(len(rank)) {
				r = rank[g]
			}
			w.src[e], w.dst[e] = r[0], r[1]
		}
		c := &s.cols
		bytes, packets, src, dst := c[cBytes], c[cPackets], c[cSrcAddr], c[cDstAddr]
		simple := f.simple()
		pair := func(sr, dr uint32) uint64 {
			if dense {
				sr /= width + 1
			}
			return uint64(srcs[sr])<<32 | uint64(dsts[dr])
		}
		// When counting (topState.counting), a record of a pair below
		// the floor may set its flow's bit too: its pair is no
		// candidate, and no other pair has that flow.
		var ids []uint32
		if st.counting != nil {
			ids = st.flows.idsOf(s)
		}
		switch {
		case dense:
			for i := range s.n {
				if !simple && !f.match(s, i) {
					continue
				}
				b, p := le.Uint64(bytes[8*i:]), le.Uint64(packets[8*i:])
				fl := uint64(1) // a record, or when counting, a flow new to the bits
				if ids != nil {
					fl = st.newFlow(ids, i, b, p)
				}
				a := &w.cells[w.src[le.Uint32(src[4*i:])]+w.dst[le.Uint32(dst[4*i:])]]
				a.bytes, a.packets, a.flows = a.bytes+b, a.packets+p, a.flows+fl
			}
		default:
			for i := range s.n {
				sr, dr := w.src[le.Uint32(src[4*i:])], w.dst[le.Uint32(dst[4*i:])]
				if sr == noID || dr == noID || (!simple && !f.match(s, i)) {
					continue
				}
				b, p := le.Uint64(bytes[8*i:]), le.Uint64(packets[8*i:])
				fl := uint64(1)
				if ids != nil {
					fl = st.newFlow(ids, i, b, p)
				}
				w.buf.add(pair(sr, dr), b, p, fl)
			}
			st.table.flush(&w.buf)
		}
		group := func(i int) (uint64, bool) {
			sr, dr := w.src[le.Uint32(src[4*i:])], w.dst[le.Uint32(dst[4*i:])]
			if sr == noSrc || dr == noDst {
				return 0, false
			}
			return pair(sr, dr), true
		}
		w.est.segment(s, f, group)
		w.sig.segment(s, f, group)
		return false, nil
	})
	if err != nil || !dense {
		return err
	}
	// The matrix's cells but its last row and column.
	for _, w := range ws {
		for sr := range rows {
			row := w.cells[sr*(width+1):][:width]
			for dr := range row {
				if a := &row[dr]; !a.none() {
					w.buf.add(uint64(srcs[sr])<<32|uint64(dsts[dr]), a.bytes, a.packets, a.flows)
				}
			}
		}
		st.table.flush(&w.buf)
	}
	return nil
}

// pairWorker is one goroutine of pairPass.
type pairWorker struct {
	src, dst []uint32 // per address entry: its rank if its total reaches the floor, else noID
	cells    []agg    // the dense round's sums, source rank major
	buf      partBuf
	est      errSums
	sig      sigSums
}
