package flow

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// ledger is a collector that keeps marks like the store: the latest mark of
// each set, committed at Flush.
type ledger struct {
	collector
	mu     sync.Mutex
	stored map[uint64]Mark
	order  *[]string // shared with drains: flush and clear order
}

func (l *ledger) FlushMark(ctx context.Context, m Mark) error {
	l.mu.Lock()
	if l.stored == nil {
		l.stored = map[uint64]Mark{}
	}
	l.stored[m.Set] = l.stored[m.Set].Merge(m)
	if l.order != nil {
		*l.order = append(*l.order, "flush")
	}
	l.mu.Unlock()
	return l.collector.FlushMark(ctx, m)
}

func (l *ledger) Stored(set uint64) (Mark, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.stored[set]
	return m, ok
}

// orderedDrain records when it is read and cleared.
type orderedDrain struct {
	fakeDrain
	order   *[]string
	readErr error
}

func (d *orderedDrain) Read(fn func(*Key, []Stats)) (int, error) {
	*d.order = append(*d.order, "read")
	if d.readErr != nil {
		err := d.readErr
		d.readErr = nil
		return 0, err
	}
	return d.fakeDrain.Read(fn)
}

func (d *orderedDrain) Clear() error {
	*d.order = append(*d.order, "clear")
	return d.fakeDrain.Clear()
}

func one(port uint16, packets uint64) map[Key][]Stats {
	return map[Key][]Stats{key(port): {{Packets: packets, Bytes: 10 * packets, FirstSeen: 2e9, LastSeen: 2e9}}}
}

