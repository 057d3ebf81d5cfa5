package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Table is the datapath's pair of flow tables, as the evictor sees it.
type Table interface {
	// Set identifies the running set of tables (Mark.Set).
	Set() uint64
	// Rotate makes the datapath count into the standby table, waits until
	// no packet can still be counted into the previous one, and returns
	// it to be read, committed and cleared. It refuses while the standby
	// table is not cleared.
	Rotate() (Drain, error)
	// Leftovers returns what earlier agents left to drain (the adopted
	// set's standby table, retired sets); called once, before the first
	// Rotate.
	Leftovers() ([]Drain, error)
}

// Output receives evicted records. The evictor streams an eviction in
// batches and calls FlushMark when the eviction is complete.
type Output interface {
	// Write consumes a batch; the slice is reused once Write returns.
	Write(ctx context.Context, batch []Record) error
	// FlushMark marks the end of one eviction, whose records are those
	// of mark: an output that keeps marks (a Ledger) commits it with them.
	FlushMark(ctx context.Context, mark Mark) error
}

// Ledger is implemented by an Output that commits marks together with the
// records (the store): Stored returns the latest mark of a set it holds.
type Ledger interface {
	Stored(set uint64) (Mark, bool)
}

// Eviction reasons, as reported in EvictorStats.
const (
	EvictTimer    = "timer"
	EvictMapFull  = "map_full"
	EvictShutdown = "shutdown"
)

// EvictorConfig wires an Evictor.
type EvictorConfig struct {
	Table Table
	// Events are packets the datapath diverted to the ring buffer. The
	// producer closes the channel after DrainEvents was called and every
	// event that was buffered at that moment has been sent. Run receives
	// them on a goroutine of its own, which never waits for Out.
	Events <-chan Event
	// DrainEvents asks the producer to finish; called at shutdown after
	// the last table swap, when no program can write the ring buffer.
	DrainEvents func()
	// RingStart is the ring-buffer position the producer starts from.
	RingStart uint64
	// ReleaseEvents gives the ring buffer's space up to pos back once the
	// events before pos are committed (nil: nothing to release).
	ReleaseEvents func(pos uint64)
	Out           Output
	// Interval is cache_active_timeout: how often tables are swapped.
	Interval time.Duration
	// MinForcedGap bounds how often a full table forces an early swap.
	MinForcedGap time.Duration
	Clock        Clock
	// IfaceName names an interface index for records ("" if unknown).
	IfaceName func(ifindex uint32) string
	// BatchSize is the number of records handed to Out per Write.
	BatchSize int
	Logger    *slog.Logger
	// Extras, if set, returns what was measured beside table d over its
	// interval (the kernel signals of its 5-tuples, the tunnels of its
	// flows), which the evictor joins onto the records it makes of d
	// (join.go). It is called once per table, before the table is read;
	// running says whether d is of the running set (the others are tables
	// earlier agents left, whose interval is not now's).
	Extras func(d Drain, running bool) Extras
}

// EvictorStats are cumulative counters, safe to read at any time.
type EvictorStats struct {
	Evictions    map[string]uint64 // by reason
	Flows        uint64            // table entries drained
	Records      uint64            // records written to the output
	Events       map[string]uint64 // ring-buffer events by reason
	Stale        uint64            // per-CPU leftovers discarded
	OutputErrors uint64
	LastFlows    uint64 // entries in the table at the last eviction
	// LastRecords are the records the last eviction wrote (at shutdown,
	// the ring buffer's drain included).
	LastRecords  uint64
	LastDuration time.Duration
	// Resumed counts the tables of retired pin sets that were emitted;
	// AlreadyStored the tables earlier agents left whose mark the output
	// already held, cleared without being emitted again.
	Resumed, AlreadyStored uint64
	// Sketch is what sketch mode gave records (spill.go).
	Sketch SketchStats
}

// SketchStats count what the sketches behind full tables held, as the
// evictor made records of it.
type SketchStats struct {
	// Records by accuracy ("decoded", "estimated"; the unattributed
	// records are estimated).
	Records map[string]uint64
	// Packets and bytes that spilled into sketches (exact), and the part
	// of them in unattributed records: flows the sketch could not name.
	Packets, Bytes                         uint64
	UnattributedPackets, UnattributedBytes uint64
	// Incomplete counts sketch halves that did not decode completely
	// (more flows than their capacity); Errors halves that could not be
	// read or decoded at all (their traffic is then only in the
	// datapath's spilled counters).
	Incomplete, Errors uint64
}

