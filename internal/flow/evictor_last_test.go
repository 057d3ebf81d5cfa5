package flow

import (
	"context"
	"testing"
	"time"
)

// TestEvictorLastRecords: the stats tell the last eviction's records from
// the run's total, so that the agent's "final eviction done" line can say
// what the final eviction wrote.
func TestEvictorLastRecords(t *testing.T) {
	clock := newFakeClock()
	table := &fakeTable{}
	out := &collector{}
	events := make(chan Event, 16)
	ev := NewEvictor(EvictorConfig{
		Table: table, Events: events, Out: out, Interval: time.Hour, Clock: clock,
		DrainEvents: func() {
			events <- Event{Key: key(9), Stats: Stats{Packets: 1, Bytes: 99, FirstSeen: 2e9, LastSeen: 2e9}, Reason: ReasonMapBusy}
			close(events)
		},
	})
	for p := range uint16(3) {
		table.put(key(p), Stats{Packets: 1, Bytes: 10, FirstSeen: 2e9, LastSeen: 2e9})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ev.Run(ctx) }()
	// A full table forces an eviction now: the 3 flows and the event.
	events <- Event{Key: key(7), Stats: Stats{Packets: 1, Bytes: 10, FirstSeen: 2e9, LastSeen: 2e9}, Reason: ReasonMapFull}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if recs, _ := out.snapshot(); len(recs) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no forced eviction")
		}
	}
	if st := ev.Stats(); st.LastRecords != 4 || st.Records != 4 || st.LastFlows != 3 {
		t.Fatalf("after the first eviction: last %d records, total %d, last flows %d; want 4, 4, 3", st.LastRecords, st.Records, st.LastFlows)
	}
	for p := range uint16(2) {
		table.put(key(20+p), Stats{Packets: 1, Bytes: 10, FirstSeen: 2e9, LastSeen: 2e9})
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The final eviction: 2 flows from the table and 1 from the drain.
	if st := ev.Stats(); st.LastRecords != 3 || st.Records != 7 || st.LastFlows != 2 || st.Flows != 5 {
		t.Fatalf("final: last %d records, total %d, last flows %d, flows %d; want 3, 7, 2, 5", st.LastRecords, st.Records, st.LastFlows, st.Flows)
	}
}
