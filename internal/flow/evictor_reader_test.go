package flow

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// gatedOutput is a ledger whose Write or FlushMark, once armed, blocks
// until the test opens the gate: a store writing and fsyncing a segment, or
// committing its manifest, for as long as the test likes.
type gatedOutput struct {
	ledger
	blockFlush bool          // block FlushMark, else Write
	entered    chan struct{} // closed when the first call blocks
	gate       chan struct{} // closed by the test: every call returns
	once       sync.Once
}

func newGatedOutput(blockFlush bool) *gatedOutput {
	return &gatedOutput{blockFlush: blockFlush, entered: make(chan struct{}), gate: make(chan struct{})}
}

func (g *gatedOutput) wait() {
	g.once.Do(func() { close(g.entered) })
	<-g.gate
}

func (g *gatedOutput) open() {
	select {
	case <-g.gate:
	default:
		close(g.gate)
	}
}

func (g *gatedOutput) Write(ctx context.Context, b []Record) error {
	if !g.blockFlush {
		g.wait()
	}
	return g.ledger.Write(ctx, b)
}

func (g *gatedOutput) FlushMark(ctx context.Context, m Mark) error {
	if g.blockFlush {
		g.wait()
	}
	return g.ledger.FlushMark(ctx, m)
}

// TestEvictorReadsEventsWhileSinkBlocks: a sink that takes its time (the
// store writing and fsyncing a segment, or committing its manifest) does
// not stop the reading of the ring buffer: every diverted packet sent
// while the sink is blocked is taken at once, through a channel without a
// buffer, and once the sink is unblocked each of them reaches the output
// exactly once, with the exact packet and byte totals, the ring buffer's
// space released only up to what the output committed.
func TestEvictorReadsEventsWhileSinkBlocks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		blockFlush bool
	}{{"write", false}, {"flush", true}} {
		t.Run(tc.name, func(t *testing.T) {
			testEventsWhileSinkBlocks(t, tc.blockFlush)
		})
	}
}

