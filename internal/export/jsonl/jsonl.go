// Package jsonl writes flow records as JSON lines, one object per record,
// to stdout or a file (`--export json:PATH`, `json:-`).
package jsonl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"

	"loupe/internal/flow"
)

// Sink writes JSON lines.
type Sink struct {
	name string
	w    *bufio.Writer
	c    io.Closer // nil for stdout
	buf  []byte
}

// Open opens the target: "-" is stdout; anything else a file, appended to.
func Open(path string) (*Sink, error) {
	s := &Sink{name: "json:" + path}
	if path == "-" {
		s.w = bufio.NewWriterSize(os.Stdout, 64<<10)
		return s, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open json sink: %w", err)
	}
	s.w, s.c = bufio.NewWriterSize(f, 64<<10), f
	return s, nil
}

// New writes to w (for tests and embedding).
func New(name string, w io.Writer) *Sink {
	return &Sink{name: name, w: bufio.NewWriterSize(w, 64<<10)}
}

// Name implements export.Sink.
func (s *Sink) Name() string { return s.name }

// Write implements export.Sink.
func (s *Sink) Write(_ context.Context, batch []flow.Record) error {
	for i := range batch {
		s.buf = flow.AppendJSON(s.buf[:0], &batch[i])
		s.buf = append(s.buf, '\n')
		if _, err := s.w.Write(s.buf); err != nil {
			return err
		}
	}
	return nil
}

// Flush implements export.Sink: records reach the file at every eviction.
func (s *Sink) Flush(context.Context) error { return s.w.Flush() }

// Close implements export.Sink.
func (s *Sink) Close() error {
	err := s.w.Flush()
	if s.c != nil {
		if cerr := s.c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
