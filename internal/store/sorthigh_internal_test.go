package store

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortHigh: sortHigh orders by the high 32 bits whatever their width
// (one, two and three passes), and keeps every value.
func TestSortHigh(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, top := range []uint32{0, 1, 2047, 2048, 1<<22 - 1, 1 << 22, 1<<32 - 1} {
		for _, n := range []int{0, 1, 7, 5000} {
			xs := make([]uint64, n)
			for i := range xs {
				xs[i] = uint64(rng.Uint32N(top/2+1)*2)<<32 | uint64(rng.Uint32())
				if top&1 == 1 && i%3 == 0 {
					xs[i] |= 1 << 32
				}
			}
			high := func(x uint64) uint32 { return uint32(x >> 32) }
			want := slices.Clone(xs)
			slices.Sort(want)
			sortHigh(xs, top)
			if !slices.IsSortedFunc(xs, func(a, b uint64) int { return cmp.Compare(high(a), high(b)) }) {
				t.Fatalf("top %d, n %d: not in order of the high bits", top, n)
			}
			got := slices.Clone(xs)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("top %d, n %d: values changed", top, n)
			}
		}
	}
}
