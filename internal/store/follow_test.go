package store_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// TestFollowWhileWriting follows a store whose writer compacts in the
// background as fast as it can: every record written after Follow started
// and matching the filter is printed once or counted as missed, never
// printed twice; none written before is printed.
func TestFollowWhileWriting(t *testing.T) {
	// Woken by inotify alone (no poll comes in the test's time), and by
	// inotify and frequent polls.
	t.Run("inotify", func(t *testing.T) { followWhileWriting(t, time.Hour) })
	t.Run("polling", func(t *testing.T) { followWhileWriting(t, 5*time.Millisecond) })
}

func followWhileWriting(t *testing.T, poll time.Duration) {
	const batches, batchSize = 120, 24
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{CompactFanIn: 2, CompactMaxSpan: 24 * time.Hour, MaintenanceInterval: time.Millisecond})
	defer s.Close()
	mk := func(b int) []flow.Record {
		recs := make([]flow.Record, batchSize)
		for i := range recs {
			recs[i] = flow.Record{
				Key: flow.Key{SrcAddr: netip.MustParseAddr("10.0.0.1").As16(), DstAddr: netip.MustParseAddr("10.0.0.2").As16(),
					SrcPort: uint16(b), DstPort: uint16(i), Proto: flow.ProtoUDP, EtherType: flow.EtherTypeIPv4,
					Direction: flow.Direction(i % 2)},
				Iface: "eth0", Packets: 1, Bytes: 100, FirstSeen: t0, LastSeen: t0.Add(time.Duration(b) * time.Second), Sampling: 1,
			}
		}
		return recs
	}
	for b := range 10 {
		if err := s.Write(context.Background(), mk(b)); err != nil {
			t.Fatal(err)
		}
	}
	r := openReader(t, dir)
	q := store.NewQuery()
	q.Direction = int(flow.Egress) // half of each batch
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	seen := map[[2]uint16]int{}
	var printed, missed uint64
	done := make(chan error, 1)
	go func() {
		done <- r.Follow(ctx, q, poll, store.FollowEvents{
			Missed: func(n uint64, why string) { mu.Lock(); missed += n; mu.Unlock() },
		}, func(rec *flow.Record) error {
			mu.Lock()
			defer mu.Unlock()
			if rec.Direction != flow.Egress {
				return fmt.Errorf("printed an ingress record %+v", rec.Key)
			}
			seen[[2]uint16{rec.SrcPort, rec.DstPort}]++
			printed++
			return nil
		})
	}()
	time.Sleep(50 * time.Millisecond) // the follower has read the manifest once
	for b := 10; b < 10+batches; b++ {
		if err := s.Write(context.Background(), mk(b)); err != nil {
			t.Fatal(err)
		}
		if b%10 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	want := uint64(batches * batchSize / 2)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := printed + missed
		mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // anything more would be a duplicate
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	perBatch := map[uint16]int{}
	for k, n := range seen {
		if k[0] < 10 || n != 1 {
			t.Errorf("record of batch %d, port %d printed %d times", k[0], k[1], n)
		}
		perBatch[k[0]]++
	}
	for b, n := range perBatch {
		if n != batchSize/2 {
			t.Errorf("batch %d: %d of its %d egress records printed", b, n, batchSize/2)
		}
	}
	// Missed counts whole segments' records, matching the filter or not.
	if missed%batchSize != 0 || printed+missed/2 != want {
		t.Errorf("printed %d and missed %d records, want %d matching in all", printed, missed, want)
	}
	st := s.Stats()
	t.Logf("printed %d, missed %d; writer: %d compactions", printed, missed, st.Compactions)
	if st.Compactions == 0 {
		t.Error("no compaction ran while following")
	}
}
