package storesink_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"loupe/internal/export"
	"loupe/internal/export/storesink"
	"loupe/internal/flow"
	"loupe/internal/store"
	"loupe/internal/testutil"
)

func storedRecords(t *testing.T, dir string) (records, packets uint64) {
	t.Helper()
	r, err := store.OpenReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Scan(context.Background(), store.NewQuery(), func(rec *flow.Record) error {
		records++
		packets += rec.Packets
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return records, packets
}

// TestEvictionPublishedWithItsMark: an eviction bigger than the pending
// batch is written a segment at a time, but published at its end, at once,
// with its mark: until then no reader sees any of it.
func TestEvictionPublishedWithItsMark(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	sink, err := storesink.Open(storesink.Options{Dir: dir, MaxPending: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	ctx := context.Background()
	recs := eviction(0, 250)
	if err := sink.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if n, _ := storedRecords(t, dir); n != 0 {
		t.Fatalf("%d records visible before the eviction's end", n)
	}
	if _, ok := sink.Stored(7); ok {
		t.Fatal("a mark before any flush")
	}
	if err := sink.FlushMark(ctx, flow.Mark{Set: 7, Epoch: 3, RingPos: 88}); err != nil {
		t.Fatal(err)
	}
	if n, p := storedRecords(t, dir); n != 250 || p != export.CountOf(recs).Packets {
		t.Fatalf("stored %d records %d packets, want 250 and %d", n, p, export.CountOf(recs).Packets)
	}
	if m, ok := sink.Stored(7); !ok || m != (flow.Mark{Set: 7, Epoch: 3, RingPos: 88}) {
		t.Fatalf("mark %+v %v", m, ok)
	}
}

// TestMarkWaitsForHeldRecords: while the disk is full the sink holds the
// records, and with them their epochs: the store records no epoch whose
// records it does not hold. Once space returns, the held records and every
// held mark are committed together.
func TestMarkWaitsForHeldRecords(t *testing.T) {
	mnt := testutil.Tmpfs(t, "4m")
	dir := filepath.Join(mnt, "store")
	sink, err := storesink.Open(storesink.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	fan := export.NewFanout(slog.New(slog.DiscardHandler), sink)
	ctx := context.Background()
	filler := filepath.Join(mnt, "filler")
	testutil.Fill(t, filler)

	var want export.Count
	for epoch := uint64(1); epoch <= 2; epoch++ {
		recs := eviction(int(epoch), 3000)
		want.Add(export.CountOf(recs))
		fan.Write(ctx, recs)
		if err := fan.FlushMark(ctx, flow.Mark{Set: 7, Epoch: epoch, RingPos: epoch * 100}); err == nil {
			t.Fatalf("epoch %d: a flush to a full disk succeeded", epoch)
		}
		if m, ok := fan.Stored(7); ok {
			t.Fatalf("epoch %d: the store marks %+v while it holds none of the records", epoch, m)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	recs := eviction(3, 10)
	want.Add(export.CountOf(recs))
	fan.Write(ctx, recs)
	if err := fan.FlushMark(ctx, flow.Mark{Set: 7, Epoch: 3, RingPos: 300}); err != nil {
		t.Fatal(err)
	}
	if m, ok := fan.Stored(7); !ok || m.Epoch != 3 || m.RingPos != 300 {
		t.Fatalf("mark %+v %v, want epoch 3", m, ok)
	}
	if n, p := storedRecords(t, dir); n != want.Records || p != want.Packets {
		t.Fatalf("stored %d records %d packets, want %+v", n, p, want)
	}
	balance(t, fan.Stats()[0])
}
