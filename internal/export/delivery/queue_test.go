package delivery

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"loupe/internal/export"
	"loupe/internal/flow"
)

// fakeClient records what it delivered. fail decides, per call, how many
// records at the front of the batch to deliver before failing.
type fakeClient struct {
	mu        sync.Mutex
	got       []uint16 // SrcPort of every delivered record, in order
	calls     int
	maxBatch  int
	fail      func(call int, batch []flow.Record) (deliver int, err error)
	rejected  uint64
	closed    bool
	connected bool
	block     chan struct{} // if set, Send waits on it (or ctx)
}

func (c *fakeClient) Send(ctx context.Context, batch []flow.Record) ([]flow.Record, error) {
	if c.block != nil {
		select {
		case <-c.block:
		case <-ctx.Done():
			return batch, ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.maxBatch = max(c.maxBatch, len(batch))
	n, err := len(batch), error(nil)
	if c.fail != nil {
		n, err = c.fail(c.calls, batch)
	}
	for _, r := range batch[:n] {
		c.got = append(c.got, r.SrcPort)
	}
	return batch[n:], err
}

func (c *fakeClient) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func (c *fakeClient) delivered() []uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint16(nil), c.got...)
}

func records(from, n int) []flow.Record {
	out := make([]flow.Record, n)
	for i := range out {
		out[i].SrcPort = uint16(from + i)
		out[i].Packets = packetsOfPort(from + i)
	}
	return out
}

// packetsOfPort is the packet count of the record with that SrcPort:
// varied, so that a record counted in the wrong state shows in packets.
func packetsOfPort(p int) uint64 { return uint64(p%7*3 + 1) }

// pk sums the packets of the records with SrcPorts [from, to).
func pk(from, to int) uint64 {
	var n uint64
	for p := from; p < to; p++ {
		n += packetsOfPort(p)
	}
	return n
}

// accounted checks the queue's accounting against what was written: every
// record and packet is sent, queued or dropped, and sent and each drop
// reason hold exactly the packets expected.
func accounted(t *testing.T, q *Queue, written export.Count, sentPk uint64, droppedPk map[string]uint64) {
	t.Helper()
	a := q.Accounting()
	st := q.Stats()
	sum := a.Stored
	sum.Add(a.Pending)
	for _, d := range a.Dropped {
		sum.Add(d)
	}
	if sum != written {
		t.Errorf("sent+queued+dropped = %+v, written %+v (%+v)", sum, written, a)
	}
	if a.Stored.Records != st.Sent || a.Stored.Packets != sentPk {
		t.Errorf("sent %+v, want %d records, %d packets", a.Stored, st.Sent, sentPk)
	}
	want := map[string]uint64{ReasonQueueFull: 0, ReasonRejected: 0, ReasonShutdown: 0}
	for r, n := range droppedPk {
		want[r] = n
	}
	recs := map[string]uint64{ReasonQueueFull: st.DroppedQueueFull, ReasonRejected: st.DroppedRejected, ReasonShutdown: st.DroppedShutdown}
	for r, n := range want {
		if got := a.Dropped[r]; got.Packets != n || got.Records != recs[r] {
			t.Errorf("dropped %s: %+v, want %d records %d packets", r, got, recs[r], n)
		}
	}
}

func fastOptions() Options {
	return Options{
		QueueSize: 1000, BatchSize: 100, MaxLinger: 10 * time.Millisecond,
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func assertInOrder(t *testing.T, got []uint16, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("delivered %d records, want %d", len(got), n)
	}
	for i, p := range got {
		if int(p) != i {
			t.Fatalf("record %d delivered as %d: order or identity lost", i, p)
		}
	}
}

func TestDeliversEverythingInOrderInBatches(t *testing.T) {
	c := &fakeClient{}
	q := New("fake", c, fastOptions())
	for i := range 9 {
		if err := q.Write(context.Background(), records(i*100, 100)); err != nil {
			t.Fatal(err)
		}
	}
	q.Flush(context.Background())
	waitFor(t, "delivery", func() bool { return len(c.delivered()) == 900 })
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	assertInOrder(t, c.delivered(), 900)
	st := q.Stats()
	if st.Sent != 900 || st.Dropped() != 0 || st.Queued != 0 || st.SendErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
	if c.maxBatch > 100 {
		t.Fatalf("a Send got %d records, BatchSize is 100", c.maxBatch)
	}
	if !c.closed {
		t.Fatal("client not closed")
	}
	accounted(t, q, export.Count{Records: 900, Packets: pk(0, 900)}, pk(0, 900), nil)
}

func TestFullQueueDropsAndCounts(t *testing.T) {
	c := &fakeClient{block: make(chan struct{})}
	opts := fastOptions()
	q := New("fake", c, opts)
	// The worker takes one batch (100) and blocks in Send; the queue
	// holds 1000 records in all, in flight included.
	q.Write(context.Background(), records(0, 100))
	q.Flush(context.Background())
	waitFor(t, "the worker to take the batch", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.inflight == 100
	})
	done := make(chan struct{})
	go func() {
		// Must not wait for the blocked collector.
		q.Write(context.Background(), records(100, 1500))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Write blocked behind a stuck collector")
	}
	st := q.Stats()
	if st.DroppedQueueFull != 600 || st.Queued != 1000 {
		t.Fatalf("dropped %d queued %d, want 600 and 1000", st.DroppedQueueFull, st.Queued)
	}
	close(c.block)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	got := c.delivered()
	assertInOrder(t, got, 1000) // the first 1000 written, the rest dropped
	if st := q.Stats(); st.Sent+st.Dropped() != 1600 {
		t.Fatalf("sent %d + dropped %d != 1600 written", st.Sent, st.Dropped())
	}
	accounted(t, q, export.Count{Records: 1600, Packets: pk(0, 1600)}, pk(0, 1000), map[string]uint64{ReasonQueueFull: pk(1000, 1600)})
}

