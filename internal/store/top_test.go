package store_test

import (
	"math/rand/v2"
	"strconv"

	"loupe/internal/flow"
	"net/netip"
	"testing"
	"time"

	"loupe/internal/store"
)

func TestTopMatchesBruteForce(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	recs := gen(rng, 20000, t0)
	// Ties: groups with identical totals must still come out in a fixed
	// order. Each of these records is a group of its own in every grouping
	// (addresses and ports the generator never uses), with equal totals.
	tie := gen(rng, 40, t0)
	for i := range tie {
		tie[i].Bytes, tie[i].Packets = 777, 7
		tie[i].SrcAddr = netip.AddrFrom4([4]byte{172, 31, byte(i % 3), byte(i)}).As16()
		tie[i].DstAddr = netip.AddrFrom4([4]byte{172, 30, 0, byte(39 - i)}).As16()
		if i%2 == 1 {
			tie[i].SrcAddr = netip.MustParseAddr("2001:db8:ffff::" + strconv.Itoa(i)).As16()
		}
		tie[i].EtherType, tie[i].Proto, tie[i].DstPort = flow.EtherTypeIPv4, uint8(6+11*(i%2)), uint16(40000+i/2)
	}
	recs = append(recs, tie...)
	writeAll(t, s, recs, 1500)
	r := openReader(t, dir)
	queries := []store.Query{store.NewQuery()}
	q := store.NewQuery()
	q.Since, q.Until = t0.Add(15*time.Minute), t0.Add(45*time.Minute)
	queries = append(queries, q)
	q = store.NewQuery()
	q.Src, q.Proto = netip.MustParsePrefix("10.0.0.0/8"), 6
	queries = append(queries, q)
	q = store.NewQuery()
	q.Dst, q.Port = netip.MustParsePrefix("2001:db8::/32"), 443
	queries = append(queries, q)
	for qi, q := range queries {
		for by := store.BySrc; by <= store.ByPort; by++ {
			for _, n := range []int{0, 1, 3, 10, 1000} {
				want := bruteTop(recs, q, by, n)
				if len(want) == 0 {
					t.Fatalf("query %d/%v: test data gives no groups", qi, by)
				}
				got := top(t, r, q, by, n)
				sameTop(t, by.String(), got, want)
			}
		}
	}
	for _, name := range []string{"src", "dst", "pair", "port"} {
		if g, err := store.ParseGroupBy(name); err != nil || g.String() != name {
			t.Errorf("ParseGroupBy(%q) = %v, %v", name, g, err)
		}
	}
	if _, err := store.ParseGroupBy("proto"); err == nil {
		t.Error("ParseGroupBy(proto): no error")
	}
}
