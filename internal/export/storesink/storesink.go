// Package storesink is the export.Sink of the embedded flow store: it
// gathers one eviction's records and writes them as one segment.
package storesink

import (
	"context"
	"log/slog"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

const (
	// maxPending bounds the records held between two writes, so that a
	// very large eviction is written as several segments.
	maxPending = 1 << 17
	// CompactMaxRecords caps merged segments. A merge holds its output in
	// memory (about 70 bytes a record), so this bounds the agent's memory
	// during compaction; 10 million records still make fewer than 100
	// segments, which queries read in parallel. bench/store measures the
	// store with this setting.
	CompactMaxRecords = 1 << 17
)

// Sink writes to a store.Store.
type Sink struct {
	st      *store.Store
	pending *store.Batch
}

// Open opens (creating if needed) the store at dir.
func Open(dir string, retention time.Duration, log *slog.Logger) (*Sink, error) {
	st, err := store.Open(dir, store.Options{Retention: retention, Logger: log, CompactMaxRecords: CompactMaxRecords})
	if err != nil {
		return nil, err
	}
	return &Sink{st: st, pending: store.NewBatch()}, nil
}

// Name implements export.Sink.
func (s *Sink) Name() string { return "store" }

// Write implements export.Sink. Records are encoded into the pending
// segment at once, so the batch slice can be reused.
func (s *Sink) Write(ctx context.Context, batch []flow.Record) error {
	for i := range batch {
		s.pending.Add(&batch[i])
	}
	if s.pending.Len() >= maxPending {
		return s.Flush(ctx)
	}
	return nil
}

// Flush implements export.Sink: one segment per eviction.
func (s *Sink) Flush(ctx context.Context) error {
	if s.pending.Len() == 0 {
		return nil
	}
	b := s.pending
	s.pending = store.NewBatch()
	return s.st.WriteBatch(ctx, b)
}

// Close implements export.Sink.
func (s *Sink) Close() error {
	err := s.Flush(context.Background())
	if cerr := s.st.Close(); err == nil {
		err = cerr
	}
	return err
}
