package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

var everyGrouping = []store.GroupBy{store.BySrc, store.ByDst, store.ByPair, store.ByPort, store.BySrcPort, store.ByDstPort,
	store.ByNamespace, store.ByWorkload, store.ByService}

// TestTopCacheMatchesFreshReaders: a Reader keeps what Top learnt of each
// segment (its mapping, the blocks it verified, its addresses' ids) from
// one query to the next. On randomized stores that change between
// queries (more writes, compaction replacing the segments it holds),
// every grouping of one Reader asked over and over, from several
// goroutines at once, answers as a new Reader does, and as the records
// say.
func TestTopCacheMatchesFreshReaders(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(3) {
		dir := t.TempDir()
		s := openStore(t, dir, store.Options{NoBackground: true, CompactMaxRecords: 5000})
		rng := rand.New(rand.NewPCG(100+seed, seed))
		warm := openReader(t, dir)
		var recs []flow.Record
		for round := range 4 {
			more := gen(rng, 2000+rng.IntN(2000), t0.Add(time.Duration(round)*7*time.Minute))
			writeAll(t, s, more, 400+rng.IntN(800))
			recs = append(recs, more...)
			if round%2 == 1 {
				if err := s.Maintain(ctx); err != nil {
					t.Fatal(err)
				}
			}
			fresh := openReader(t, dir)
			queries := []store.Query{store.NewQuery()}
			q := store.NewQuery()
			q.Since, q.Until = t0.Add(10*time.Minute), t0.Add(40*time.Minute)
			queries = append(queries, q)
			q = store.NewQuery()
			q.Src = netip.MustParsePrefix("10.0.0.0/8")
			queries = append(queries, q)
			for qi, q := range queries {
				var wg sync.WaitGroup
				for _, by := range everyGrouping {
					for _, n := range []int{0, 3} {
						want := top(t, fresh, q, by, n)
						if slices.Contains(allGroupings, by) {
							sameTop(t, "fresh reader", want, bruteTop(recs, q, by, n))
						}
						wg.Go(func() {
							got, err := warm.Top(ctx, q, by, n)
							if err != nil {
								t.Errorf("seed %d round %d query %d %v: %v", seed, round, qi, by, err)
							} else if !slices.Equal(got, want) {
								t.Errorf("seed %d round %d query %d %v top %d: the Reader used before says\n%v\na new one\n%v",
									seed, round, qi, by, n, head(got), head(want))
							}
						})
					}
				}
				wg.Wait()
			}
		}
		s.Close()
	}
}

// TestTopCacheSeesSegmentRewrittenInPlace: a segment file changed in
// place after a Reader's Top verified it (the writer never does that) is
// verified again, and set aside, rather than read as the file it was.
func TestTopCacheSeesSegmentRewrittenInPlace(t *testing.T) {
	const kindBytes = 4
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	recs := gen(rand.New(rand.NewPCG(31, 32)), 3000, t0)
	writeAll(t, s, recs, 1000)
	s.Close()
	r := openReader(t, dir)
	var rep store.Report
	q := store.NewQuery()
	q.Report = &rep
	for _, by := range allGroupings {
		sameTop(t, "before", top(t, r, q, by, 0), bruteTop(recs, store.NewQuery(), by, 0))
	}
	if len(rep.Corrupt) != 0 {
		t.Fatalf("report %+v", rep)
	}
	victim := segFiles(t, dir)[1]
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	off, n := blockAt(t, b, kindBytes)
	f, err := os.OpenFile(victim, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[off+n/2] ^ 0x40}, int64(off+n/2)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := slices.Concat(recs[:1000], recs[2000:])
	for _, by := range allGroupings {
		sameTop(t, "after", top(t, r, q, by, 0), bruteTop(want, store.NewQuery(), by, 0))
		if len(rep.Corrupt) != 1 || rep.Corrupt[0].Path != victim || !errors.Is(rep.Corrupt[0].Err, store.ErrCorrupt) || rep.Read != 2 {
			t.Fatalf("%v: report %+v", by, rep)
		}
	}
}

// TestReaderClose: Close lets go of the segments a Reader keeps, and the
// Reader still answers afterwards, from segments it maps again.
func TestReaderClose(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	recs := gen(rand.New(rand.NewPCG(41, 42)), 2000, t0)
	writeAll(t, s, recs, 500)
	s.Close()
	r := openReader(t, dir)
	for range 2 {
		for _, by := range allGroupings {
			sameTop(t, by.String(), top(t, r, store.NewQuery(), by, 5), bruteTop(recs, store.NewQuery(), by, 5))
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
