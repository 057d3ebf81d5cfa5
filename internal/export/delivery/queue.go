package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"loupe/internal/export"
	"loupe/internal/flow"
)

// Options tune a Queue. Zero values take the defaults in brackets.
type Options struct {
	// QueueSize bounds the records waiting for delivery [65536]. Memory
	// grows with use up to about QueueSize × 360 bytes (a flow.Record,
	// its interface name, DNS name and drop reasons shared, not copied).
	QueueSize int
	// BatchSize is the most records handed to one Send [4096].
	BatchSize int
	// MaxLinger is how long records wait for a fuller batch before they
	// are sent anyway [1s]. Flush (the end of an eviction) sends at once.
	MaxLinger time.Duration
	// RetryMin and RetryMax bound the exponential back-off between failed
	// sends [100ms, 30s]. Each wait is jittered by ±20 %.
	RetryMin, RetryMax time.Duration
	// SendTimeout bounds one Send call [30s].
	SendTimeout time.Duration
	// ShutdownTimeout bounds Close: what is not delivered by then is
	// counted as dropped [5s].
	ShutdownTimeout time.Duration
	// LogInterval rate-limits the log lines on drops and send failures to
	// one per interval per exporter [10s].
	LogInterval time.Duration
	Logger      *slog.Logger
}

// Defaults of Options.
const (
	DefaultQueueSize       = 65536
	DefaultBatchSize       = 4096
	DefaultMaxLinger       = time.Second
	DefaultRetryMax        = 30 * time.Second
	DefaultShutdownTimeout = 5 * time.Second
)

func (o *Options) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	o.BatchSize = min(o.BatchSize, o.QueueSize)
	def(&o.MaxLinger, DefaultMaxLinger)
	def(&o.RetryMin, 100*time.Millisecond)
	def(&o.RetryMax, DefaultRetryMax)
	o.RetryMax = max(o.RetryMax, o.RetryMin)
	def(&o.SendTimeout, 30*time.Second)
	def(&o.ShutdownTimeout, DefaultShutdownTimeout)
	def(&o.LogInterval, 10*time.Second)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Drop reasons, the values of the reason label of
// loupe_export_dropped_records_total.
const (
	ReasonQueueFull = "queue_full" // Write found the queue full
	ReasonRejected  = "rejected"   // the client or collector refused records
	ReasonShutdown  = "shutdown"   // not delivered by the shutdown deadline
)

// Stats are one exporter's delivery counters.
type Stats struct {
	Name     string
	Queued   int    // records waiting now, including a batch being retried
	Capacity int    // QueueSize
	Sent     uint64 // records the client delivered
	// Dropped counts records given up, by reason (ReasonQueueFull...).
	DroppedQueueFull, DroppedRejected, DroppedShutdown uint64
	Batches                                            uint64 // successful Send calls
	SendErrors                                         uint64 // failed Send calls (each is retried)
	// Connected is 1 or 0 if the client reports its connection, -1 if it
	// cannot tell.
	Connected int
	// Unreachable counts the times the collector's host refused a send
	// (see Unreacher); HasUnreachable says whether the client tells.
	Unreachable    uint64
	HasUnreachable bool
}

// Dropped is the sum of every drop reason.
func (s Stats) Dropped() uint64 { return s.DroppedQueueFull + s.DroppedRejected + s.DroppedShutdown }

// Queue is the export.Sink of one network exporter: a bounded record queue
// drained by one goroutine that sends batches through a Client.
type Queue struct {
	name   string
	client Client
	opts   Options
	log    *slog.Logger

	mu       sync.Mutex
	ring     []flow.Record // circular; grows by doubling up to QueueSize
	head, n  int
	inflight int  // records taken by the worker and not yet settled
	flushReq bool // Flush was called: send what is queued now
	closing  bool

	wake chan struct{} // capacity 1: "look at the queue"
	done chan struct{} // closed when the worker has returned

	// stop is cancelled when the shutdown deadline passes; it aborts a
	// Send or a back-off wait in progress.
	stop     context.Context
	stopNow  context.CancelFunc
	closeOne sync.Once
	closeErr error

	sent, batches, sendErrors                     atomic.Uint64
	droppedFull, droppedRejected, droppedShutdown atomic.Uint64
	dropLog, errLog                               limiter

	// pk counts the packets of the records in each state, for
	// Accounting; guarded by mu.
	pk struct{ queued, sent, full, rejected, shutdown uint64 }
	// recent holds the packets of the last records delivered, oldest
	// first, for a client that may give them up at Close (Abandoner);
	// nil otherwise. Guarded by mu.
	recent              []uint64
	recentHead, recentN int
}

