package kafka

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"loupe/internal/export/delivery"
	"loupe/internal/flow"
	kafkapeer "loupe/internal/testutil/kafka"
)

// TestBrokerKilledAndRestarted feeds records steadily through the delivery
// queue while the broker is killed (SIGKILL) and restarted, with a queue
// small enough that the outage overflows it. Afterwards every record sent
// is either in Kafka or counted as dropped, nothing is in Kafka that was
// not sent, and records written after the restart arrived: the client
// reconnected by itself.
func TestBrokerKilledAndRestarted(t *testing.T) {
	b := kafkapeer.Start(t)
	const topic = "flows-restart"
	b.CreateTopic(t, topic, 4)
	c, err := New("kafka://"+b.Addr()+"/"+topic, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	const (
		total     = 20000
		chunk     = 50
		queueSize = 2000
		killAt    = 5000  // records written before the kill
		deadUntil = 11000 // written while the broker is dead: > 2 queues
		resumeAt  = 15000 // written once the restarted broker drained the queue
	)
	q := delivery.New("kafka", c, delivery.Options{
		QueueSize: queueSize, BatchSize: 500, MaxLinger: 20 * time.Millisecond,
		RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		ShutdownTimeout: time.Minute, Logger: testLogger(t),
	})
	t.Cleanup(func() { _ = q.Close() }) // a no-op after the Close below
	// 400 flows × 50 records; Packets (1..total) identifies each record.
	sent := testRecords(400, total/400)

	// The writer feeds chunks steadily, stopping at two gates the test
	// opens: before record killAt until the broker is killed, and before
	// record resumeAt until the restarted broker has drained the queue.
	var written atomic.Int64
	killed, drained := make(chan struct{}), make(chan struct{})
	stop, writerDone := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-writerDone }) // also when the test fails early
	droppedIDs := map[uint64]bool{}                 // written by the writer goroutine, read after it ends
	go func() {
		defer close(writerDone)
		batch := make([]flow.Record, chunk)
		for i := 0; i < total; i += chunk {
			var gate chan struct{}
			switch i {
			case killAt:
				gate = killed
			case resumeAt:
				gate = drained
			}
			if gate != nil {
				select {
				case <-gate:
				case <-stop:
					return
				}
			}
			copy(batch, sent[i:i+chunk])
			full0 := q.Stats().DroppedQueueFull
			if err := q.Write(context.Background(), batch); err != nil {
				t.Error(err)
				return
			}
			// Write keeps a prefix of the batch and drops the rest; this
			// goroutine is the only writer, so the counter's growth
			// names the dropped records exactly.
			for k := range int(q.Stats().DroppedQueueFull - full0) {
				droppedIDs[batch[chunk-1-k].Packets] = true
			}
			clear(batch) // the queue keeps copies, not our slice
			written.Store(int64(i + chunk))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited a minute for %s (written %d, stats %+v)", what, written.Load(), q.Stats())
			}
		}
	}

	waitFor("delivery before the kill", func() bool { return written.Load() == killAt && q.Stats().Sent >= 1000 })
	before := q.Stats()
	b.Kill()
	close(killed)
	waitFor("records written while the broker is dead", func() bool { return written.Load() >= deadUntil })
	b.Restart(t)
	waitFor("the queue to drain after the restart", func() bool { return q.Stats().Queued == 0 })
	after := q.Stats()
	close(drained)
	<-writerDone
	if err := q.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	st := q.Stats()
	t.Logf("before the kill: sent %d, dropped %d; after the restart and drain: sent %d, dropped %d",
		before.Sent, before.Dropped(), after.Sent, after.Dropped())
	t.Logf("queue: sent %d, dropped %d (queue full %d, rejected %d, shutdown %d), send errors %d, batches %d",
		st.Sent, st.Dropped(), st.DroppedQueueFull, st.DroppedRejected, st.DroppedShutdown, st.SendErrors, st.Batches)
	if st.Sent+st.Dropped() != total {
		t.Errorf("queue accounts for %d sent + %d dropped, want %d", st.Sent, st.Dropped(), total)
	}
	if st.DroppedShutdown != 0 || st.DroppedRejected != 0 {
		t.Errorf("dropped at shutdown %d, rejected %d: the restarted broker should have taken everything queued",
			st.DroppedShutdown, st.DroppedRejected)
	}
	if st.DroppedQueueFull-before.DroppedQueueFull < deadUntil-killAt-queueSize {
		t.Errorf("%d records dropped during the outage, want at least %d: %d were written into a queue of %d",
			st.DroppedQueueFull-before.DroppedQueueFull, deadUntil-killAt-queueSize, deadUntil-killAt, queueSize)
	}

	inKafka := topicRecords(t, b.ClientOpts(), topic)
	got := consume(t, b.ClientOpts(), topic, inKafka)
	seen := make(map[uint64]int, len(got))
	for _, kr := range got {
		r, err := decode(FormatProtobuf, kr.Value)
		if err != nil {
			t.Fatalf("offset %d: %v", kr.Offset, err)
		}
		if r.Packets < 1 || r.Packets > total {
			t.Fatalf("consumed a record that was never sent: %+v", r)
		}
		if want := sent[r.Packets-1]; !reflect.DeepEqual(r, want) {
			t.Fatalf("record %d:\n got %+v\nsent %+v", r.Packets, r, want)
		}
		seen[r.Packets]++
	}
	duplicates := len(got) - len(seen)
	missing := total - len(seen)
	late := 0
	for id := resumeAt + 1; id <= total; id++ {
		late += min(seen[uint64(id)], 1)
	}
	droppedLate := st.Dropped() - after.Dropped()
	t.Logf("consumed %d records: %d distinct, %d duplicates, %d missing; %d of the %d written after the restart (%d of them dropped)",
		len(got), len(seen), duplicates, missing, late, total-resumeAt, droppedLate)
	if uint64(missing) > st.Dropped() {
		t.Errorf("%d records missing but only %d counted as dropped", missing, st.Dropped())
	}
	// Exactly: every record is in Kafka or was dropped by a Write, never
	// both, never neither.
	for id := uint64(1); id <= total; id++ {
		if inK, dropped := seen[id] > 0, droppedIDs[id]; inK == dropped {
			t.Errorf("record %d: in Kafka %v, counted as dropped %v", id, inK, dropped)
			break
		}
	}
	if uint64(len(droppedIDs)) != st.DroppedQueueFull {
		t.Errorf("%d records named as dropped, the queue counted %d", len(droppedIDs), st.DroppedQueueFull)
	}
	if uint64(len(seen)) < st.Sent {
		t.Errorf("%d distinct records in Kafka, but the queue counted %d as delivered", len(seen), st.Sent)
	}
	if duplicates != 0 && st.SendErrors == 0 {
		// No Send failed, so the queue resent nothing: a duplicate could
		// only come from franz-go's own retries, which idempotent writes
		// deduplicate.
		t.Errorf("%d duplicates although no Send failed", duplicates)
	}
	if late == 0 || uint64(late)+droppedLate != total-resumeAt {
		t.Errorf("of the %d records written after the restart, %d arrived and %d were dropped",
			total-resumeAt, late, droppedLate)
	}
	if !c.Connected() {
		t.Errorf("client reports no connection after delivering")
	}
}

