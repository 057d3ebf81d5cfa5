package store_test

import (
	"math"
	"net/netip"
	"testing"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// TestTopSumsErrorBounds checks Top's accuracy against numbers worked out
// by hand: a group with an estimate is an estimate whose bounds are the
// sums of its estimates' bounds, with confidence 1 - Σ(1 - c); one with a
// decoded record and no estimate is decoded; the others exact. The
// records are split over a segment of exact records only (no accuracy
// columns), and one of each kind.
func TestTopSumsErrorBounds(t *testing.T) {
	a := func(s string) [16]byte { return netip.MustParseAddr(s).As16() }
	rec := func(src, dst string, dport uint16, packets uint64, acc flow.Accuracy, errP, errB uint64, conf float64) flow.Record {
		return flow.Record{
			Key: flow.Key{SrcAddr: a(src), DstAddr: a(dst), EtherType: flow.EtherTypeIPv4, Proto: flow.ProtoUDP,
				SrcPort: 40000, DstPort: dport, IfIndex: 1},
			Packets: packets, Bytes: 100 * packets, FirstSeen: t0, LastSeen: t0,
			Accuracy: acc, MaxErrorPackets: errP, MaxErrorBytes: errB, ErrorConfidence: conf,
		}
	}
	exactOnly := []flow.Record{
		rec("10.9.0.1", "10.9.0.2", 80, 10, flow.Exact, 0, 0, 0),
		rec("10.9.0.5", "10.9.0.2", 80, 1, flow.Exact, 0, 0, 0),
	}
	mixed := []flow.Record{
		rec("10.9.0.1", "10.9.0.3", 443, 20, flow.Estimated, 3, 300, 0.98),
		rec("10.9.0.1", "10.9.0.2", 80, 5, flow.Estimated, 2, 100, 0.99),
		rec("10.9.0.4", "10.9.0.2", 80, 2, flow.Decoded, 0, 0, 0),
	}
	dir := t.TempDir()
	s := openStore(t, dir, storeOpts())
	defer s.Close()
	writeAll(t, s, exactOnly, len(exactOnly))
	writeAll(t, s, mixed, len(mixed))
	r := openReader(t, dir)

	type want struct {
		packets    uint64
		acc        flow.Accuracy
		errP, errB uint64
		conf       float64
	}
	for _, c := range []struct {
		by   store.GroupBy
		want []want // in Top's order: most bytes first
	}{
		{store.BySrc, []want{{35, flow.Estimated, 5, 400, 0.97}, {2, flow.Decoded, 0, 0, 1}, {1, flow.Exact, 0, 0, 1}}},
		{store.ByDst, []want{{20, flow.Estimated, 3, 300, 0.98}, {18, flow.Estimated, 2, 100, 0.99}}},
		{store.ByPair, []want{{20, flow.Estimated, 3, 300, 0.98}, {15, flow.Estimated, 2, 100, 0.99}, {2, flow.Decoded, 0, 0, 1}, {1, flow.Exact, 0, 0, 1}}},
		{store.ByPort, []want{{20, flow.Estimated, 3, 300, 0.98}, {18, flow.Estimated, 2, 100, 0.99}}},
		{store.BySrcPort, []want{{38, flow.Estimated, 5, 400, 0.97}}},
	} {
		for _, n := range []int{0, 1} {
			got := top(t, r, store.NewQuery(), c.by, n)
			w := c.want
			if n > 0 {
				w = w[:n]
			}
			if len(got) != len(w) {
				t.Fatalf("%v -n %d: %d groups, want %d: %+v", c.by, n, len(got), len(w), got)
			}
			for i, g := range got {
				e := g.Error
				if g.Packets != w[i].packets || e.Accuracy != w[i].acc || e.MaxErrorPackets != w[i].errP || e.MaxErrorBytes != w[i].errB ||
					math.Abs(e.Confidence()-w[i].conf) > 1e-12 {
					t.Errorf("%v -n %d: group %d: %d packets, %+v confidence %v; want %+v", c.by, n, i, g.Packets, e, e.Confidence(), w[i])
				}
			}
		}
	}
}

func storeOpts() store.Options { return store.Options{NoBackground: true} }
