package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// TestReaderConcurrentWithWriterAndCompaction runs readers against a writer
// whose background goroutine compacts aggressively. Every batch carries its
// number in SrcPort and has batchSize records of one byte each, so a reader
// can check that each answer is a consistent snapshot: whole batches only,
// none twice, and at least every batch whose Write returned before the
// query began.
func TestReaderConcurrentWithWriterAndCompaction(t *testing.T) {
	const batches, batchSize = 300, 40
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{
		CompactFanIn: 2, CompactMaxRecords: 2000, CompactMaxSpan: 24 * time.Hour,
		MaintenanceInterval: time.Millisecond,
	})
	r := openReader(t, dir)
	var done atomic.Int64 // batches whose Write returned
	var retries atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	check := func(what string, seen map[uint16]int, lowBound int64) error {
		for b, n := range seen {
			if n != batchSize {
				return fmt.Errorf("%s: batch %d has %d records, want %d", what, b, n, batchSize)
			}
			if int(b) >= batches {
				return fmt.Errorf("%s: unknown batch %d", what, b)
			}
		}
		if int64(len(seen)) < lowBound {
			return fmt.Errorf("%s: %d batches visible, %d were written before the query", what, len(seen), lowBound)
		}
		return nil
	}
	for g := range 3 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				low := done.Load()
				if g == 0 || i%2 == 0 {
					seen := map[uint16]int{}
					var rep store.Report
					q := store.NewQuery()
					q.Report = &rep
					err := r.Scan(context.Background(), q, func(rec *flow.Record) error {
						seen[rec.SrcPort]++
						return nil
					})
					retries.Add(int64(rep.Retries))
					if err == nil {
						err = check("scan", seen, low)
					}
					if err != nil {
						errs <- err
						return
					}
					continue
				}
				ents, err := r.Top(context.Background(), store.NewQuery(), store.ByPort, 0)
				if err != nil {
					errs <- err
					return
				}
				// One byte a record: bytes count records. A batch's
				// records may share a flow key, so flows count no more.
				var flows, bytes uint64
				for _, e := range ents {
					flows, bytes = flows+e.Flows, bytes+e.Bytes
				}
				if flows > bytes || (flows == 0) != (bytes == 0) || bytes%batchSize != 0 || bytes < uint64(low*batchSize) || bytes > batches*batchSize {
					errs <- fmt.Errorf("top: %d flows, %d bytes, %d batches written before", flows, bytes, low)
					return
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(61, 62))
	for b := range batches {
		recs := gen(rng, batchSize, t0)
		for i := range recs {
			recs[i].SrcPort, recs[i].Bytes = uint16(b), 1
		}
		if err := s.Write(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
		done.Add(1)
	}
	time.Sleep(50 * time.Millisecond) // let readers race the last merges
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st.Compactions == 0 {
		t.Error("no compaction ran during the test")
	}
	seen := map[uint16]int{}
	scanAll(t, r, store.NewQuery())
	if err := r.Scan(context.Background(), store.NewQuery(), func(rec *flow.Record) error { seen[rec.SrcPort]++; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := check("final", seen, batches); err != nil {
		t.Error(err)
	}
	t.Logf("writer stats: %+v; reader snapshot retries: %d", st, retries.Load())
}
