// Package storesink is the export.Sink of the embedded flow store: it
// gathers one eviction's records and writes them as one segment.
//
// A write that fails (a full disk, most often) loses nothing at once: the
// records stay in the pending batch, which is written again at the end of
// every eviction until it succeeds, the next eviction's records joining
// it. The batch is bounded (Options.MaxPending records); past it, new
// records are dropped and counted by reason. Every record handed to the
// sink is therefore stored, pending or counted as dropped (Accounting), in
// records and in packets.
//
// One eviction's records are published in one manifest publish, with the
// eviction's mark (flow.Mark: which kernel table they are), however many
// segments they take: a big eviction is written (staged) a segment at a
// time as it comes, and published at the eviction's end. So the store
// holds either all of a table's records and its mark, or neither, and the
// agent clears a table the store already holds, after a crash, without
// storing it twice. Held records keep their marks until they are stored:
// an epoch is never recorded before its records.
package storesink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"loupe/internal/export"
	"loupe/internal/flow"
	"loupe/internal/store"
)

const (
	// maxPending bounds the records held between two writes, so that a
	// very large eviction is written as several segments; it also bounds
	// what is held while the store cannot be written (about 70 bytes a
	// record: 9 MiB).
	maxPending = 1 << 17
	// CompactMaxRecords caps merged segments. A merge holds its output in
	// memory (about 70 bytes a record), so this bounds the agent's memory
	// during compaction; 10 million records still make fewer than 100
	// segments, which queries read in parallel. bench/store measures the
	// store with this setting.
	CompactMaxRecords = 1 << 17
	// failLogEvery rate-limits the log line of a store that keeps failing.
	failLogEvery = time.Minute
)

// Options configure the sink.
type Options struct {
	Dir       string
	Retention time.Duration
	// MaxSize bounds the store's bytes (store.Options.MaxSize); 0: none.
	MaxSize int64
	// MaxPending bounds the records held for the next write, and so what
	// a failing store holds before it drops [131072].
	MaxPending int
	Logger     *slog.Logger
}

// Sink writes to a store.Store.
type Sink struct {
	st         *store.Store
	log        *slog.Logger
	maxPending int

	// pending, staged and marks are only touched by Write, Flush and
	// Close, which the evictor calls from one goroutine. pending are
	// records not yet written; staged are written segments not yet
	// published; marks are to be committed with them.
	pending *store.Batch
	staged  []store.Staged
	marks   []store.Mark

	acct *export.Ledger
	// failedAt is when the store began to fail (zero while it works);
	// lastLog rate-limits the log line of a store that keeps failing.
	// Like pending, only the evictor's goroutine touches them.
	failedAt, lastLog time.Time
}

// Open opens (creating if needed) the store at opts.Dir.
func Open(opts Options) (*Sink, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = maxPending
	}
	st, err := store.Open(opts.Dir, store.Options{
		Retention:         opts.Retention,
		MaxSize:           opts.MaxSize,
		Logger:            opts.Logger,
		CompactMaxRecords: CompactMaxRecords,
	})
	if err != nil {
		return nil, err
	}
	return &Sink{
		st:         st,
		log:        opts.Logger.With("component", "store", "dir", opts.Dir),
		maxPending: opts.MaxPending,
		pending:    store.NewBatch(),
		acct:       export.NewLedger(export.ReasonNoSpace, export.ReasonWriteError),
	}, nil
}

// Name implements export.Sink.
func (s *Sink) Name() string { return "store" }

// Write implements export.Sink. Records are encoded into the pending
// segment at once, so the batch slice can be reused. A full pending batch
// is written at once as a staged segment (a very large eviction), unless
// the store is failing: then the records that do not fit are dropped and
// counted.
func (s *Sink) Write(ctx context.Context, batch []flow.Record) error {
	var err error
	from := 0 // batch[from:i] is added but not yet counted as held
	for i := range batch {
		if s.pending.Len() >= s.maxPending {
			s.acct.Hold(batch[from:i])
			from = i
			if s.failedAt.IsZero() {
				err = s.stage(ctx)
			}
			if s.pending.Len() >= s.maxPending {
				return s.drop(batch[i:], err)
			}
		}
		s.pending.Add(&batch[i])
	}
	s.acct.Hold(batch[from:])
	return err
}

// drop counts records that found the pending batch full.
func (s *Sink) drop(recs []flow.Record, cause error) error {
	n, reason := s.acct.Drop(recs)
	err := fmt.Errorf("store: %d records (%d packets) dropped: %d records already wait for a store that cannot be written (%s)",
		n.Records, n.Packets, s.maxPending, reason)
	return errors.Join(err, cause)
}

