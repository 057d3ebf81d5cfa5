package otlp

import (
	"context"
	"errors"
	"testing"
	"time"

	"loupe/internal/export/delivery"
)

// waitFor polls cond every 20 ms for at most 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func queueOptions() delivery.Options {
	return delivery.Options{
		QueueSize: 10_000, BatchSize: 500, MaxLinger: 10 * time.Millisecond,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		ShutdownTimeout: 30 * time.Second, Logger: quietLogger(),
	}
}

// TestQueueDeliversOnceTheCollectorIsUp writes through delivery.Queue to a
// collector that is not there yet: the queue retries the failed batch,
// and once the collector starts every record arrives exactly once, in
// order, with the metrics totals equal to what was written.
func TestQueueDeliversOnceTheCollectorIsUp(t *testing.T) {
	addr := freeAddr(t)
	c, err := New("otlp://"+addr, Options{Logger: quietLogger(), HostName: "node-1", MetricsInterval: -1, MaxRequestRecords: 200})
	if err != nil {
		t.Fatal(err)
	}
	q := delivery.New("otlp://"+addr, c, queueOptions())
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = q.Close()
		}
	})
	batch := manyRecords(1234, 3)
	if err := q.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a failed send while the collector is down", func() bool { return q.Stats().SendErrors >= 2 })
	if st := q.Stats(); st.Sent != 0 || st.Connected != 0 || st.Queued != 1234 {
		t.Fatalf("collector down: %+v; want nothing sent, 1234 queued, not connected", st)
	}

	col := startCollector(t, addr, collectorConfig{})
	waitFor(t, "delivery", func() bool { return q.Stats().Sent == 1234 })
	st := q.Stats()
	if st.Dropped() != 0 || st.Queued != 0 || st.Connected != 1 {
		t.Fatalf("after delivery: %+v; want nothing dropped or queued, connected", st)
	}
	got := col.logRecords()
	if len(got) != len(batch) {
		t.Fatalf("collector received %d records, want each of the %d exactly once", len(got), len(batch))
	}
	for i := range batch {
		if got[i].attrs["loupe.flow.packets"] != int64(batch[i].Packets) {
			t.Fatalf("record %d arrived as %v packets, want %d (order or duplicates)", i, got[i].attrs["loupe.flow.packets"], batch[i].Packets)
		}
	}
	closed = true
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// manyRecords: packets 1..1234, bytes 100 times that.
	var packets, bytes int64
	for _, p := range col.lastMetrics(t) {
		switch p.metric {
		case MetricPackets:
			packets += p.value
		case MetricIO:
			bytes += p.value
		}
	}
	if want := int64(1234 * 1235 / 2); packets != want || bytes != 100*want {
		t.Fatalf("metrics total %d packets %d bytes, want %d and %d", packets, bytes, want, 100*want)
	}
}

// TestQueueCountsRejectedRecords: a collector that refuses records for good
// makes the queue count them as dropped with reason rejected, once, and
// not retry them.
func TestQueueCountsRejectedRecords(t *testing.T) {
	col := startCollector(t, "", collectorConfig{logsErr: permanentErr(errors.New("unparseable"))})
	c, err := New(col.target(), Options{Logger: quietLogger(), HostName: "node-1", DisableMetrics: true, MaxRequestRecords: 100})
	if err != nil {
		t.Fatal(err)
	}
	q := delivery.New(col.target(), c, queueOptions())
	t.Cleanup(func() { _ = q.Close() })
	if err := q.Write(context.Background(), manyRecords(250, 1)); err != nil {
		t.Fatal(err)
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rejection to be counted", func() bool { return q.Stats().DroppedRejected == 250 })
	st := q.Stats()
	if st.SendErrors != 0 || st.DroppedQueueFull != 0 || st.DroppedShutdown != 0 || st.Queued != 0 {
		t.Fatalf("stats %+v; want 250 rejected, no send error (no retry), nothing else dropped or queued", st)
	}
}
