package flow

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"
)

// Table is the datapath's pair of flow tables, as the evictor sees it.
type Table interface {
	// Rotate makes the datapath count into a fresh table, waits until no
	// packet can still be counted into the previous one, then reads and
	// clears the previous one, calling fn once per flow with its per-CPU
	// copies (valid only during the call). It returns the number of flows.
	Rotate(fn func(k *Key, perCPU []Stats)) (int, error)
}

// Output receives evicted records. The evictor streams an eviction in
// batches and calls Flush when the eviction is complete.
type Output interface {
	// Write consumes a batch; the slice is reused once Write returns.
	Write(ctx context.Context, batch []Record) error
	// Flush marks the end of one eviction.
	Flush(ctx context.Context) error
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
	// event that was buffered at that moment has been sent.
	Events <-chan Event
	// DrainEvents asks the producer to finish; called at shutdown after
	// the last table swap, when no program can write the ring buffer.
	DrainEvents func()
	Out         Output
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
}

// Evictor turns the datapath's tables and diverted packets into records.
type Evictor struct {
	cfg     EvictorConfig
	log     *slog.Logger
	pending map[Key]Stats // ring-buffer contributions since the last eviction
	batch   []Record
	names   map[uint32]string // per-eviction cache of IfaceName
	// cutoff is CLOCK_MONOTONIC when the table being filled was installed.
	cutoff     uint64
	lastEvict  time.Time
	wallOffset int64
	// lastFullWarn rate-limits the log line about a full table.
	lastFullWarn time.Time

	evictTimer, evictFull, evictShutdown atomic.Uint64
	flows, records, stale, outErrs       atomic.Uint64
	eventsFull, eventsBusy, eventsOther  atomic.Uint64
	lastFlows, lastRecords               atomic.Uint64
	lastDuration                         atomic.Int64
}

// NewEvictor creates an evictor. Create it before the programs are attached:
// it takes the moment of its creation as the first table's install time.
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
		cfg:     cfg,
		log:     cfg.Logger.With("component", "evictor"),
		pending: make(map[Key]Stats),
		batch:   make([]Record, 0, cfg.BatchSize),
		names:   make(map[uint32]string),
		cutoff:  cfg.Clock.Mono(),
	}
}

// Run evicts every Interval, and early when the table is full, until ctx is
// done; then it performs the final eviction (swap, drain the ring buffer,
// emit everything) and returns. Detach the programs before cancelling ctx,
// so that the final eviction sees every packet.
func (e *Evictor) Run(ctx context.Context) error {
	ticker := time.NewTicker(e.cfg.Interval)
	defer ticker.Stop()
	var forced <-chan time.Time // armed when a full table waits for MinForcedGap
	events := e.cfg.Events
	// ctx only says when to stop: an eviction under way when it is
	// cancelled must still hand its records to the sinks (a sink that
	// honours its context would otherwise drop them), so evictions run
	// under a context that is never cancelled.
	outCtx := context.WithoutCancel(ctx)

	for {
		select {
		case <-ctx.Done():
			return e.shutdown(events)
		case <-ticker.C:
			e.evict(outCtx, EvictTimer)
			forced = nil
		case <-forced:
			e.evict(outCtx, EvictMapFull)
			forced = nil
		case ev, ok := <-events:
			if !ok {
				events = nil // producer gone early; keep evicting the tables
				continue
			}
			e.addEvent(&ev)
			if ev.Reason == ReasonMapFull && forced == nil {
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

func (e *Evictor) addEvent(ev *Event) {
	switch ev.Reason {
	case ReasonMapFull:
		e.eventsFull.Add(1)
	case ReasonMapBusy:
		e.eventsBusy.Add(1)
	default:
		e.eventsOther.Add(1)
	}
	s := e.pending[ev.Key]
	s.Add(&ev.Stats)
	e.pending[ev.Key] = s
}

// shutdown performs the final eviction. The swap waits for every running
// program, so once it returns the ring buffer receives nothing more and can
// be drained to the end.
func (e *Evictor) shutdown(events <-chan Event) error {
	// The run context is done; the output still gets a bounded chance to
	// take the last records.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	before := e.records.Load()
	defer func() { e.lastRecords.Store(e.records.Load() - before) }()
	err := e.evict(ctx, EvictShutdown)
	if events != nil { // nil: no event source, or it already closed
		if e.cfg.DrainEvents != nil {
			e.cfg.DrainEvents()
		}
		for ev := range events {
			e.addEvent(&ev)
		}
	}
	if len(e.pending) > 0 {
		e.emitPending(ctx)
		err = errors.Join(err, e.flushOutput(ctx))
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

	cutoff := e.cutoff
	e.cutoff = e.cfg.Clock.Mono() // the next table is installed from here on
	e.wallOffset = e.cfg.Clock.Now().UnixNano() - int64(e.cfg.Clock.Mono())
	clear(e.names)

	n, err := e.cfg.Table.Rotate(func(k *Key, perCPU []Stats) {
		s, stale := MergePerCPU(perCPU, cutoff)
		if stale > 0 {
			e.stale.Add(uint64(stale))
		}
		if p, ok := e.pending[*k]; ok {
			s.Add(&p)
			delete(e.pending, *k)
		}
		if s.Packets > 0 {
			e.emit(ctx, k, &s)
		}
	})
	e.flows.Add(uint64(n))
	e.lastFlows.Store(uint64(n))
	if err != nil {
		e.log.Error("evicting flow table failed", "err", err)
	}
	e.emitPending(ctx)
	err = errors.Join(err, e.flushOutput(ctx))
	e.lastDuration.Store(int64(time.Since(start)))
	e.log.Debug("evicted", "reason", reason, "flows", n, "took", time.Since(start))
	return err
}

func (e *Evictor) emitPending(ctx context.Context) {
	for k, s := range e.pending {
		e.emit(ctx, &k, &s)
	}
	clear(e.pending)
}

func (e *Evictor) emit(ctx context.Context, k *Key, s *Stats) {
	name, ok := e.names[k.IfIndex]
	if !ok {
		name = e.cfg.IfaceName(k.IfIndex)
		e.names[k.IfIndex] = name
	}
	e.batch = append(e.batch, Record{
		Key:       *k,
		Iface:     name,
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
	if len(e.batch) == cap(e.batch) {
		e.writeBatch(ctx)
	}
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

func (e *Evictor) flushOutput(ctx context.Context) error {
	e.writeBatch(ctx)
	if err := e.cfg.Out.Flush(ctx); err != nil {
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
			"other":                e.eventsOther.Load(),
		},
		Stale:        e.stale.Load(),
		OutputErrors: e.outErrs.Load(),
		LastFlows:    e.lastFlows.Load(),
		LastRecords:  e.lastRecords.Load(),
		LastDuration: time.Duration(e.lastDuration.Load()),
	}
}
