package export

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"loupe/internal/flow"
)

// orderSink records flushes in a shared log; as a committer it also keeps
// the marks it was given.
type orderSink struct {
	memSink
	log   *[]string
	marks map[uint64]flow.Mark
}

func (o *orderSink) Flush(ctx context.Context) error {
	*o.log = append(*o.log, "flush "+o.name)
	return o.memSink.Flush(ctx)
}

type committerSink struct{ orderSink }

func (c *committerSink) FlushMark(_ context.Context, m flow.Mark) error {
	*c.log = append(*c.log, "commit "+c.name)
	c.marks[m.Set] = c.marks[m.Set].Merge(m)
	return nil
}

func (c *committerSink) Stored(set uint64) (flow.Mark, bool) {
	m, ok := c.marks[set]
	return m, ok
}

// TestFanoutCommitsLast: the store (a Committer) commits a table's mark
// only after every other sink flushed, whatever the order of the sinks:
// the evictor clears the table as soon as the mark is committed. The
// fan-out answers Stored from the Committer, and a plain Flush commits
// nothing.
func TestFanoutCommitsLast(t *testing.T) {
	var log []string
	store := &committerSink{orderSink{memSink: memSink{name: "store"}, log: &log, marks: map[uint64]flow.Mark{}}}
	json := &orderSink{memSink: memSink{name: "json"}, log: &log}
	prom := &orderSink{memSink: memSink{name: "prom"}, log: &log}
	f := NewFanout(slog.New(slog.DiscardHandler), store, json, prom)
	if _, ok := f.Stored(7); ok {
		t.Fatal("a mark before any commit")
	}
	if err := f.FlushMark(context.Background(), flow.Mark{Set: 7, Epoch: 3, RingPos: 9}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"flush json", "flush prom", "commit store"}; !slices.Equal(log, want) {
		t.Fatalf("order %v, want %v", log, want)
	}
	if m, ok := f.Stored(7); !ok || m.Epoch != 3 {
		t.Fatalf("Stored: %+v %v", m, ok)
	}
	log = nil
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"flush json", "flush prom", "flush store"}; !slices.Equal(log, want) {
		t.Fatalf("plain flush: %v, want %v", log, want)
	}
	none := NewFanout(slog.New(slog.DiscardHandler), json)
	if _, ok := none.Stored(7); ok {
		t.Fatal("a fan-out without a committer knows a mark")
	}
}
