package flow

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeTable is a Table whose contents the test sets per interval.
type fakeTable struct {
	mu       sync.Mutex
	next     map[Key][]Stats
	rotates  int
	onRotate func() // called inside Rotate, before draining
	// clock, if set, gives each table its install time (the stale
	// filter's cutoff); installed is the current table's.
	clock     *fakeClock
	installed uint64
	epoch     uint64
	left      []Drain // Leftovers
}

func (f *fakeTable) put(k Key, perCPU ...Stats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == nil {
		f.next = map[Key][]Stats{}
	}
	f.next[k] = perCPU
}

func (f *fakeTable) Set() uint64 { return 1 }

func (f *fakeTable) Leftovers() ([]Drain, error) { return f.left, nil }

func (f *fakeTable) Rotate() (Drain, error) {
	f.mu.Lock()
	cur := f.next
	f.next = nil
	f.rotates++
	f.epoch++
	hook := f.onRotate
	d := &fakeDrain{mark: Mark{Set: 1, Epoch: f.epoch}, cutoff: f.installed, flows: cur}
	if f.clock != nil {
		f.installed = f.clock.Mono()
	}
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return d, nil
}

// fakeDrain is one table's contents.
type fakeDrain struct {
	mark    Mark
	cutoff  uint64
	flows   map[Key][]Stats
	events  []Event
	reads   int
	cleared bool
}

func (d *fakeDrain) Mark() Mark     { return d.mark }
func (d *fakeDrain) Cutoff() uint64 { return d.cutoff }
func (d *fakeDrain) Read(fn func(*Key, []Stats)) (int, error) {
	d.reads++
	for k, v := range d.flows {
		fn(&k, v)
	}
	return len(d.flows), nil
}

func (d *fakeDrain) Events(from uint64, fn func(*Event)) (uint64, error) {
	end := from
	for i := range d.events {
		if d.events[i].RingPos > from {
			fn(&d.events[i])
			end = max(end, d.events[i].RingPos)
		}
	}
	return end, nil
}

func (d *fakeDrain) Clear() error { d.cleared = true; return nil }

// fakeClock moves only when told; monotonic time starts at 1e9.
type fakeClock struct {
	mu   sync.Mutex
	mono uint64
	wall time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{mono: 1e9, wall: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.wall }
func (c *fakeClock) Mono() uint64   { c.mu.Lock(); defer c.mu.Unlock(); return c.mono }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mono += uint64(d)
	c.wall = c.wall.Add(d)
}

// collector is an Output that keeps copies of what it receives.
type collector struct {
	mu      sync.Mutex
	records []Record
	batches []int
	flushes int
	marks   []Mark
}

func (c *collector) Write(_ context.Context, b []Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, b...)
	c.batches = append(c.batches, len(b))
	return nil
}

func (c *collector) FlushMark(_ context.Context, m Mark) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushes++
	c.marks = append(c.marks, m)
	return nil
}

func (c *collector) snapshot() ([]Record, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Record(nil), c.records...), c.flushes
}

func key(port uint16) Key {
	return Key{EtherType: EtherTypeIPv4, Proto: 17, SrcPort: port, DstPort: 53, IfIndex: 3}
}