// TestSendAbandonedByContext checks that a Send cut short by its context
// (broker dead) returns every record as failed, that franz-go does not
// deliver them later anyway, and that the next Send's encoding corrupts
// nothing: after the restart, Kafka holds the records of the Sends before
// and after the outage exactly once and nothing else.
func TestSendAbandonedByContext(t *testing.T) {
	b := kafkapeer.Start(t)
	const topic = "flows-abandon"
	b.CreateTopic(t, topic, 4)
	c, err := New("kafka://"+b.Addr()+"/"+topic, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	all := testRecords(100, 9)
	before, during, after := all[:300], all[300:600], all[600:]
	send := func(recs []flow.Record, timeout time.Duration) ([]flow.Record, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.Send(ctx, append([]flow.Record(nil), recs...))
	}
	if failed, err := send(before, time.Minute); err != nil || len(failed) != 0 {
		t.Fatalf("before the kill: %d failed: %v", len(failed), err)
	}
	b.Kill()
	failed, err := send(during, time.Second)
	if err == nil || !reflect.DeepEqual(failed, during) {
		t.Fatalf("while dead: %d of %d failed (in order: %v): %v", len(failed), len(during), reflect.DeepEqual(failed, during), err)
	}
	if c.Connected() {
		t.Errorf("connected while the broker is dead")
	}
	b.Restart(t)
	if failed, err := send(after, time.Minute); err != nil || len(failed) != 0 {
		t.Fatalf("after the restart: %d failed: %v", len(failed), err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	got := consume(t, b.ClientOpts(), topic, topicRecords(t, b.ClientOpts(), topic))
	seen := map[uint64]int{}
	for _, kr := range got {
		r, err := decode(FormatProtobuf, kr.Value)
		if err != nil {
			t.Fatalf("offset %d: %v", kr.Offset, err)
		}
		if r.Packets < 1 || r.Packets > uint64(len(all)) || !reflect.DeepEqual(r, all[r.Packets-1]) {
			t.Fatalf("consumed a record that was never sent: %+v", r)
		}
		seen[r.Packets]++
	}
	lateDuring := 0
	for i, r := range all {
		switch n := seen[r.Packets]; {
		case i >= 300 && i < 600:
			// The broker was dead for the whole Send, and franz-go may
			// cancel what a Send gave up (AllowIdempotentProduceCancellation):
			// a record reported failed must not arrive later as well, or
			// the queue's retry would duplicate it.
			lateDuring += n
			if n != 0 {
				t.Errorf("abandoned record %d consumed %d times, want 0", r.Packets, n)
			}
		case n != 1:
			t.Errorf("record %d consumed %d times, want once", r.Packets, n)
		}
	}
	t.Logf("%d records consumed; %d of the %d abandoned ones were delivered after all", len(got), lateDuring, len(during))
}
