package export

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"loupe/internal/flow"
)

type memSink struct {
	name    string
	fail    bool
	got     int
	flushes int
	closed  bool
}

func (m *memSink) Name() string { return m.name }
func (m *memSink) Write(_ context.Context, b []flow.Record) error {
	if m.fail {
		return errors.New("collector down")
	}
	m.got += len(b)
	return nil
}
func (m *memSink) Flush(context.Context) error { m.flushes++; return nil }
func (m *memSink) Close() error                { m.closed = true; return nil }

func TestFanoutIsolatesFailingSinks(t *testing.T) {
	good, bad := &memSink{name: "good"}, &memSink{name: "bad", fail: true}
	f := NewFanout(slog.New(slog.DiscardHandler), bad, good)
	batch := make([]flow.Record, 3)
	for range 2 {
		if err := f.Write(context.Background(), batch); err == nil {
			t.Fatal("a failing sink's error was swallowed")
		}
	}
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if good.got != 6 || good.flushes != 1 {
		t.Fatalf("good sink got %d records, %d flushes; want 6 and 1", good.got, good.flushes)
	}
	stats := f.Stats()
	if stats[0] != (SinkStats{Name: "bad", Records: 0, Errors: 2}) || stats[1] != (SinkStats{Name: "good", Records: 6}) {
		t.Fatalf("stats %+v", stats)
	}
	if err := f.Close(); err != nil || !good.closed || !bad.closed {
		t.Fatalf("close: %v, closed %v %v", err, good.closed, bad.closed)
	}
}