// Evictor turns the datapath's tables and diverted packets into records.
//
// A table is read without removing anything, handed to the output with its
// mark, and cleared only once the output flushed it: the store commits the
// mark together with the records, so an agent that dies anywhere in
// between leaves the table for the next agent, which clears it unemitted
// if the store holds its mark and emits it otherwise (so at least once to
// an output that keeps no marks). Diverted packets follow the same rule:
// their ring buffer's space is released only after the records they went
// into were flushed, and the mark records how far that is.
//
// The ring buffer is read on a goroutine of its own (readEvents), which
// only adds to the interval's aggregate of diverted packets: an eviction,
// whose sinks may take long (the store writes and fsyncs), never holds up
// the reading, and takes the aggregate whole when it starts.
type Evictor struct {
	cfg EvictorConfig
	log *slog.Logger
	// diverted holds the running set's ring-buffer contributions since the
	// last eviction, and the ring position after the last of them (or of
	// those already emitted): the RingPos of the running set's next mark.
	diverted *diverted
	// lastEpoch is the epoch of the running set's last table emitted.
	lastEpoch uint64
	// stuck is a table that could not be read (stuckRead) or cleared. It
	// is retried before the next swap, which the datapath refuses while
	// the standby table is not cleared.
	stuck     Drain
	stuckRead bool

	batch      []Record
	names      map[uint32]string // per-eviction cache of IfaceName
	lastEvict  time.Time
	wallOffset int64
	// lastFullWarn rate-limits the log line about a full table.
	lastFullWarn time.Time

	// heavy are the heaviest flows of the last interval that spilled,
	// candidates for the count-min sketch when the next one does not
	// decode (spill.go).
	heavy heavyFlows
	// join joins the extras of the table being settled onto its records
	// (join.go); nil between tables, and without EvictorConfig.Extras.
	join *joiner

	spillDecoded, spillEstimated, spillPackets, spillBytes atomic.Uint64
	spillUnattrPackets, spillUnattrBytes                   atomic.Uint64
	spillIncomplete, spillErrs                             atomic.Uint64

	evictTimer, evictFull, evictShutdown               atomic.Uint64
	flows, records, stale, outErrs                     atomic.Uint64
	eventsFull, eventsBusy, eventsOffPath, eventsOther atomic.Uint64
	lastFlows, lastRecords                             atomic.Uint64
	lastDuration                                       atomic.Int64
	resumed, alreadyStored                             atomic.Uint64
}

// NewEvictor creates an evictor.
func NewEvictor(cfg EvictorConfig) *Evictor {
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 4096
	}
	if cfg.MinForcedGap <= 0 {
		cfg.MinForcedGap = 50 * time.Millisecond
	}
	if cfg.IfaceName == nil {
		cfg.IfaceName = func(uint32) string { return "" }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Evictor{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "evictor"),
		diverted: newDiverted(cfg.RingStart),
		batch:    make([]Record, 0, cfg.BatchSize),
		names:    make(map[uint32]string),
	}
}

// Run first drains what earlier agents left (Table.Leftovers), then evicts
// every Interval, and early when the table is full, until ctx is done; then
// it performs the final eviction (swap, drain the ring buffer, emit
// everything) and returns. Detach the programs before cancelling ctx, so
// that the final eviction sees every packet.
func (e *Evictor) Run(ctx context.Context) error {
	ticker := time.NewTicker(e.cfg.Interval)
	defer ticker.Stop()
	var forced <-chan time.Time // armed when a full table waits for MinForcedGap
	// readDone is closed once the producer closed the event channel and
	// every event was added (nil: no event source).
	var readDone chan struct{}
	if e.cfg.Events != nil {
		readDone = make(chan struct{})
		go e.readEvents(readDone)
	}
	// ctx only says when to stop: an eviction under way when it is
	// cancelled must still hand its records to the sinks (a sink that
	// honours its context would otherwise drop them), so evictions run
	// under a context that is never cancelled.
	outCtx := context.WithoutCancel(ctx)
	e.resume(outCtx)

	for {
		select {
		case <-ctx.Done():
			return e.shutdown(readDone)
		case <-ticker.C:
			e.evict(outCtx, EvictTimer)
			forced = nil
		case <-forced:
			e.evict(outCtx, EvictMapFull)
			forced = nil
		case <-e.diverted.full:
			if forced != nil {
				continue // an early eviction is already due
			}
			e.warnFull()
			wait := e.cfg.MinForcedGap - time.Since(e.lastEvict)
			if wait <= 0 {
				e.evict(outCtx, EvictMapFull)
			} else {
				forced = time.After(wait)
			}
		}
	}
}

