package storesink_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"loupe/internal/export"
	"loupe/internal/export/storesink"
	"loupe/internal/flow"
	"loupe/internal/store"
	"loupe/internal/testutil"
)

// eviction makes n records with varied packet counts, as one eviction
// would hand them over.
func eviction(seq, n int) []flow.Record {
	now := time.Now()
	recs := make([]flow.Record, n)
	for i := range recs {
		k := seq*n + i
		src := netip.AddrFrom4([4]byte{10, byte(k >> 16), byte(k >> 8), byte(k)})
		recs[i] = flow.Record{
			Key: flow.Key{SrcAddr: src.As16(), DstAddr: netip.MustParseAddr("10.255.0.1").As16(),
				SrcPort: uint16(k), DstPort: 443, Proto: 6, EtherType: flow.EtherTypeIPv4, Direction: flow.Egress},
			Iface: "eth0", Packets: uint64(k%13 + 1), Bytes: uint64(k%13+1) * 100,
			FirstSeen: now, LastSeen: now, Sampling: 1,
		}
	}
	return recs
}

// balance checks that every record and packet written is stored, pending
// or dropped.
func balance(t *testing.T, st export.SinkStats) {
	t.Helper()
	sum := st.Stored
	sum.Add(st.Pending)
	for _, d := range st.Dropped {
		sum.Add(d)
	}
	if sum != st.Written {
		t.Fatalf("stored %+v + pending %+v + dropped %+v = %+v, written %+v", st.Stored, st.Pending, st.Dropped, sum, st.Written)
	}
}

// TestFullDiskHeldRetriedAndCounted fills a real file system under the
// store: writes fail with ENOSPC, the sink holds a bounded batch and then
// counts what it drops, by reason, in records and packets; once the test
// gives the space back the held batch is stored at the next flush and the
// retries stop. What the store holds in the end is exactly what the sink
// counted as stored.
func TestFullDiskHeldRetriedAndCounted(t *testing.T) {
	mnt := testutil.Tmpfs(t, "8m")
	dir := filepath.Join(mnt, "store")
	const perEviction, maxPending = 2000, 5000
	sink, err := storesink.Open(storesink.Options{Dir: dir, MaxPending: maxPending, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fan := export.NewFanout(slog.New(slog.DiscardHandler), sink)
	ctx := context.Background()
	stats := func() export.SinkStats { return fan.Stats()[0] }
	seq := 0
	evict := func() error {
		fan.Write(ctx, eviction(seq, perEviction))
		seq++
		return fan.Flush(ctx)
	}

	// Leave 1 MiB free: the filler is what the test gives back later.
	filler := filepath.Join(mnt, "filler")
	testutil.Fill(t, filler)
	if err := os.Truncate(filler, mustSize(t, filler)-1<<20); err != nil {
		t.Fatal(err)
	}
	// Write until a flush fails for want of space.
	ok := 0
	for ; ; ok++ {
		if ok == 100 {
			t.Fatal("100 evictions fit in 1 MiB")
		}
		if err := evict(); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("flush failed, but not for space: %v", err)
			}
			break
		}
		balance(t, stats())
	}
	st := stats()
	balance(t, st)
	if ok == 0 || st.Pending.Records != perEviction || st.Stored.Records != uint64(ok*perEviction) {
		t.Fatalf("after %d stored evictions and a failed one: %+v", ok, st)
	}
	// Two more evictions: the held batch reaches its bound, the rest is
	// dropped with reason no_space.
	errorsBefore := st.Errors
	for range 2 {
		if err := evict(); err == nil {
			t.Fatal("a flush succeeded on a full disk")
		}
		balance(t, stats())
	}
	st = stats()
	wantDropped := uint64(3*perEviction - maxPending)
	if st.Pending.Records != maxPending || st.Dropped[export.ReasonNoSpace].Records != wantDropped ||
		st.Dropped[export.ReasonWriteError] != (export.Count{}) || st.Dropped[export.ReasonNoSpace].Packets == 0 {
		t.Fatalf("on a full disk: %+v", st)
	}
	if st.Errors <= errorsBefore {
		t.Fatalf("no failed write counted: %+v", st)
	}
	t.Logf("full disk: stored %+v, held %+v, dropped %+v, errors %d", st.Stored, st.Pending, st.Dropped, st.Errors)

	// Space returns: the next flush stores the held batch.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := fan.Flush(ctx); err != nil {
		t.Fatalf("flush after space returned: %v", err)
	}
	st = stats()
	balance(t, st)
	if st.Pending != (export.Count{}) || st.Stored.Records != uint64(ok*perEviction+maxPending) {
		t.Fatalf("after space returned: %+v", st)
	}
	// And the retries stop: later flushes, with and without new records,
	// fail no more.
	errorsAfter := st.Errors
	fan.Flush(ctx)
	if err := evict(); err != nil {
		t.Fatal(err)
	}
	fan.Flush(ctx)
	if st = stats(); st.Errors != errorsAfter || st.Pending != (export.Count{}) {
		t.Fatalf("still failing after space returned: %+v", st)
	}
	if err := fan.Close(); err != nil {
		t.Fatal(err)
	}
	st = stats()
	balance(t, st)
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".tmp-") {
			t.Errorf("failed writes left %s", de.Name())
		}
	}

	// What the store holds is what the sink counted as stored.
	rd, err := store.OpenReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got export.Count
	var rep store.Report
	q := store.NewQuery()
	q.Report = &rep
	if err := rd.Scan(ctx, q, func(r *flow.Record) error {
		got.Add(export.Count{Records: 1, Packets: r.Packets})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != st.Stored || len(rep.Corrupt) != 0 {
		t.Fatalf("the store holds %+v, the sink counted %+v stored (report %+v)", got, st.Stored, rep)
	}
	sum := st.Stored
	sum.Add(st.Dropped[export.ReasonNoSpace])
	if sum != st.Written {
		t.Fatalf("stored %+v + dropped %+v != written %+v", st.Stored, st.Dropped, st.Written)
	}
	t.Logf("written %+v = stored %+v + dropped %+v", st.Written, st.Stored, st.Dropped[export.ReasonNoSpace])
}

// TestCloseOnFullDiskCountsWhatIsLost: records still held when the sink
// closes on a full disk are counted as dropped, not lost silently.
func TestCloseOnFullDiskCountsWhatIsLost(t *testing.T) {
	mnt := testutil.Tmpfs(t, "1m")
	sink, err := storesink.Open(storesink.Options{Dir: filepath.Join(mnt, "store")})
	if err != nil {
		t.Fatal(err)
	}
	fan := export.NewFanout(slog.New(slog.DiscardHandler), sink)
	testutil.Fill(t, filepath.Join(mnt, "filler"))
	recs := eviction(0, 3000)
	fan.Write(context.Background(), recs)
	if err := fan.Close(); err == nil || !strings.Contains(err.Error(), "3000 records") {
		t.Fatalf("close on a full disk: %v", err)
	}
	st := fan.Stats()[0]
	balance(t, st)
	if st.Stored != (export.Count{}) || st.Dropped[export.ReasonNoSpace] != export.CountOf(recs) {
		t.Fatalf("stats %+v", st)
	}
}

func mustSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
