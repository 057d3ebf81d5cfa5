package store_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"loupe/internal/store"
)

// TestStagedSegmentsAppearWithTheirMark: segments staged for one eviction
// are invisible until Commit publishes them, together, with the mark; a
// store closed before the commit (as a crash would leave it) reopens
// without them and without the mark, and the mark survives reopening and
// compaction once committed.
func TestStagedSegmentsAppearWithTheirMark(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now().Add(-time.Hour)
	ctx := context.Background()
	s := openStore(t, dir, store.Options{NoBackground: true})
	stage := func(n int) store.Staged {
		b := store.NewBatch()
		for _, r := range gen(rng, n, base) {
			b.Add(&r)
		}
		st, err := s.Stage(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	abandoned := stage(50)
	if n := len(scanAll(t, openReader(t, dir), store.NewQuery())); n != 0 {
		t.Fatalf("a staged segment is visible: %d records", n)
	}
	if err := s.Close(); err != nil { // crash before the commit
		t.Fatal(err)
	}
	s = openStore(t, dir, store.Options{NoBackground: true})
	if _, ok := s.Stored(7); ok || len(segFiles(t, dir)) != 0 || abandoned.Records() != 50 {
		t.Fatalf("after a crash before the commit: mark found or %d segment files left", len(segFiles(t, dir)))
	}

	parts := []store.Staged{stage(30), stage(40)}
	if err := s.Commit(ctx, parts, []store.Mark{{Set: 7, Epoch: 12, RingPos: 4096}}); err != nil {
		t.Fatal(err)
	}
	if n := len(scanAll(t, openReader(t, dir), store.NewQuery())); n != 70 {
		t.Fatalf("%d records after the commit, want 70", n)
	}
	for range 8 { // enough small segments for a merge
		if err := s.Commit(ctx, []store.Staged{stage(5)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Maintain(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Compactions == 0 {
		t.Fatalf("no compaction ran: %+v", st)
	}
	s.Close()
	s = openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	if mk, ok := s.Stored(7); !ok || mk != (store.Mark{Set: 7, Epoch: 12, RingPos: 4096}) {
		t.Fatalf("mark after reopening: %+v %v", mk, ok)
	}
}
