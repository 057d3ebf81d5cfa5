package store

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sync"
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

// TestSortedOfPerInterner: two queries of a Reader whose interner was
// replaced meanwhile read the same segment, each with its own interner,
// at once; each must get its own interner's ids, in order, never the
// other's.
func TestSortedOfPerInterner(t *testing.T) {
	s, err := parseSegment(encodeBatch(t, oldSegmentRecords()), "two")
	if err != nil {
		t.Fatal(err)
	}
	a, b := &interner{}, &interner{}
	b.intern(addrKey{fam: famV6, a: [16]byte{0x20, 0x01, 15: 9}}) // b's ids differ from a's
	var wg sync.WaitGroup
	errs := make(chan string, 2)
	for _, in := range []*interner{a, b} {
		wg.Go(func() {
			for range 2000 {
				byID := in.sortedOf(s)
				keys := in.keysNow()
				for i, x := range byID {
					g, e := uint32(x>>32), uint32(x)
					if int(g) >= len(keys) || keys[g] != canon(s.addrKey(e)) || (i > 0 && g < uint32(byID[i-1]>>32)) {
						errs <- "an entry's id is not its interner's, or out of order"
						return
					}
				}
				_ = in.remapOf(s)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