func TestEvictorMergesAndFiltersStale(t *testing.T) {
	clock := newFakeClock()
	install := clock.Mono() // the first table's install time
	table := &fakeTable{clock: clock, installed: install}
	out := &collector{}
	events := make(chan Event, 16)
	ev := NewEvictor(EvictorConfig{
		Table: table, Events: events, Out: out, Interval: time.Hour, Clock: clock,
		IfaceName: func(i uint32) string { return "veth3" }, BatchSize: 2,
		DrainEvents: func() { close(events) },
	})
	clock.advance(time.Second)
	now := clock.Mono()

	// Flow 1: two CPUs counted, a third CPU holds a leftover from before
	// the table was installed, a fourth nothing.
	table.put(key(1),
		Stats{Packets: 2, Bytes: 200, FirstSeen: now - 50, LastSeen: now - 10, TCPFlags: 0x02, DSCP: 1, Sampling: 1},
		Stats{Packets: 3, Bytes: 300, FirstSeen: now - 80, LastSeen: now - 5, TCPFlags: 0x10, DSCP: 2, Sampling: 1},
		Stats{Packets: 9, Bytes: 900, FirstSeen: install - 100, LastSeen: install - 1},
		Stats{})
	// Flow 2 is only in the ring buffer; flow 1 also got a diverted packet.
	events <- Event{Key: key(1), Stats: Stats{Packets: 1, Bytes: 50, FirstSeen: now - 90, LastSeen: now - 1, TCPFlags: 0x01, DSCP: 3}, Reason: ReasonMapBusy}
	events <- Event{Key: key(2), Stats: Stats{Packets: 1, Bytes: 70, FirstSeen: now - 3, LastSeen: now - 3}, Reason: ReasonMapBusy}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ev.Run(ctx) }()
	waitFor(t, func() bool { return ev.Stats().Events["map_busy"] == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	recs, flushes := out.snapshot()
	if len(recs) != 2 || flushes == 0 {
		t.Fatalf("got %d records, %d flushes: %+v", len(recs), flushes, recs)
	}
	byPort := map[uint16]Record{}
	for _, r := range recs {
		byPort[r.SrcPort] = r
	}
	r1 := byPort[1]
	if r1.Packets != 6 || r1.Bytes != 550 || r1.TCPFlags != 0x13 || r1.DSCP != 3 || r1.Iface != "veth3" {
		t.Fatalf("flow 1 merged to %+v", r1)
	}
	wantFirst := clock.Now().Add(-90 * time.Nanosecond)
	if !r1.FirstSeen.Equal(wantFirst) || !r1.LastSeen.Equal(clock.Now().Add(-time.Nanosecond)) {
		t.Fatalf("flow 1 times %v..%v, want %v..%v", r1.FirstSeen, r1.LastSeen, wantFirst, clock.Now().Add(-time.Nanosecond))
	}
	if r2 := byPort[2]; r2.Packets != 1 || r2.Bytes != 70 || r2.Sampling != 1 {
		t.Fatalf("flow 2 (ring buffer only) %+v", r2)
	}
	st := ev.Stats()
	if st.Stale != 1 || st.Evictions[EvictShutdown] != 1 || st.Records != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestEvictorForcesEvictionWhenFull(t *testing.T) {
	clock := newFakeClock()
	table := &fakeTable{}
	out := &collector{}
	events := make(chan Event, 16)
	ev := NewEvictor(EvictorConfig{
		Table: table, Events: events, Out: out, Interval: time.Hour, Clock: clock,
		MinForcedGap: time.Millisecond, DrainEvents: func() { close(events) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ev.Run(ctx) }()

	table.put(key(7), Stats{Packets: 4, Bytes: 400, FirstSeen: clock.Mono() + 1, LastSeen: clock.Mono() + 2})
	events <- Event{Key: key(8), Stats: Stats{Packets: 1, Bytes: 10, FirstSeen: clock.Mono() + 3, LastSeen: clock.Mono() + 3}, Reason: ReasonMapFull}
	// The full table is evicted long before the hour-long timer. The
	// eviction is counted as it starts, before its records are out:
	// wait for both.
	waitFor(t, func() bool {
		recs, _ := out.snapshot()
		return ev.Stats().Evictions[EvictMapFull] >= 1 && len(recs) >= 2
	})
	recs, _ := out.snapshot()
	if len(recs) != 2 {
		t.Fatalf("forced eviction emitted %d records, want 2", len(recs))
	}
	cancel()
	<-done
}

// TestEvictorShutdownOrder: the final swap happens before the ring buffer
// is drained, and events that arrive in between are still emitted.
func TestEvictorShutdownOrder(t *testing.T) {
	clock := newFakeClock()
	table := &fakeTable{}
	out := &collector{}
	events := make(chan Event, 16)
	var order []string
	table.onRotate = func() { order = append(order, "rotate") }
	ev := NewEvictor(EvictorConfig{
		Table: table, Events: events, Out: out, Interval: time.Hour, Clock: clock,
		DrainEvents: func() {
			order = append(order, "drain")
			events <- Event{Key: key(9), Stats: Stats{Packets: 1, Bytes: 99, FirstSeen: 2e9, LastSeen: 2e9}, Reason: ReasonMapFull}
			close(events)
		},
	})
	table.put(key(5), Stats{Packets: 1, Bytes: 1, FirstSeen: 2e9, LastSeen: 2e9})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ev.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "rotate" || order[1] != "drain" {
		t.Fatalf("shutdown order %v, want [rotate drain]", order)
	}
	recs, _ := out.snapshot()
	if len(recs) != 2 {
		t.Fatalf("shutdown emitted %d records, want 2: %+v", len(recs), recs)
	}
}

func TestEvictorTimerAndBatches(t *testing.T) {
	clock := newFakeClock()
	table := &fakeTable{}
	out := &collector{}
	ev := NewEvictor(EvictorConfig{Table: table, Out: out, Interval: 5 * time.Millisecond, Clock: clock, BatchSize: 3})
	for p := range uint16(7) {
		table.put(key(p), Stats{Packets: 1, Bytes: 10, FirstSeen: clock.Mono() + 1, LastSeen: clock.Mono() + 1})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- ev.Run(ctx) }()
	waitFor(t, func() bool { recs, _ := out.snapshot(); return len(recs) == 7 })
	cancel()
	<-done
	out.mu.Lock()
	defer out.mu.Unlock()
	for _, n := range out.batches {
		if n > 3 {
			t.Fatalf("batch of %d records, BatchSize is 3: %v", n, out.batches)
		}
	}
	if ev.Stats().Evictions[EvictTimer] == 0 {
		t.Fatal("no timer eviction counted")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// ctxCheckingOutput fails writes whose context is done, as the store does.
type ctxCheckingOutput struct {
	collector
	onWrite func()
}

func (c *ctxCheckingOutput) Write(ctx context.Context, b []Record) error {
	if c.onWrite != nil {
		c.onWrite()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.collector.Write(ctx, b)
}

// A shutdown that arrives while a timer eviction is writing must not make
// the sinks drop that eviction's records.
func TestEvictorShutdownDuringEvictionLosesNothing(t *testing.T) {
	clock := newFakeClock()
	table := &fakeTable{}
	ctx, cancel := context.WithCancel(context.Background())
	out := &ctxCheckingOutput{}
	var once sync.Once
	out.onWrite = func() { once.Do(cancel) } // shutdown lands mid-eviction
	ev := NewEvictor(EvictorConfig{Table: table, Out: out, Interval: 5 * time.Millisecond, Clock: clock, BatchSize: 2})
	for p := range uint16(5) {
		table.put(key(p), Stats{Packets: 1, Bytes: 10, FirstSeen: clock.Mono() + 1, LastSeen: clock.Mono() + 1})
	}
	done := make(chan error, 1)
	go func() { done <- ev.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("evictor did not stop")
	}
	if recs, _ := out.snapshot(); len(recs) != 5 {
		t.Fatalf("sinks got %d records, want all 5", len(recs))
	}
}
