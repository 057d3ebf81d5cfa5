// Package jsonl writes flow records as JSON lines, one object per record,
// to stdout or a file (`--export json:PATH`, `json:-`).
//
// Lines are gathered in a buffer and written at the end of every eviction
// (or once 64 KiB wait). A write that fails (a full disk) keeps what was not
// written, a partial line included, and the next flush writes it again, so
// that the file never holds a torn line once space returns. The buffer is
// bounded (Options.MaxPending bytes); past it new records are dropped and
// counted by reason, so every record is written, pending or counted as
// dropped (Accounting), in records and in packets.
//
// An agent killed in the middle of a write (SIGKILL cuts a write to a file
// short) leaves a torn last line. Its records were not committed, so the
// next agent exports them again; Open removes the torn tail first, so that
// the file stays whole lines.
package jsonl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"loupe/internal/export"
	"loupe/internal/flow"
)

const (
	// flushAt is how much a Write gathers before it writes.
	flushAt = 64 << 10
	// defaultMaxPending bounds what waits for a failing file: about
	// 10 000 records.
	defaultMaxPending = 4 << 20
)

// Sink writes JSON lines.
type Sink struct {
	name       string
	w          io.Writer
	c          io.Closer // nil for stdout
	maxPending int

	// buf holds the lines not yet written; ends the end offset in buf and
	// the packets of each of their records. Only Write, Flush and Close
	// touch them, from one goroutine.
	buf  []byte
	ends []lineEnd

	acct *export.Ledger
}

type lineEnd struct {
	end     int
	packets uint64
}

// Open opens the target: "-" is stdout; anything else a file, appended to,
// whose torn last line, if any, is removed first (and logged).
func Open(path string, log *slog.Logger) (*Sink, error) {
	if path == "-" {
		return New("json:-", os.Stdout), nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open json sink: %w", err)
	}
	torn, err := cutTornLine(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open json sink %s: %w", path, err)
	}
	if torn > 0 {
		log.Warn("removed the torn last line of the JSON file: a writer stopped in the middle of it, and its records are exported again",
			"path", path, "bytes", torn)
	}
	s := New("json:"+path, f)
	s.c = f
	return s, nil
}

// cutTornLine truncates f after its last newline when it does not end with
// one, and returns the bytes removed. Only regular files are touched.
func cutTornLine(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		return 0, err
	}
	size := st.Size()
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil {
			return 0, fmt.Errorf("read its tail: %w", err)
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if keep == size {
				return 0, nil
			}
			return size - keep, f.Truncate(keep)
		}
		end = start
	}
	return size, f.Truncate(0)
}

// New writes to w (for tests and embedding).
func New(name string, w io.Writer) *Sink {
	return &Sink{name: name, w: w, maxPending: defaultMaxPending,
		acct: export.NewLedger(export.ReasonNoSpace, export.ReasonWriteError)}
}

// SetMaxPending bounds the bytes held for a writer that fails (tests).
func (s *Sink) SetMaxPending(n int) { s.maxPending = n }

// Name implements export.Sink.
func (s *Sink) Name() string { return s.name }

// Write implements export.Sink.
func (s *Sink) Write(_ context.Context, batch []flow.Record) error {
	var err error
	from := 0 // batch[from:i] is buffered but not yet counted as held
	for i := range batch {
		if len(s.buf) >= flushAt || len(s.buf) >= s.maxPending {
			s.acct.Hold(batch[from:i])
			from = i
			if s.acct.Failure() == "" {
				err = s.writeOut()
			}
			if len(s.buf) >= s.maxPending {
				return errors.Join(s.drop(batch[i:]), err)
			}
		}
		s.buf = flow.AppendJSON(s.buf, &batch[i])
		s.buf = append(s.buf, '\n')
		s.ends = append(s.ends, lineEnd{len(s.buf), batch[i].Packets})
	}
	s.acct.Hold(batch[from:])
	return err
}

// drop counts records that found the buffer full.
func (s *Sink) drop(recs []flow.Record) error {
	n, reason := s.acct.Drop(recs)
	return fmt.Errorf("%s: %d records (%d packets) dropped: %d bytes already wait for a writer that fails (%s)",
		s.name, n.Records, n.Packets, len(s.buf), reason)
}

// writeOut writes the buffer. Lines written whole count as stored; the
// rest, a partial line included, stays for the next attempt.
func (s *Sink) writeOut() error {
	if len(s.buf) == 0 {
		return nil
	}
	n, err := s.w.Write(s.buf)
	if err == nil && n < len(s.buf) {
		err = io.ErrShortWrite
	}
	k := 0
	var done export.Count
	for k < len(s.ends) && s.ends[k].end <= n {
		done.Add(export.Count{Records: 1, Packets: s.ends[k].packets})
		k++
	}
	s.buf = s.buf[:copy(s.buf, s.buf[n:])]
	s.ends = s.ends[:copy(s.ends, s.ends[k:])]
	for i := range s.ends {
		s.ends[i].end -= n
	}
	s.acct.Stored(done)
	if err != nil {
		s.acct.Failed(err)
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// Flush implements export.Sink: records reach the file at every eviction,
// and a failed write is retried.
func (s *Sink) Flush(context.Context) error { return s.writeOut() }

// Close implements export.Sink: a last attempt; what still cannot be
// written is dropped and counted.
func (s *Sink) Close() error {
	err := s.writeOut()
	if err != nil {
		lost := s.acct.DropHeld(s.acct.Failure())
		s.buf, s.ends = nil, nil
		err = fmt.Errorf("%d records (%d packets) not written: %w", lost.Records, lost.Packets, err)
	}
	if s.c != nil {
		if cerr := s.c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// Accounting implements export.Accounter.
func (s *Sink) Accounting() export.Accounting { return s.acct.Accounting() }
