// Package export fans evicted flow records out to sinks.
//
// Every sink (the embedded store, JSON lines, Prometheus traffic totals, and
// the exporters later issues add) implements Sink and lives in its own
// package under internal/export. The evictor hands records to a Fanout; the
// datapath never knows a sink exists.
package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"loupe/internal/flow"
)

// Sink consumes flow records.
type Sink interface {
	// Name identifies the sink in logs and metrics ("store", "json:-").
	Name() string
	// Write consumes a batch. The slice and its records are reused once
	// Write returns: a sink that keeps records must copy them.
	Write(ctx context.Context, batch []flow.Record) error
	// Flush is called at the end of every eviction and before Close.
	Flush(ctx context.Context) error
	// Close flushes what is left and releases the sink.
	Close() error
}

// Committer is implemented by a sink that commits flow.Marks together with
// the records (the store): the evictor clears a kernel table once its
// records are flushed, and after a crash asks the Committer whether a
// table left behind was already stored (see flow.Mark). Every other sink
// gets each table's records at least once across a crash of the agent.
type Committer interface {
	// FlushMark is Flush at the end of the eviction of mark's table: the
	// sink commits mark with the eviction's records, never before them.
	FlushMark(ctx context.Context, mark flow.Mark) error
	// Stored returns the latest mark of a set the sink holds.
	Stored(set uint64) (flow.Mark, bool)
}

// Count is a number of flow records and the packets they counted.
type Count struct {
	Records, Packets uint64
}

// CountOf counts batch.
func CountOf(batch []flow.Record) Count {
	c := Count{Records: uint64(len(batch))}
	for i := range batch {
		c.Packets += batch[i].Packets
	}
	return c
}

// Add adds o to c.
func (c *Count) Add(o Count) {
	c.Records += o.Records
	c.Packets += o.Packets
}

// Sub subtracts o from c.
func (c *Count) Sub(o Count) {
	c.Records -= o.Records
	c.Packets -= o.Packets
}

// Drop reasons shared by sinks; a sink may add its own (the delivery
// queues: queue_full, rejected, shutdown).
const (
	// ReasonNoSpace: the sink's file system is full (ENOSPC, EDQUOT).
	ReasonNoSpace = "no_space"
	// ReasonWriteError: any other failed write.
	ReasonWriteError = "write_error"
)

// Accounting says what became of the records handed to a sink. At any
// moment, what the sink was handed = Stored + Pending + every Dropped, in
// records and in packets.
type Accounting struct {
	// Stored counts the records the sink stored or delivered.
	Stored Count
	// Pending counts the records it holds for a later attempt.
	Pending Count
	// Dropped counts the records it gave up, by reason. Every reason the
	// sink can report is present, zero or not, so that the series exist
	// before the first loss.
	Dropped map[string]Count
}

// Accounter is implemented by a sink that can hold records back or lose
// some after Write returned: it accounts for every record itself. For a
// sink without it, the Fanout counts a batch as stored when Write succeeds
// and as dropped (ReasonWriteError) when it fails.
type Accounter interface {
	Accounting() Accounting
}

// ReasonOf names the drop reason of a failed write.
func ReasonOf(err error) string {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return ReasonNoSpace
	}
	return ReasonWriteError
}

// SinkStats are one sink's counters.
type SinkStats struct {
	Name    string
	Written Count // records handed to the sink
	Accounting
	Errors uint64 // failed writes and flushes
}

// Fanout writes every batch to every sink. A sink that fails does not stop
// the others; its failures are counted and logged.
type Fanout struct {
	sinks []*counted
	log   *slog.Logger
}

type counted struct {
	Sink
	mu              sync.Mutex
	written         Count
	stored, dropped Count // only for a sink that is not an Accounter
	errors          atomic.Uint64
}

// NewFanout wraps sinks.
func NewFanout(log *slog.Logger, sinks ...Sink) *Fanout {
	f := &Fanout{log: log.With("component", "export")}
	for _, s := range sinks {
		f.sinks = append(f.sinks, &counted{Sink: s})
	}
	return f
}

// Write implements flow.Output.
func (f *Fanout) Write(ctx context.Context, batch []flow.Record) error {
	n := CountOf(batch)
	var errs []error
	for _, s := range f.sinks {
		// Counted as written first: a scrape during Write sees the batch
		// as in flight (written, not yet accounted), never the reverse.
		s.mu.Lock()
		s.written.Add(n)
		s.mu.Unlock()
		err := s.Write(ctx, batch)
		s.mu.Lock()
		if _, ok := s.Sink.(Accounter); !ok {
			if err != nil {
				s.dropped.Add(n)
			} else {
				s.stored.Add(n)
			}
		}
		s.mu.Unlock()
		if err != nil {
			s.errors.Add(1)
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// Flush flushes every sink.
func (f *Fanout) Flush(ctx context.Context) error { return f.flush(ctx, nil) }

// FlushMark implements flow.Output: a Committer commits mark with the
// eviction's records, every other sink flushes.
func (f *Fanout) FlushMark(ctx context.Context, mark flow.Mark) error { return f.flush(ctx, &mark) }

// flush flushes the sinks that keep no marks first, the Committers last:
// once the store commits a table's mark, the evictor clears the table, so
// every other sink must have taken the table's records out of its own
// memory (the JSON sink into its file) before, or a crash in between would
// lose them for that sink.
func (f *Fanout) flush(ctx context.Context, mark *flow.Mark) error {
	var errs []error
	for _, committers := range []bool{false, true} {
		for _, s := range f.sinks {
			c, isCommitter := s.Sink.(Committer)
			if isCommitter != committers {
				continue
			}
			var err error
			if isCommitter && mark != nil {
				err = c.FlushMark(ctx, *mark)
			} else {
				err = s.Flush(ctx)
			}
			if err != nil {
				s.errors.Add(1)
				errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// Stored implements flow.Ledger with the first Committer among the sinks
// (the store); without one nothing is known to be stored.
func (f *Fanout) Stored(set uint64) (flow.Mark, bool) {
	for _, s := range f.sinks {
		if c, ok := s.Sink.(Committer); ok {
			return c.Stored(set)
		}
	}
	return flow.Mark{}, false
}

// Close closes every sink, all at once: each network exporter may wait up
// to its shutdown deadline for its collector, and these waits must not add
// up.
func (f *Fanout) Close() error {
	errs := make([]error, len(f.sinks))
	var wg sync.WaitGroup
	for i, s := range f.sinks {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				s.errors.Add(1)
				errs[i] = fmt.Errorf("close %s: %w", s.Name(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stats returns every sink's counters.
func (f *Fanout) Stats() []SinkStats {
	out := make([]SinkStats, len(f.sinks))
	for i, s := range f.sinks {
		st := SinkStats{Name: s.Name(), Errors: s.errors.Load()}
		s.mu.Lock()
		st.Written = s.written
		if a, ok := s.Sink.(Accounter); ok {
			st.Accounting = a.Accounting()
		} else {
			st.Stored = s.stored
			st.Dropped = map[string]Count{ReasonWriteError: s.dropped}
		}
		s.mu.Unlock()
		out[i] = st
	}
	return out
}