func TestRetriesUntilTheCollectorComesBack(t *testing.T) {
	c := &fakeClient{fail: func(call int, b []flow.Record) (int, error) {
		switch {
		case call <= 3:
			return 0, errors.New("connection refused")
		case call == 4:
			return len(b) / 2, errors.New("cut mid-batch") // sequential: a tail failed
		}
		return len(b), nil
	}}
	q := New("fake", c, fastOptions())
	q.Write(context.Background(), records(0, 250))
	q.Flush(context.Background())
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	assertInOrder(t, c.delivered(), 250)
	st := q.Stats()
	if st.SendErrors != 4 || st.Sent != 250 || st.Dropped() != 0 {
		t.Fatalf("stats %+v, want 4 send errors, 250 sent, 0 dropped", st)
	}
	accounted(t, q, export.Count{Records: 250, Packets: pk(0, 250)}, pk(0, 250), nil)
}

type rejectingClient struct {
	fakeClient
	pending uint64
}

// Send drops every record with an odd SrcPort as undeliverable.
func (c *rejectingClient) Send(_ context.Context, batch []flow.Record) ([]flow.Record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range batch {
		if r.SrcPort%2 == 1 {
			c.pending++
			continue
		}
		c.got = append(c.got, r.SrcPort)
	}
	return nil, nil
}

func (c *rejectingClient) Rejected() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.pending
	c.pending = 0
	return n
}

func TestRejectedRecordsAreCountedNotRetried(t *testing.T) {
	c := &rejectingClient{}
	q := New("fake", c, fastOptions())
	q.Write(context.Background(), records(0, 301))
	q.Close()
	st := q.Stats()
	if st.DroppedRejected != 150 || st.Sent != 151 || st.SendErrors != 0 {
		t.Fatalf("stats %+v, want 151 sent and 150 rejected of 301, no retries", st)
	}
	if got := len(c.delivered()); got != 151 {
		t.Fatalf("delivered %d, want 151", got)
	}
	// Which of a send's records were refused is unknown: their packets
	// stay with the delivered ones.
	accounted(t, q, export.Count{Records: 301, Packets: pk(0, 301)}, pk(0, 301), nil)

	// When a whole send is refused, its packets are known.
	c = &rejectingClient{}
	q = New("fake", c, fastOptions())
	odd := records(0, 40)
	odd = slices.DeleteFunc(odd, func(r flow.Record) bool { return r.SrcPort%2 == 0 })
	q.Write(context.Background(), odd)
	q.Close()
	var oddPk uint64
	for _, r := range odd {
		oddPk += r.Packets
	}
	accounted(t, q, export.Count{Records: 20, Packets: oddPk}, 0, map[string]uint64{ReasonRejected: oddPk})
}

func TestShutdownDeadlineCountsWhatIsLeft(t *testing.T) {
	c := &fakeClient{fail: func(int, []flow.Record) (int, error) { return 0, errors.New("collector down") }}
	opts := fastOptions()
	opts.ShutdownTimeout = 200 * time.Millisecond
	q := New("fake", c, opts)
	q.Write(context.Background(), records(0, 750))
	err := q.Close()
	if err == nil {
		t.Fatal("Close reported success with undelivered records")
	}
	st := q.Stats()
	if st.DroppedShutdown != 750 || st.Sent != 0 || st.Queued != 0 {
		t.Fatalf("stats %+v, want all 750 dropped at shutdown", st)
	}
	if !c.closed {
		t.Fatal("client not closed")
	}
	accounted(t, q, export.Count{Records: 750, Packets: pk(0, 750)}, 0, map[string]uint64{ReasonShutdown: pk(0, 750)})
	if err := q.Write(context.Background(), records(750, 1)); err == nil {
		t.Fatal("Write after Close accepted records")
	}
	accounted(t, q, export.Count{Records: 751, Packets: pk(0, 751)}, 0, map[string]uint64{ReasonShutdown: pk(0, 751)})
}