// readEvents adds every diverted packet to the aggregate until the producer
// closes the channel, then closes done. It touches no sink and waits only
// for the aggregate's lock, which an eviction holds just long enough to
// swap maps: the producer's reading of the ring buffer never waits for a
// sink's write or fsync. If the producer stops early, evictions go on
// with the tables alone.
func (e *Evictor) readEvents(done chan<- struct{}) {
	defer close(done)
	for ev := range e.cfg.Events {
		e.diverted.add(&ev)
		// Counted once added: whoever sees the count can take the event.
		e.countEvent(&ev)
	}
}

// warnFull says, at most once a minute, that the table is too small: every
// packet still counts, but early evictions cost CPU and store writes.
func (e *Evictor) warnFull() {
	if now := time.Now(); now.Sub(e.lastFullWarn) >= time.Minute {
		e.lastFullWarn = now
		e.log.Warn("flow table full: flows go through the ring buffer and force early evictions; raise flow_budget above the number of active flows",
			"forced_evictions", e.evictFull.Load())
	}
}

func (e *Evictor) countEvent(ev *Event) {
	switch ev.Reason {
	case ReasonMapFull:
		e.eventsFull.Add(1)
	case ReasonMapBusy:
		e.eventsBusy.Add(1)
	case ReasonOffPath:
		e.eventsOffPath.Add(1)
	default:
		e.eventsOther.Add(1)
	}
}

// shutdown performs the final eviction. The swap waits for every running
// program, so once it returns the ring buffer receives nothing more and can
// be drained to the end.
func (e *Evictor) shutdown(readDone <-chan struct{}) error {
	// The run context is done; the output still gets a bounded chance to
	// take the last records.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	before := e.records.Load()
	defer func() { e.lastRecords.Store(e.records.Load() - before) }()
	err := e.evict(ctx, EvictShutdown)
	if readDone != nil { // nil: no event source
		select {
		case <-readDone: // the producer already closed
		default:
			if e.cfg.DrainEvents != nil {
				e.cfg.DrainEvents()
			}
			<-readDone
		}
	}
	pending, ringPos := e.diverted.take()
	if len(pending) > 0 {
		e.emitMap(ctx, pending)
		// The last epoch is already stored: this mark only moves the
		// ring position on.
		mark := Mark{Set: e.cfg.Table.Set(), Epoch: e.lastEpoch, RingPos: ringPos}
		err = errors.Join(err, e.flushOutput(ctx, mark))
		e.release(mark.RingPos)
	}
	return err
}

// evict swaps the tables and emits one interval's records.
func (e *Evictor) evict(ctx context.Context, reason string) error {
	start := time.Now()
	e.lastEvict = start
	before := e.records.Load()
	defer func() { e.lastRecords.Store(e.records.Load() - before) }()
	switch reason {
	case EvictTimer:
		e.evictTimer.Add(1)
	case EvictMapFull:
		e.evictFull.Add(1)
	default:
		e.evictShutdown.Add(1)
	}
	if err := e.unstick(ctx); err != nil {
		return err
	}
	d, err := e.cfg.Table.Rotate()
	if err != nil {
		e.log.Error("swapping the flow tables failed", "err", err)
		return err
	}
	n, err := e.settle(ctx, d)
	e.flows.Add(uint64(n))
	e.lastFlows.Store(uint64(n))
	e.lastDuration.Store(int64(time.Since(start)))
	e.log.Debug("evicted", "reason", reason, "flows", n, "took", time.Since(start))
	return err
}

// resume drains what earlier agents left, before the first swap.
func (e *Evictor) resume(ctx context.Context) {
	drains, err := e.cfg.Table.Leftovers()
	if err != nil {
		e.log.Error("tables left by an earlier agent cannot all be read", "err", err)
	}
	for _, d := range drains {
		n, err := e.settle(ctx, d)
		e.flows.Add(uint64(n))
		if err != nil {
			e.log.Error("draining a table left by an earlier agent failed", "err", err)
		}
	}
}

// unstick retries a table that could not be read or cleared.
func (e *Evictor) unstick(ctx context.Context) error {
	if e.stuck == nil {
		return nil
	}
	d := e.stuck
	if e.stuckRead {
		e.stuck = nil
		n, err := e.settle(ctx, d)
		e.flows.Add(uint64(n))
		return err
	}
	if err := d.Clear(); err != nil {
		e.log.Error("clearing a drained flow table failed again; not swapping", "err", err)
		return err
	}
	e.stuck = nil
	return nil
}

