package store

import "slices"

// A segment's records summed per address, as a source and as a
// destination, kept with the segment: BySrc, ByDst and ByPair's first
// pass adds them up instead of its records wherever every record of a
// segment matches (the query's window covers the segment, and nothing
// else is filtered), which is every segment of the window but its first
// and last few. A segment has a few tens of thousands of addresses for a
// hundred thousand records, and its sums are in order of global id, so
// adding them walks the query's sums forwards, where a record's are a
// cache miss on a busy store. Segment files never change: the sums stay
// true for as long as the interner that named their addresses serves the
// Reader (segcache.go).

// addrSumsBig is how many of its biggest records a segment's sums keep,
// for ByPair's floor (pairs.go): enough for n up to 12 (bigRecordsKept).
const addrSumsBig = 64

// segAddrSums are one segment's sums per address.
type segAddrSums struct {
	in  *interner     // whose global ids these are
	end [2][]entrySum // as source (0) and destination (1), in order of id
	big []bigRecord   // its biggest records, at most addrSumsBig
}

// entrySum is one address's sums in one segment: 24 bytes.
type entrySum struct {
	g       uint32 // global id
	records uint32 // a segment holds fewer than 2^32
	bytes   uint64
	packets uint64
}

// addrSumsOf returns the sums of s, every record of which matches,
// summing them now if they are not kept yet.
func (w *sumWorker) addrSumsOf(s *segment) *segAddrSums {
	in := w.st.in
	s.sumsMu.Lock()
	defer s.sumsMu.Unlock()
	if s.sums != nil && s.sums.in == in {
		return s.sums
	}
	byID := in.sortedOf(s)
	asSrc, asDst := w.local(0, s.nAddr), w.local(1, s.nAddr)
	big := bigRecords{max: addrSumsBig}
	sumByEntry(s, nil, asSrc, asDst, &big, in.remapOf(s))
	sums := &segAddrSums{in: in, big: slices.Clone(big.h)}
	for end, local := range [2][]agg{asSrc, asDst} {
		// Counted first, so that what stays is allocated once, exactly.
		n := 0
		for i := range local {
			if local[i].flows > 0 {
				n++
			}
		}
		out := make([]entrySum, 0, n)
		for _, x := range byID {
			if a := &local[uint32(x)]; a.flows > 0 {
				out = append(out, entrySum{uint32(x >> 32), uint32(a.flows), a.bytes, a.packets})
				*a = agg{}
			}
		}
		sums.end[end] = out
	}
	s.sums = sums
	return sums
}

// add adds the sums of one end to direct, indexed by global id.
func (ss *segAddrSums) add(end int, direct []agg) {
	for _, e := range ss.end[end] {
		a := &direct[e.g]
		a.bytes, a.packets, a.flows = a.bytes+e.bytes, a.packets+e.packets, a.flows+uint64(e.records)
	}
}

// sumByEntry adds each record of s that f matches (every record if f is
// nil) to its source's entry in asSrc and its destination's in asDst, and
// offers it to big, named by its addresses' global ids (remap); it
// returns how many matched.
func sumByEntry(s *segment, f *segFilter, asSrc, asDst []agg, big *bigRecords, remap []uint32) uint64 {
	c := &s.cols
	bytes, packets, src, dst := c[cBytes], c[cPackets], c[cSrcAddr], c[cDstAddr]
	all := f == nil || f.simple()
	var matched uint64
	for i := range s.n {
		if !all && !f.match(s, i) {
			continue
		}
		se, de := le.Uint32(src[4*i:]), le.Uint32(dst[4*i:])
		b, p := le.Uint64(bytes[8*i:]), le.Uint64(packets[8*i:])
		a := &asSrc[se]
		a.bytes, a.packets, a.flows = a.bytes+b, a.packets+p, a.flows+1
		a = &asDst[de]
		a.bytes, a.packets, a.flows = a.bytes+b, a.packets+p, a.flows+1
		if big.wants(b) {
			big.add(b, uint64(remap[se])<<32|uint64(remap[de]))
		}
		matched++
	}
	return matched
}
