package store

import (
	"math"

	"loupe/internal/flow"
)

// Top's groups say how exact their sums are (TopEntry.Error): a group with
// a decoded record is decoded, one with an estimate is an estimate whose
// bounds are the sums of its estimates' bounds (flow.ErrorSum). Nearly
// every record is exact, and the sums' hot loops are built for them: the
// error sums are kept apart, in a map of the groups that have a record
// that is not exact, filled by a loop of its own over the segments that
// hold such records (the others have no accuracy column: format.go's
// sparse columns), so that exact segments cost nothing more.

// errSums are the error sums of the groups with a record that is not
// exact, by group key: the key of the pass that sums the groups Top
// returns (a global address id for BySrc and ByDst, a pair of them for
// ByPair, protocol and port for the port groupings).
type errSums map[uint64]flow.ErrorSum

// segment adds the accuracy of the records of s that are not exact and
// match f to their groups. group returns the group of row i, or false if
// the row is in no group this pass sums.
func (e errSums) segment(s *segment, f *segFilter, group func(i int) (uint64, bool)) {
	acc := s.cols[cAccuracy]
	if len(acc) == 0 {
		return // every record exact
	}
	c := &s.cols
	simple := f.simple()
	for i := range s.n {
		a := flow.Accuracy(acc[i])
		if a == flow.Exact || (!simple && !f.match(s, i)) {
			continue
		}
		g, ok := group(i)
		if !ok {
			continue
		}
		sum := e[g]
		sum.Add(a, sparseU64(c[cMaxErrPackets], i), sparseU64(c[cMaxErrBytes], i),
			math.Float64frombits(sparseU64(c[cErrConfidence], i)))
		e[g] = sum
	}
}

// merge adds o's sums into e.
func (e errSums) merge(o errSums) {
	for g, s := range o {
		sum := e[g]
		sum.Merge(&s)
		e[g] = sum
	}
}
