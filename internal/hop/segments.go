package hop

import (
	"slices"
	"sort"
)

// segments are the groups of one tuple in the order of their first byte
// (lo), so that a stamp finds the groups its bytes share by a binary
// search. A keep-alive connection under load holds a window's worth of
// segments (thousands at a few thousand requests a second); walking them
// all for every stamp made the matcher's cost grow with the request rate.
type segments struct {
	// gs holds each group's lo beside it: a binary search through the
	// groups' pointers took a cache miss at every step.
	gs []seg
	// maxLen bounds every group's range (a group's range only shrinks):
	// a group that starts maxLen or more before a stamp cannot hold any
	// of its bytes, nor can any group before it.
	maxLen uint32
}

// seg is a group and its lo.
type seg struct {
	lo uint32
	g  *group
}

// search is the index of the first group whose lo is not before seq.
func (s *segments) search(seq uint32) int {
	return sort.Search(len(s.gs), func(i int) bool { return !seqLess(s.gs[i].lo, seq) })
}

// find is the group sharing a byte with [lo, hi) that ok accepts: of
// those, the one starting last, the newest of those starting at the same
// byte (a retransmission's group is newer than the original's).
func (s *segments) find(lo, hi uint32, ok func(*group) bool) *group {
	// Mostly the newest segment is the one: no search when it starts
	// before hi (then every group does).
	i := len(s.gs)
	if i > 0 && !seqLess(s.gs[i-1].lo, hi) {
		i = s.search(hi)
	}
	for i--; i >= 0; i-- {
		if !seqLess(lo, s.gs[i].lo+s.maxLen) {
			break
		}
		c := s.gs[i].g
		if seqLess(seqMax(c.lo, lo), seqMin(c.hi, hi)) && ok(c) {
			return c
		}
	}
	return nil
}

// insert adds g after the groups starting at or before its lo.
func (s *segments) insert(g *group) {
	i := len(s.gs)
	if i > 0 && seqLess(g.lo, s.gs[i-1].lo) {
		// Not the newest segment (mostly it is).
		i = sort.Search(len(s.gs), func(i int) bool { return seqLess(g.lo, s.gs[i].lo) })
	}
	s.gs = slices.Insert(s.gs, i, seg{g.lo, g})
	s.maxLen = max(s.maxLen, g.hi-g.lo)
}

// remove takes g out. Groups mostly leave from the front (their window
// ends in the order they came), where the slice is cut instead of
// shifted: with a window's worth of groups, moving them all for each
// took a sixth of the pipeline's time.
func (s *segments) remove(g *group) {
	if len(s.gs) > 0 && s.gs[0].g == g {
		s.gs[0] = seg{}
		s.gs = s.gs[1:]
		return
	}
	for i := s.search(g.lo); i < len(s.gs) && s.gs[i].lo == g.lo; i++ {
		if s.gs[i].g == g {
			s.gs = slices.Delete(s.gs, i, i+1)
			return
		}
	}
}
