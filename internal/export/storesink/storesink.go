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

// maxPending bounds the records held between two writes, so that a large
// eviction is written in several segments instead of held in memory whole.
const maxPending = 32768

// Sink writes to a store.Store.
type Sink struct {
	st      *store.Store
	pending []flow.Record
}

// Open opens (creating if needed) the store at dir.
func Open(dir string, retention time.Duration, log *slog.Logger) (*Sink, error) {
	st, err := store.Open(dir, store.Options{Retention: retention, Logger: log})
	if err != nil {
		return nil, err
	}
	return &Sink{st: st}, nil
}

// Name implements export.Sink.
func (s *Sink) Name() string { return "store" }

// Write implements export.Sink.
func (s *Sink) Write(ctx context.Context, batch []flow.Record) error {
	s.pending = append(s.pending, batch...)
	if len(s.pending) >= maxPending {
		return s.Flush(ctx)
	}
	return nil
}

// Flush implements export.Sink: one segment per eviction.
func (s *Sink) Flush(ctx context.Context) error {
	if len(s.pending) == 0 {
		return nil
	}
	err := s.st.Write(ctx, s.pending)
	clear(s.pending) // drop string references
	s.pending = s.pending[:0]
	return err
}

// Close implements export.Sink.
func (s *Sink) Close() error {
	err := s.Flush(context.Background())
	if cerr := s.st.Close(); err == nil {
		err = cerr
	}
	return err
}
