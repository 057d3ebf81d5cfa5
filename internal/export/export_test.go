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
	for i := range batch {
		batch[i].Packets = uint64(i + 6) // 6+7+8
	}
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
	six := Count{Records: 6, Packets: 6 * 7}
	if st := stats[0]; st.Name != "bad" || st.Written != six || st.Stored != (Count{}) || st.Dropped[ReasonWriteError] != six || st.Errors != 2 {
		t.Fatalf("failing sink's stats %+v", st)
	}
	if st := stats[1]; st.Name != "good" || st.Written != six || st.Stored != six || st.Dropped[ReasonWriteError] != (Count{}) || st.Errors != 0 {
		t.Fatalf("good sink's stats %+v", st)
	}
	if err := f.Close(); err != nil || !good.closed || !bad.closed {
		t.Fatalf("close: %v, closed %v %v", err, good.closed, bad.closed)
	}
}

// holdingSink keeps what it is written and accounts for it itself.
type holdingSink struct {
	memSink
	acc Accounting
}

func (h *holdingSink) Write(_ context.Context, b []flow.Record) error {
	h.acc.Pending.Add(CountOf(b))
	return errors.New("not yet")
}
func (h *holdingSink) Accounting() Accounting { return h.acc }

func TestFanoutUsesTheSinksOwnAccounting(t *testing.T) {
	h := &holdingSink{memSink: memSink{name: "holding"}}
	h.acc.Dropped = map[string]Count{ReasonNoSpace: {}}
	f := NewFanout(slog.New(slog.DiscardHandler), h)
	batch := []flow.Record{{Packets: 5}, {Packets: 9}}
	if err := f.Write(context.Background(), batch); err == nil {
		t.Fatal("error swallowed")
	}
	st := f.Stats()[0]
	want := Count{Records: 2, Packets: 14}
	// A failed Write of an Accounter is not a drop: the sink says where
	// the records are.
	if st.Written != want || st.Pending != want || st.Stored != (Count{}) || len(st.Dropped) != 1 || st.Dropped[ReasonNoSpace] != (Count{}) || st.Errors != 1 {
		t.Fatalf("stats %+v", st)
	}
}