// TestEvictorLeftovers: tables an earlier agent left are drained before the
// first swap. One whose epoch the store holds is cleared without being read
// or emitted; the others are emitted and flushed with their own marks before
// they are cleared; a retired set's ring buffer is read from the position
// the store holds, with its last table, and its events stay out of the
// running set's mark.
func TestEvictorLeftovers(t *testing.T) {
	var order []string
	out := &ledger{order: &order, stored: map[uint64]Mark{
		1: {Set: 1, Epoch: 5, RingPos: 100}, // the running set: epoch 5 is stored
		2: {Set: 2, Epoch: 3, RingPos: 40},  // a retired set: epoch 3 and ring up to 40
	}}
	storedTable := &orderedDrain{fakeDrain: fakeDrain{mark: Mark{Set: 1, Epoch: 5}, flows: one(1, 9)}, order: &order}
	retiredOld := &orderedDrain{fakeDrain: fakeDrain{mark: Mark{Set: 2, Epoch: 3}, flows: one(2, 9)}, order: &order}
	retiredLast := &orderedDrain{fakeDrain: fakeDrain{mark: Mark{Set: 2, Epoch: 4}, flows: one(3, 2),
		events: []Event{
			{Key: key(4), Stats: Stats{Packets: 9, Bytes: 90}, RingPos: 40},   // stored already
			{Key: key(3), Stats: Stats{Packets: 1, Bytes: 10}, RingPos: 60},   // joins flow 3
			{Key: key(5), Stats: Stats{Packets: 1, Bytes: 10}, RingPos: 80}}}, // alone
		order: &order}
	table := &fakeTable{left: []Drain{storedTable, retiredOld, retiredLast}, epoch: 6}
	events := make(chan Event, 4)
	var released []uint64
	ev := NewEvictor(EvictorConfig{Table: table, Events: events, Out: out, Interval: time.Hour, Clock: newFakeClock(),
		RingStart: 100, ReleaseEvents: func(p uint64) { released = append(released, p) },
		DrainEvents: func() { close(events) }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ev.Run(ctx); err != nil {
		t.Fatal(err)
	}

	if storedTable.reads != 0 || !storedTable.cleared || retiredOld.reads != 0 || !retiredOld.cleared {
		t.Fatalf("stored tables: read %d/%d times, cleared %v/%v; want cleared unread",
			storedTable.reads, retiredOld.reads, storedTable.cleared, retiredOld.cleared)
	}
	// The last flush is the final eviction's (an empty table of epoch 7).
	if want := []string{"clear", "clear", "read", "flush", "clear", "flush"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	recs, _ := out.snapshot()
	got := map[uint16]uint64{}
	for _, r := range recs {
		got[r.SrcPort] += r.Packets
	}
	if len(got) != 2 || got[3] != 3 || got[5] != 1 {
		t.Fatalf("emitted %v, want flow 3 (2 + 1 diverted) and flow 5 (1 diverted)", got)
	}
	if m := out.stored[2]; m.Epoch != 4 || m.RingPos != 80 {
		t.Fatalf("retired set's mark %+v, want epoch 4 ring 80", m)
	}
	if m := out.stored[1]; m.RingPos != 100 {
		t.Fatalf("the running set's mark moved to %+v: the retired ring's events leaked into it", m)
	}
	if ev.Stats().AlreadyStored != 2 || ev.Stats().Resumed != 1 {
		t.Fatalf("stats %+v", ev.Stats())
	}
	if len(released) == 0 || released[len(released)-1] != 100 {
		t.Fatalf("released %v, want the running ring released up to 100 only", released)
	}
}

// TestEvictorMarksEvictions: each swap's table is flushed with its epoch and
// the ring position of the diverted packets merged into it, then cleared;
// the ring buffer is released only after that flush.
func TestEvictorMarksEvictions(t *testing.T) {
	clock := newFakeClock()
	table := &fakeTable{}
	out := &ledger{}
	events := make(chan Event, 16)
	var mu sync.Mutex
	var released []uint64
	ev := NewEvictor(EvictorConfig{Table: table, Events: events, Out: out, Interval: time.Hour, Clock: clock,
		MinForcedGap: time.Millisecond, RingStart: 7, DrainEvents: func() { close(events) },
		ReleaseEvents: func(p uint64) {
			mu.Lock()
			defer mu.Unlock()
			if m, _ := out.Stored(1); m.RingPos < p {
				t.Errorf("released %d before the mark (%+v) was committed", p, m)
			}
			released = append(released, p)
		}})
	table.put(key(1), Stats{Packets: 1, Bytes: 10, FirstSeen: 2e9, LastSeen: 2e9})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ev.Run(ctx) }()
	events <- Event{Key: key(2), Stats: Stats{Packets: 1, Bytes: 10}, Reason: ReasonMapFull, RingPos: 30}
	waitFor(t, func() bool { return ev.Stats().Evictions[EvictMapFull] >= 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out.collector.mu.Lock()
	marks := slices.Clone(out.marks)
	out.collector.mu.Unlock()
	if len(marks) < 2 || marks[0] != (Mark{Set: 1, Epoch: 1, RingPos: 30}) || marks[1].Epoch != 2 || marks[1].RingPos != 30 {
		t.Fatalf("marks %+v, want epoch 1 with ring 30, then epoch 2", marks)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(released) == 0 || released[0] != 30 {
		t.Fatalf("released %v", released)
	}
}

// stuckTable fails one read of a swapped-out table, then succeeds; it
// refuses to swap while a table is not cleared, as the datapath does.
type stuckTable struct {
	fakeTable
	order   []string
	pending *orderedDrain
}

func (s *stuckTable) Rotate() (Drain, error) {
	if s.pending != nil && !s.pending.cleared {
		return nil, errors.New("standby not cleared")
	}
	d, _ := s.fakeTable.Rotate()
	od := &orderedDrain{fakeDrain: *d.(*fakeDrain), order: &s.order}
	if od.mark.Epoch == 1 {
		od.readErr = errors.New("read failed")
	}
	s.pending = od
	return od, nil
}

// TestEvictorRetriesAFailedRead: a table whose read failed is neither
// flushed nor cleared, and is read again before the next swap.
func TestEvictorRetriesAFailedRead(t *testing.T) {
	table := &stuckTable{}
	out := &ledger{}
	ev := NewEvictor(EvictorConfig{Table: table, Out: out, Interval: time.Hour, Clock: newFakeClock()})
	table.put(key(1), Stats{Packets: 4, Bytes: 40, FirstSeen: 2e9, LastSeen: 2e9})
	ctx := context.Background()
	if err := ev.evict(ctx, EvictTimer); err == nil {
		t.Fatal("a failed read was not reported")
	}
	if err := ev.evict(ctx, EvictTimer); err != nil {
		t.Fatal(err)
	}
	want := []string{"read", "read", "clear", "read", "clear"}
	if !slices.Equal(table.order, want) {
		t.Fatalf("order %v, want %v", table.order, want)
	}
	if recs, _ := out.snapshot(); len(recs) != 1 || recs[0].Packets != 4 {
		t.Fatalf("records %+v, want the table's one flow once", recs)
	}
}