// settle empties one table into records: read it, emit its flows with the
// diverted packets that belong with them, flush them with the table's mark,
// then clear it. A table whose mark the output already holds is cleared
// without being emitted.
func (e *Evictor) settle(ctx context.Context, d Drain) (int, error) {
	m := d.Mark()
	running := m.Set == e.cfg.Table.Set()
	if m.Epoch == 0 {
		return 0, e.clear(d) // never written
	}
	stored, known := e.stored(m.Set)
	if known && stored.Covers(m.Epoch) {
		e.alreadyStored.Add(1)
		e.log.Info("table left by an earlier agent is already stored: clearing it without emitting it again",
			"set", fmt.Sprintf("%x", m.Set), "epoch", m.Epoch)
		return 0, e.clear(d) // a retired set's ring buffer went with its last table's mark
	}
	if !running {
		e.resumed.Add(1)
	}
	e.wallOffset = e.cfg.Clock.Now().UnixNano() - int64(e.cfg.Clock.Mono())
	clear(e.names)
	cutoff := d.Cutoff()
	// The running set's diverted packets join its tables; a retired set's
	// come from its own ring buffer and stay apart, since the two sets'
	// marks record positions in different ring buffers. The running set's
	// are taken whole now: the event reader goes on adding to a new
	// aggregate, for the next eviction, while this one is emitted.
	var pending map[Key]Stats
	var ringPos uint64
	if running {
		pending, ringPos = e.diverted.take()
	} else {
		pending = make(map[Key]Stats)
	}
	// Every interval's heaviest flows are kept (a comparison a record),
	// to be estimated if they spill next time and the sketch does not
	// decode.
	spill := e.spill(d)
	e.heavy.begin()
	if e.cfg.Extras != nil {
		e.join = newJoiner(e.cfg.Extras(d, running))
	}
	n, err := d.Read(func(k *Key, perCPU []Stats) {
		s, stale := MergePerCPU(perCPU, cutoff)
		if stale > 0 {
			e.stale.Add(uint64(stale))
		}
		if p, ok := pending[*k]; ok {
			s.Add(&p)
			delete(pending, *k)
		}
		if s.Packets > 0 {
			e.emit(ctx, k, &s)
			e.heavy.offer(k, s.Bytes)
		}
	})
	if err != nil {
		// What was emitted is emitted again when the table is read
		// again: a kernel failing a read of a quiescent map is not
		// expected, and dropping the table would lose it. The diverted
		// packets not yet emitted go back, to join it then.
		if running {
			e.diverted.putBack(pending)
		}
		// The records held for the join are made again with the table;
		// the signals drained for it are lost with this interval.
		e.join = nil
		e.stuck, e.stuckRead = d, true
		e.log.Error("reading a flow table failed; retrying it before the next swap", "err", err)
		return n, err
	}
	mark := m
	if running {
		mark.RingPos = ringPos
		e.lastEpoch = max(e.lastEpoch, m.Epoch)
	} else {
		end, err := d.Events(stored.RingPos, func(ev *Event) {
			e.countEvent(ev)
			addStats(pending, &ev.Key, &ev.Stats)
		})
		if err != nil {
			e.log.Error("reading the ring buffer of a retired pin set failed", "err", err)
		}
		mark.RingPos = end
	}
	e.emitMap(ctx, pending)
	if running {
		e.diverted.recycle(pending)
	}
	e.emitSpill(ctx, &spill, cutoff)
	e.emitJoined(ctx, cutoff)
	err = e.flushOutput(ctx, mark)
	faultPoint(FaultAfterCommit, n)
	// Cleared even when the flush failed: a sink that could not store the
	// records holds them (and counts them) itself, and a table that is
	// not cleared cannot be swapped in again.
	if cerr := e.clear(d); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if running {
		e.release(mark.RingPos)
	}
	return n, err
}

func (e *Evictor) clear(d Drain) error {
	if err := d.Clear(); err != nil {
		e.stuck, e.stuckRead = d, false
		e.log.Error("clearing a drained flow table failed; retrying it before the next swap", "err", err)
		return err
	}
	return nil
}

// stored asks the output (if it keeps marks) what it holds of a set.
func (e *Evictor) stored(set uint64) (Mark, bool) {
	l, ok := e.cfg.Out.(Ledger)
	if !ok || set == 0 {
		return Mark{}, false
	}
	return l.Stored(set)
}

func (e *Evictor) release(pos uint64) {
	if e.cfg.ReleaseEvents != nil {
		e.cfg.ReleaseEvents(pos)
	}
}

func (e *Evictor) emitMap(ctx context.Context, pending map[Key]Stats) {
	for k, s := range pending {
		e.emit(ctx, &k, &s)
	}
	clear(pending)
}