// stage writes the pending batch as a segment to publish later.
func (s *Sink) stage(ctx context.Context) error {
	st, err := s.st.Stage(ctx, s.pending)
	if err != nil {
		s.failed(err)
		return err
	}
	s.staged = append(s.staged, st)
	s.pending = store.NewBatch()
	return nil
}

// Flush implements export.Sink: the eviction's records in one publish,
// and the retry of a write that failed.
func (s *Sink) Flush(ctx context.Context) error {
	if s.pending.Len() > 0 {
		if err := s.stage(ctx); err != nil {
			return err
		}
	}
	if len(s.staged) == 0 {
		// No records: nothing to publish. A mark waits for records: a
		// table that held none needs none.
		return nil
	}
	err := s.st.Commit(ctx, s.staged, s.marks)
	if err != nil && !errors.Is(err, store.ErrNotDurable) {
		s.failed(err)
		return err
	}
	s.staged, s.marks = nil, nil
	n := s.acct.StoredAll()
	if since := s.failedAt; !since.IsZero() {
		s.failedAt = time.Time{}
		dropped := s.acct.TotalDropped()
		s.log.Info("store writable again: the held records are stored", "records", n.Records, "packets", n.Packets,
			"failing_for", time.Since(since).Round(time.Second), "dropped_records_total", dropped.Records, "dropped_packets_total", dropped.Packets)
	}
	return err // nil, or stored but not confirmed durable
}

// FlushMark implements export.Committer: Flush, committing mark with the
// records (now, or with the held records once the store takes them).
func (s *Sink) FlushMark(ctx context.Context, mark flow.Mark) error {
	if mark.Set != 0 {
		s.addMark(store.Mark{Set: mark.Set, Epoch: mark.Epoch, RingPos: mark.RingPos})
	}
	return s.Flush(ctx)
}

// addMark merges a mark into the held ones, one per set, so that what a
// long-failing store holds does not grow with every eviction.
func (s *Sink) addMark(m store.Mark) {
	for i := range s.marks {
		if h := &s.marks[i]; h.Set == m.Set {
			h.Epoch, h.RingPos = max(h.Epoch, m.Epoch), max(h.RingPos, m.RingPos)
			return
		}
	}
	s.marks = append(s.marks, m)
}

// Stored implements export.Committer.
func (s *Sink) Stored(set uint64) (flow.Mark, bool) {
	m, ok := s.st.Stored(set)
	return flow.Mark{Set: m.Set, Epoch: m.Epoch, RingPos: m.RingPos}, ok
}

// failed records a failed write; the first failure of a run and then one
// a minute are logged.
func (s *Sink) failed(err error) {
	now := time.Now()
	first := s.failedAt.IsZero()
	if first {
		s.failedAt = now
	}
	s.acct.Failed(err)
	if first || now.Sub(s.lastLog) >= failLogEvery {
		s.lastLog = now
		held, dropped := s.acct.Held(), s.acct.TotalDropped()
		s.log.Error("store write failed: holding the records to retry at every eviction", "err", err,
			"reason", export.ReasonOf(err), "held_records", held.Records, "held_packets", held.Packets, "max_held_records", s.maxPending,
			"dropped_records_total", dropped.Records, "dropped_packets_total", dropped.Packets)
	}
}

// Close implements export.Sink: a last attempt to write what is held;
// what still cannot be written is dropped and counted.
func (s *Sink) Close() error {
	err := s.Flush(context.Background())
	if err != nil && !errors.Is(err, store.ErrNotDurable) {
		reason := export.ReasonOf(err)
		lost := s.acct.DropHeld(reason)
		s.pending = store.NewBatch()
		s.st.Discard(s.staged)
		s.staged = nil
		s.log.Error("closing with records the store could not take: dropped", "records", lost.Records,
			"packets", lost.Packets, "reason", reason)
		err = fmt.Errorf("%d records (%d packets) not stored: %w", lost.Records, lost.Packets, err)
	}
	if cerr := s.st.Close(); err == nil {
		err = cerr
	}
	return err
}

// Accounting implements export.Accounter.
func (s *Sink) Accounting() export.Accounting { return s.acct.Accounting() }

// StoreStats returns the store's own counters (size, retention,
// quarantined segments).
func (s *Sink) StoreStats() store.Stats { return s.st.Stats() }