func testEventsWhileSinkBlocks(t *testing.T, blockFlush bool) {
	const (
		events = 5000 // more than any channel between the ring buffer and the evictor holds
		keys   = 50
	)
	clock := newFakeClock()
	table := &fakeTable{}
	out := newGatedOutput(blockFlush)
	ch := make(chan Event) // no buffer: a send completes only when the evictor takes it
	var mu sync.Mutex
	var released []uint64
	ev := NewEvictor(EvictorConfig{Table: table, Events: ch, Out: out, Interval: time.Hour, Clock: clock,
		MinForcedGap: time.Millisecond, BatchSize: 16, DrainEvents: func() { close(ch) },
		Logger: slog.New(slog.DiscardHandler),
		ReleaseEvents: func(p uint64) {
			mu.Lock()
			defer mu.Unlock()
			if m, _ := out.Stored(1); m.RingPos < p {
				t.Errorf("ring buffer released up to %d before the mark (%+v) was committed", p, m)
			}
			released = append(released, p)
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ev.Run(ctx) }()
	t.Cleanup(func() { out.open(); cancel() })

	type total struct{ packets, bytes uint64 }
	want := map[Key]total{}
	send := func(e Event) {
		t.Helper()
		select {
		case ch <- e:
		case <-time.After(5 * time.Second):
			t.Fatalf("the ring buffer is not read while the sink is blocked: event at %d not taken in 5s", e.RingPos)
		}
		w := want[e.Key]
		w.packets += e.Stats.Packets
		w.bytes += e.Stats.Bytes
		want[e.Key] = w
	}

	// A full table forces an eviction, which blocks in the sink.
	table.put(key(1), Stats{Packets: 5, Bytes: 500, FirstSeen: 2e9, LastSeen: 2e9})
	want[key(1)] = total{5, 500}
	send(Event{Key: key(2), Stats: Stats{Packets: 1, Bytes: 20, FirstSeen: 2e9, LastSeen: 2e9}, Reason: ReasonMapFull, RingPos: 1})
	select {
	case <-out.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the forced eviction did not reach the sink")
	}

	// Packets keep being diverted, some because the table is full.
	for i := range events {
		reason := ReasonMapBusy
		if i%10 == 0 {
			reason = ReasonMapFull
		}
		send(Event{Key: key(uint16(100 + i%keys)), Stats: Stats{Packets: 1, Bytes: uint64(60 + i%7), FirstSeen: 2e9 + uint64(i), LastSeen: 2e9 + uint64(i)},
			Reason: reason, RingPos: uint64(2 + i)})
	}
	waitFor(t, func() bool {
		st := ev.Stats()
		return st.Events["map_full"]+st.Events["map_busy"] == events+1
	})
	mu.Lock()
	early := len(released)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("ring buffer released while the sink had not committed anything: %d releases", early)
	}

	out.open()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("evictor did not stop")
	}

	recs, _ := out.snapshot()
	got := map[Key]total{}
	for _, r := range recs {
		g := got[r.Key]
		g.packets += r.Packets
		g.bytes += r.Bytes
		got[r.Key] = g
	}
	if len(got) != len(want) {
		t.Fatalf("records of %d flows, want %d", len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("flow %d: %+v, want %+v", k.SrcPort, got[k], w)
		}
	}
	if m, _ := out.Stored(1); m.RingPos != events+1 {
		t.Errorf("committed mark %+v, want the ring buffer up to %d", m, events+1)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(released) == 0 || released[len(released)-1] != events+1 {
		t.Errorf("released %v, want up to %d at the end", tail(released), events+1)
	}
}

func tail(s []uint64) string {
	if len(s) > 5 {
		return fmt.Sprint("...", s[len(s)-5:])
	}
	return fmt.Sprint(s)
}

// TestEvictorFailedReadKeepsDivertedPackets: the diverted packets an
// eviction took are not lost when its table cannot be read: they go back
// to the aggregate and join the table when it is read again, once, with
// the ring position of every event taken.
func TestEvictorFailedReadKeepsDivertedPackets(t *testing.T) {
	table := &stuckTable{}
	out := &ledger{}
	ev := NewEvictor(EvictorConfig{Table: table, Out: out, Interval: time.Hour, Clock: newFakeClock(),
		Logger: slog.New(slog.DiscardHandler)})
	table.put(key(1), Stats{Packets: 4, Bytes: 40, FirstSeen: 2e9, LastSeen: 2e9})
	ev.diverted.add(&Event{Key: key(1), Stats: Stats{Packets: 1, Bytes: 10, FirstSeen: 2e9, LastSeen: 2e9}, RingPos: 5})
	ev.diverted.add(&Event{Key: key(2), Stats: Stats{Packets: 2, Bytes: 20, FirstSeen: 2e9, LastSeen: 2e9}, RingPos: 9})
	ctx := context.Background()
	if err := ev.evict(ctx, EvictTimer); err == nil {
		t.Fatal("a failed read was not reported")
	}
	// Diverted while the table waited to be read again.
	ev.diverted.add(&Event{Key: key(2), Stats: Stats{Packets: 1, Bytes: 10, FirstSeen: 2e9, LastSeen: 2e9}, RingPos: 12})
	if err := ev.evict(ctx, EvictTimer); err != nil {
		t.Fatal(err)
	}
	recs, _ := out.snapshot()
	got := map[uint16][2]uint64{}
	for _, r := range recs {
		g := got[r.SrcPort]
		got[r.SrcPort] = [2]uint64{g[0] + r.Packets, g[1] + r.Bytes}
	}
	if len(recs) != 2 || got[1] != [2]uint64{5, 50} || got[2] != [2]uint64{3, 30} {
		t.Fatalf("records %+v, want flow 1 (4 + 1 diverted) and flow 2 (2 + 1 diverted), once each", recs)
	}
	out.collector.mu.Lock()
	marks := slices.Clone(out.marks)
	out.collector.mu.Unlock()
	if len(marks) == 0 || marks[0] != (Mark{Set: 1, Epoch: 1, RingPos: 12}) {
		t.Fatalf("marks %+v, want the retried table's epoch 1 with the ring up to 12 first", marks)
	}
}