func (e *Evictor) emit(ctx context.Context, k *Key, s *Stats) {
	e.emitRecord(ctx, Record{
		Key:       *k,
		Packets:   s.Packets,
		Bytes:     s.Bytes,
		Segments:  s.Segments,
		WireBytes: s.WireBytes,
		FirstSeen: time.Unix(0, int64(s.FirstSeen)+e.wallOffset),
		LastSeen:  time.Unix(0, int64(s.LastSeen)+e.wallOffset),
		Sampling:  max(s.Sampling, 1),
		TCPFlags:  s.TCPFlags,
		DSCP:      s.DSCP,
	})
}

// emitRecord names r's interface and hands it to the output's next batch.
func (e *Evictor) emitRecord(ctx context.Context, r Record) {
	r.Iface = e.ifaceName(r.IfIndex)
	if e.join != nil && e.join.take(&r) {
		return // until emitJoined
	}
	e.appendBatch(ctx, r)
}

// ifaceName names an interface, once per eviction.
func (e *Evictor) ifaceName(ifindex uint32) string {
	name, ok := e.names[ifindex]
	if !ok {
		name = e.cfg.IfaceName(ifindex)
		e.names[ifindex] = name
	}
	return name
}

// appendBatch hands r to the output's next batch.
func (e *Evictor) appendBatch(ctx context.Context, r Record) {
	e.batch = append(e.batch, r)
	if len(e.batch) == cap(e.batch) {
		e.writeBatch(ctx)
	}
}

// emitJoined emits the records the join held back, with the signals
// placed, and those of the signals no record carried, which span the
// interval as a spill's records do: from cutoff to now.
func (e *Evictor) emitJoined(ctx context.Context, cutoff uint64) {
	if e.join == nil {
		return
	}
	first := time.Unix(0, int64(cutoff)+e.wallOffset)
	last := time.Unix(0, int64(e.cfg.Clock.Mono())+e.wallOffset)
	for _, r := range e.join.finish(first, last) {
		if r.Iface == "" && r.IfIndex != 0 { // a DNS exchange's or handshake's own record
			r.Iface = e.ifaceName(r.IfIndex)
		}
		e.appendBatch(ctx, r)
	}
	e.join = nil
}

func (e *Evictor) writeBatch(ctx context.Context) {
	if len(e.batch) == 0 {
		return
	}
	if err := e.cfg.Out.Write(ctx, e.batch); err != nil {
		e.outErrs.Add(1)
		e.log.Warn("output refused a batch", "records", len(e.batch), "err", err)
	}
	e.records.Add(uint64(len(e.batch)))
	e.batch = e.batch[:0]
}

func (e *Evictor) flushOutput(ctx context.Context, mark Mark) error {
	e.writeBatch(ctx)
	if err := e.cfg.Out.FlushMark(ctx, mark); err != nil {
		e.outErrs.Add(1)
		e.log.Warn("output flush failed", "err", err)
		return err
	}
	return nil
}

// Stats returns a snapshot of the evictor's counters.
func (e *Evictor) Stats() EvictorStats {
	return EvictorStats{
		Evictions: map[string]uint64{
			EvictTimer:    e.evictTimer.Load(),
			EvictMapFull:  e.evictFull.Load(),
			EvictShutdown: e.evictShutdown.Load(),
		},
		Flows:   e.flows.Load(),
		Records: e.records.Load(),
		Events: map[string]uint64{
			ReasonMapFull.String(): e.eventsFull.Load(),
			ReasonMapBusy.String(): e.eventsBusy.Load(),
			ReasonOffPath.String(): e.eventsOffPath.Load(),
			"other":                e.eventsOther.Load(),
		},
		Sketch: SketchStats{
			Records:             map[string]uint64{Decoded.String(): e.spillDecoded.Load(), Estimated.String(): e.spillEstimated.Load()},
			Packets:             e.spillPackets.Load(),
			Bytes:               e.spillBytes.Load(),
			UnattributedPackets: e.spillUnattrPackets.Load(),
			UnattributedBytes:   e.spillUnattrBytes.Load(),
			Incomplete:          e.spillIncomplete.Load(),
			Errors:              e.spillErrs.Load(),
		},
		Stale:         e.stale.Load(),
		OutputErrors:  e.outErrs.Load(),
		LastFlows:     e.lastFlows.Load(),
		LastRecords:   e.lastRecords.Load(),
		LastDuration:  time.Duration(e.lastDuration.Load()),
		Resumed:       e.resumed.Load(),
		AlreadyStored: e.alreadyStored.Load(),
	}
}
