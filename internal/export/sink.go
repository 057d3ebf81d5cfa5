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

// SinkStats are one sink's counters.
type SinkStats struct {
	Name    string
	Records uint64 // records the sink accepted
	Errors  uint64 // failed writes and flushes
}

// Fanout writes every batch to every sink. A sink that fails does not stop
// the others; its failures are counted and logged.
type Fanout struct {
	sinks []*counted
	log   *slog.Logger
}

type counted struct {
	Sink
	records, errors atomic.Uint64
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
	var errs []error
	for _, s := range f.sinks {
		if err := s.Write(ctx, batch); err != nil {
			s.errors.Add(1)
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
			continue
		}
		s.records.Add(uint64(len(batch)))
	}
	return errors.Join(errs...)
}

// Flush implements flow.Output.
func (f *Fanout) Flush(ctx context.Context) error {
	var errs []error
	for _, s := range f.sinks {
		if err := s.Flush(ctx); err != nil {
			s.errors.Add(1)
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
		}
	}
	return errors.Join(errs...)
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
		out[i] = SinkStats{Name: s.Name(), Records: s.records.Load(), Errors: s.errors.Load()}
	}
	return out
}
