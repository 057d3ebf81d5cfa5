package store_test

import (
	"cmp"
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// bruteTraffic is Reader.Traffic computed from the records themselves.
func bruteTraffic(recs []flow.Record, q store.Query) store.TrafficSums {
	var out store.TrafficSums
	type key struct {
		iface string
		dir   flow.Direction
		sec   int64
	}
	points := map[key]*store.Volume{}
	add := func(v *store.Volume, r *flow.Record) {
		v.Bytes, v.Packets, v.Records = v.Bytes+r.Bytes, v.Packets+r.Packets, v.Records+1
	}
	for _, r := range filter(recs, q) {
		add(&out.Total, &r)
		add(&out.Protos[r.Proto], &r)
		if out.Oldest.IsZero() || r.FirstSeen.Before(out.Oldest) {
			out.Oldest = r.FirstSeen
		}
		k := key{r.Iface, r.Direction, r.LastSeen.Unix()}
		if points[k] == nil {
			points[k] = &store.Volume{}
		}
		add(points[k], &r)
	}
	for k, v := range points {
		out.Points = append(out.Points, store.TrafficPoint{Iface: k.iface, Direction: k.dir, Sec: k.sec, Volume: *v})
	}
	slices.SortFunc(out.Points, func(a, b store.TrafficPoint) int {
		return cmp.Or(cmp.Compare(a.Iface, b.Iface), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Sec, b.Sec))
	})
	return out
}

// TestTrafficMatchesBruteForce checks Traffic's sums against the records'
// own, under filters, over segments whose records span a few minutes (the
// sums go through an array) and one that spans days (through a map), with
// times before 1970 among them, twice from one Reader (its cached
// segments).
func TestTrafficMatchesBruteForce(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	rng := rand.New(rand.NewPCG(21, 22))
	recs := gen(rng, 12000, t0)
	wide := gen(rng, 300, t0)
	for i := range wide {
		wide[i].LastSeen = t0.Add(time.Duration(i) * 17 * time.Minute)
		wide[i].FirstSeen = wide[i].LastSeen.Add(-time.Duration(i) * time.Millisecond)
	}
	old := gen(rng, 50, time.Unix(-3600, 0))
	writeAll(t, s, recs, 1000)
	writeAll(t, s, wide, len(wide))
	writeAll(t, s, old, len(old))
	recs = slices.Concat(recs, wide, old)
	r := openReader(t, dir)
	queries := []store.Query{store.NewQuery()}
	q := store.NewQuery()
	q.Since, q.Until = t0.Add(10*time.Minute), t0.Add(40*time.Minute)
	queries = append(queries, q)
	q = store.NewQuery()
	q.Src, q.Proto, q.Ifaces = netip.MustParsePrefix("10.0.0.0/8"), 6, []string{"eth*"}
	queries = append(queries, q)
	q = store.NewQuery()
	q.MinRTT = time.Microsecond
	queries = append(queries, q)
	for qi, q := range queries {
		want := bruteTraffic(recs, q)
		if want.Total.Records == 0 {
			t.Fatalf("query %d: the test data matches nothing", qi)
		}
		for run := range 2 {
			var rep store.Report
			q.Report = &rep
			got, err := r.Traffic(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if got.Total != want.Total || got.Protos != want.Protos || !got.Oldest.Equal(want.Oldest) {
				t.Fatalf("query %d run %d: total %+v oldest %v, want %+v %v", qi, run, got.Total, got.Oldest, want.Total, want.Oldest)
			}
			if !slices.Equal(got.Points, want.Points) {
				t.Fatalf("query %d run %d: %d points, want %d; first %+v, want %+v", qi, run, len(got.Points), len(want.Points), got.Points[:1], want.Points[:1])
			}
			if rep.Matched != want.Total.Records {
				t.Fatalf("query %d: matched %d, want %d", qi, rep.Matched, want.Total.Records)
			}
		}
	}
}