// New starts the queue's worker. name identifies the exporter in logs and
// metrics, e.g. "ipfix+udp://collector:4739".
func New(name string, c Client, opts Options) *Queue {
	opts.setDefaults()
	q := &Queue{
		name:   name,
		client: c,
		opts:   opts,
		log:    opts.Logger.With("component", "export", "exporter", name),
		ring:   make([]flow.Record, min(1024, opts.QueueSize)),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	q.dropLog.every = opts.LogInterval
	q.errLog.every = opts.LogInterval
	if _, ok := c.(Abandoner); ok {
		q.recent = make([]uint64, opts.QueueSize)
	}
	q.stop, q.stopNow = context.WithCancel(context.Background())
	go q.run()
	return q
}

// Name implements export.Sink.
func (q *Queue) Name() string { return q.name }

// Write implements export.Sink. It copies what fits into the queue and
// counts the rest as dropped; it never waits for the collector.
func (q *Queue) Write(_ context.Context, batch []flow.Record) error {
	q.mu.Lock()
	if q.closing {
		q.pk.shutdown += packetsOf(batch)
		q.mu.Unlock()
		q.droppedShutdown.Add(uint64(len(batch)))
		return errors.New("exporter closed")
	}
	free := q.opts.QueueSize - q.n - q.inflight
	take := min(len(batch), max(free, 0))
	q.grow(q.n + take)
	for i := range take {
		q.ring[(q.head+q.n+i)%len(q.ring)] = batch[i]
	}
	q.n += take
	q.pk.queued += packetsOf(batch[:take])
	q.pk.full += packetsOf(batch[take:])
	full := q.n >= q.opts.BatchSize
	q.mu.Unlock()

	if lost := len(batch) - take; lost > 0 {
		total := q.droppedFull.Add(uint64(lost))
		if n, ok := q.dropLog.allow(uint64(lost)); ok {
			q.log.Warn("export queue full: dropping records",
				"dropped", n, "dropped_total", total, "queue_size", q.opts.QueueSize)
		}
	}
	if full {
		q.signal()
	}
	return nil
}

// grow makes the ring hold at least want records, keeping their order.
// The caller holds q.mu.
func (q *Queue) grow(want int) {
	if want <= len(q.ring) {
		return
	}
	size := len(q.ring)
	for size < want {
		size *= 2
	}
	size = min(size, q.opts.QueueSize)
	ring := make([]flow.Record, size)
	for i := range q.n {
		ring[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.ring, q.head = ring, 0
}

// Flush implements export.Sink: what is queued is sent now rather than
// after MaxLinger. It does not wait for delivery.
func (q *Queue) Flush(context.Context) error {
	q.mu.Lock()
	q.flushReq = true
	q.mu.Unlock()
	q.signal()
	return nil
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Close implements export.Sink: it sends everything queued, waiting at most
// ShutdownTimeout, counts what is left as dropped and closes the client.
func (q *Queue) Close() error {
	q.closeOne.Do(func() {
		q.mu.Lock()
		q.closing = true
		q.mu.Unlock()
		q.signal()
		timer := time.NewTimer(q.opts.ShutdownTimeout)
		select {
		case <-q.done:
		case <-timer.C:
			q.stopNow()
			<-q.done
		}
		timer.Stop()
		q.stopNow()
		if n := q.droppedShutdown.Load(); n > 0 {
			q.log.Error("shutdown deadline passed: records not delivered",
				"dropped", n, "shutdown_timeout", q.opts.ShutdownTimeout)
			q.closeErr = fmt.Errorf("%d records not delivered within %s", n, q.opts.ShutdownTimeout)
		}
		if err := q.client.Close(); err != nil {
			q.closeErr = errors.Join(q.closeErr, err)
		}
		if a, ok := q.client.(Abandoner); ok {
			if n := min(a.Abandoned(), q.sent.Load()); n > 0 {
				q.sent.Add(^(n - 1)) // subtract n
				q.droppedShutdown.Add(n)
				q.abandon(n)
				q.closeErr = errors.Join(q.closeErr, fmt.Errorf("%d records sent but never acknowledged by the collector", n))
			}
		}
		st := q.Stats()
		q.log.Info("exporter closed", "sent", st.Sent, "dropped_queue_full", st.DroppedQueueFull,
			"dropped_rejected", st.DroppedRejected, "dropped_shutdown", st.DroppedShutdown, "send_errors", st.SendErrors)
	})
	return q.closeErr
}

// Stats returns the exporter's counters.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	queued := q.n + q.inflight
	q.mu.Unlock()
	st := Stats{
		Name:             q.name,
		Queued:           queued,
		Capacity:         q.opts.QueueSize,
		Sent:             q.sent.Load(),
		DroppedQueueFull: q.droppedFull.Load(),
		DroppedRejected:  q.droppedRejected.Load(),
		DroppedShutdown:  q.droppedShutdown.Load(),
		Batches:          q.batches.Load(),
		SendErrors:       q.sendErrors.Load(),
		Connected:        -1,
	}
	if c, ok := q.client.(Connector); ok {
		st.Connected = 0
		if c.Connected() {
			st.Connected = 1
		}
	}
	if u, ok := q.client.(Unreacher); ok {
		st.Unreachable, st.HasUnreachable = u.Unreachable(), true
	}
	return st
}

// run is the worker: it waits for a full batch, a Flush, MaxLinger or
// Close, then sends until the queue is empty.
func (q *Queue) run() {
	defer close(q.done)
	batch := make([]flow.Record, 0, q.opts.BatchSize)
	linger := time.NewTimer(q.opts.MaxLinger)
	defer linger.Stop()
	for {
		select {
		case <-q.wake:
		case <-linger.C:
		}
		linger.Reset(q.opts.MaxLinger)
		for {
			var closing bool
			batch, closing = q.take(batch[:0])
			if len(batch) == 0 {
				if closing {
					return
				}
				break
			}
			q.deliver(batch)
		}
	}
}

// take moves up to BatchSize queued records into batch. The worker only
// calls it when woken by a full batch, a Flush, MaxLinger or Close, and
// then empties the queue.
func (q *Queue) take(batch []flow.Record) ([]flow.Record, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(q.n, q.opts.BatchSize)
	for i := range n {
		j := (q.head + i) % len(q.ring)
		batch = append(batch, q.ring[j])
		q.ring[j] = flow.Record{} // drop the Iface string reference
	}
	q.head = (q.head + n) % len(q.ring)
	q.n -= n
	q.inflight = n
	if q.n == 0 {
		q.flushReq = false
	}
	return batch, q.closing
}

// deliver sends batch until every record is delivered, rejected, or the
// shutdown deadline passes.
func (q *Queue) deliver(batch []flow.Record) {
	pending := batch
	backoff := q.opts.RetryMin
	for len(pending) > 0 {
		pendingPk := packetsOf(pending)
		ctx, cancel := context.WithTimeout(q.stop, q.opts.SendTimeout)
		failed, err := q.client.Send(ctx, pending)
		cancel()
		if len(failed) > len(pending) {
			failed = pending // a buggy client must not make us invent records
		}
		// Records that left the batch were delivered or rejected; only
		// the delivered ones count as sent.
		settled := uint64(len(pending) - len(failed))
		settledPk := pendingPk - packetsOf(failed)
		var rejectedPk uint64
		if r, ok := q.client.(Rejecter); ok {
			if n := min(r.Rejected(), settled); n > 0 {
				// A client names how many records were refused, not
				// which: their packets are known only when all were.
				if n == settled {
					rejectedPk = settledPk
				}
				settled -= n
				q.droppedRejected.Add(n)
				q.log.Warn("collector rejected records", "rejected", n, "err", err)
			}
		}
		q.sent.Add(settled)
		q.mu.Lock()
		q.pk.sent += settledPk - rejectedPk
		q.pk.rejected += rejectedPk
		q.pk.queued -= settledPk
		q.remember(delivered(pending, failed))
		q.mu.Unlock()
		q.settle(len(pending) - len(failed))
		if len(failed) == 0 {
			q.batches.Add(1)
			if err != nil {
				q.log.Debug("send reported an error but delivered everything", "err", err)
			}
			return
		}
		pending = failed
		q.sendErrors.Add(1)
		if n, ok := q.errLog.allow(1); ok {
			q.log.Warn("export failed, retrying", "err", err, "records", len(pending),
				"failures", n, "retry_in", backoff.Round(time.Millisecond))
		}
		if !q.sleep(backoff) {
			q.droppedShutdown.Add(uint64(len(pending)))
			q.mu.Lock()
			pk := packetsOf(pending)
			q.pk.shutdown += pk
			q.pk.queued -= pk
			q.mu.Unlock()
			q.settle(len(pending))
			q.dropQueued()
			return
		}
		backoff = min(backoff*2, q.opts.RetryMax)
	}
}

// settle removes n delivered or dropped records from the in-flight count.
func (q *Queue) settle(n int) {
	q.mu.Lock()
	q.inflight -= n
	q.mu.Unlock()
}

// dropQueued counts everything still queued as lost to the shutdown
// deadline. It runs once the deadline has passed.
func (q *Queue) dropQueued() {
	q.mu.Lock()
	n := q.n
	var pk uint64
	for i := range n {
		pk += q.ring[(q.head+i)%len(q.ring)].Packets
	}
	q.pk.shutdown += pk
	q.pk.queued -= pk
	q.n, q.head = 0, 0
	clear(q.ring)
	q.mu.Unlock()
	q.droppedShutdown.Add(uint64(n))
}

func packetsOf(recs []flow.Record) uint64 {
	var n uint64
	for i := range recs {
		n += recs[i].Packets
	}
	return n
}

// delivered returns the records of pending that Send delivered, in order:
// all but failed, which is a tail or a head of pending (see Client.Send).
func delivered(pending, failed []flow.Record) []flow.Record {
	switch {
	case len(failed) == 0:
		return pending
	case &failed[0] == &pending[len(pending)-len(failed)]:
		return pending[:len(pending)-len(failed)]
	case &failed[0] == &pending[0]:
		return pending[len(failed):]
	}
	return nil
}

// remember keeps the packets of delivered records for abandon; q.mu must
// be held.
func (q *Queue) remember(recs []flow.Record) {
	if q.recent == nil {
		return
	}
	for i := range recs {
		q.recent[(q.recentHead+q.recentN)%len(q.recent)] = recs[i].Packets
		if q.recentN < len(q.recent) {
			q.recentN++
		} else {
			q.recentHead = (q.recentHead + 1) % len(q.recent)
		}
	}
}

// abandon moves the packets of the last n records delivered from sent to
// dropped (reason shutdown): an Abandoner gives up a tail of what it
// reported delivered (what the collector never acknowledged).
func (q *Queue) abandon(n uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// The ring holds QueueSize records; a client that gave up more
	// (possible only with a tiny queue) has the rest uncounted here.
	k := int(min(n, uint64(q.recentN)))
	var pk uint64
	for i := range k {
		pk += q.recent[(q.recentHead+q.recentN-1-i)%len(q.recent)]
	}
	pk = min(pk, q.pk.sent)
	q.pk.sent -= pk
	q.pk.shutdown += pk
}

// Accounting implements export.Accounter: records (and their packets)
// delivered, queued, and dropped by reason. The packets of records a
// client refused are counted as rejected when the whole send was refused;
// when a collector refuses part of a send without naming the records
// (OTLP partial success), they stay counted with the delivered ones.
func (q *Queue) Accounting() export.Accounting {
	q.mu.Lock()
	pk := q.pk
	queued := q.n + q.inflight
	q.mu.Unlock()
	return export.Accounting{
		Stored:  export.Count{Records: q.sent.Load(), Packets: pk.sent},
		Pending: export.Count{Records: uint64(queued), Packets: pk.queued},
		Dropped: map[string]export.Count{
			ReasonQueueFull: {Records: q.droppedFull.Load(), Packets: pk.full},
			ReasonRejected:  {Records: q.droppedRejected.Load(), Packets: pk.rejected},
			ReasonShutdown:  {Records: q.droppedShutdown.Load(), Packets: pk.shutdown},
		},
	}
}

// sleep waits d ±20 %, or returns false at once when the shutdown deadline
// has passed.
func (q *Queue) sleep(d time.Duration) bool {
	d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-q.stop.Done():
		return false
	}
}

// limiter lets one log line through per interval and counts what it held
// back, so that the line that does pass reports the whole interval.
type limiter struct {
	mu      sync.Mutex
	every   time.Duration
	last    time.Time
	pending uint64
}

// allow adds n events; it returns the events since the last line and true
// if a line may be written now.
func (l *limiter) allow(n uint64) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending += n
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		return 0, false
	}
	l.last = now
	n, l.pending = l.pending, 0
	return n, true
}