func TestFrontFailuresAreRetried(t *testing.T) {
	// A Kafka-like client: records fail independently; the failed ones are
	// moved to the front. Every third record fails on the first attempt.
	var mu sync.Mutex
	tried := map[uint16]bool{}
	var got []uint16
	c := &funcClient{send: func(b []flow.Record) ([]flow.Record, error) {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range b {
			if r.SrcPort%3 == 0 && !tried[r.SrcPort] {
				tried[r.SrcPort] = true
				b[n] = r
				n++
				continue
			}
			got = append(got, r.SrcPort)
		}
		if n > 0 {
			return b[:n], errors.New("partition leader moved")
		}
		return nil, nil
	}}
	q := New("fake", c, fastOptions())
	q.Write(context.Background(), records(0, 300))
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	seen := map[uint16]int{}
	for _, p := range got {
		seen[p]++
	}
	for i := range 300 {
		if seen[uint16(i)] != 1 {
			t.Fatalf("record %d delivered %d times", i, seen[uint16(i)])
		}
	}
	if st := q.Stats(); st.Sent != 300 || st.SendErrors != 3 {
		t.Fatalf("stats %+v, want 300 sent after 3 partial failures", st)
	}
	accounted(t, q, export.Count{Records: 300, Packets: pk(0, 300)}, pk(0, 300), nil)
}

type funcClient struct {
	send func([]flow.Record) ([]flow.Record, error)
}

func (c *funcClient) Send(_ context.Context, b []flow.Record) ([]flow.Record, error) {
	return c.send(b)
}
func (c *funcClient) Close() error { return nil }

func TestLimiterReportsSuppressedEvents(t *testing.T) {
	l := limiter{every: time.Hour}
	if n, ok := l.allow(3); !ok || n != 3 {
		t.Fatalf("first call: %d %v", n, ok)
	}
	for range 5 {
		if _, ok := l.allow(2); ok {
			t.Fatal("second line within the interval")
		}
	}
	l.last = l.last.Add(-2 * time.Hour)
	if n, ok := l.allow(1); !ok || n != 11 {
		t.Fatalf("after the interval: %d %v, want 11 true", n, ok)
	}
}

// A collector that hangs must not hold up the eviction nor the other
// exporters behind the same fan-out.
func TestStuckExporterDoesNotSlowTheOthers(t *testing.T) {
	stuck := &fakeClient{block: make(chan struct{})}
	healthy := &fakeClient{}
	opts := fastOptions()
	opts.ShutdownTimeout = 100 * time.Millisecond
	big := opts
	big.QueueSize = 4000 // holds everything: any loss would be the stuck one's doing
	qs, qh := New("stuck", stuck, opts), New("healthy", healthy, big)
	fan := export.NewFanout(slog.New(slog.DiscardHandler), qs, qh)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20 { // 2000 records: twice the stuck queue's size
			fan.Write(context.Background(), records(i*100, 100))
			fan.Flush(context.Background())
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fan-out blocked behind a stuck collector")
	}
	waitFor(t, "the healthy exporter", func() bool { return len(healthy.delivered()) == 2000 })
	fan.Close()
	assertInOrder(t, healthy.delivered(), 2000)
	st := qs.Stats()
	if st.Sent != 0 || st.DroppedQueueFull != 1000 || st.DroppedShutdown != 1000 {
		t.Fatalf("stuck exporter %+v: want 1000 dropped when full and 1000 at shutdown", st)
	}
}

type abandoningClient struct {
	fakeClient
}

// Abandoned says the last 40 records it reported delivered never were.
func (c *abandoningClient) Abandoned() uint64 { return 40 }

func TestAbandonedRecordsMoveFromSentToDropped(t *testing.T) {
	c := &abandoningClient{}
	q := New("fake", c, fastOptions())
	q.Write(context.Background(), records(0, 250))
	if err := q.Close(); err == nil || !strings.Contains(err.Error(), "40 records sent but never acknowledged") {
		t.Fatalf("Close: %v", err)
	}
	if st := q.Stats(); st.Sent != 210 || st.DroppedShutdown != 40 {
		t.Fatalf("stats %+v, want 210 sent and 40 dropped at shutdown", st)
	}
	accounted(t, q, export.Count{Records: 250, Packets: pk(0, 250)}, pk(0, 210), map[string]uint64{ReasonShutdown: pk(210, 250)})
}
