package store

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"loupe/internal/flow"
)

// followRecs makes n records whose SrcPort numbers them from first.
func followRecs(first, n int, at time.Time) []flow.Record {
	recs := make([]flow.Record, n)
	for i := range recs {
		recs[i] = flow.Record{
			Key: flow.Key{SrcAddr: netip.MustParseAddr("10.0.0.1").As16(), DstAddr: netip.MustParseAddr("10.0.0.2").As16(),
				SrcPort: uint16(first + i), DstPort: 80, Proto: flow.ProtoTCP, EtherType: flow.EtherTypeIPv4},
			Iface: "eth0", Packets: 1, Bytes: 100, FirstSeen: at, LastSeen: at, Sampling: 1,
		}
	}
	return recs
}

// TestFollowThroughMerges drives the follower a step at a time around a
// writer that compacts between the steps: a new segment merged before the
// follower read it is found inside the merge; several are reported as
// missed, never printed twice or guessed.
func TestFollowThroughMerges(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoBackground: true, CompactFanIn: 2, CompactMaxSpan: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	write := func(first, n int, at time.Time) {
		t.Helper()
		if err := s.Write(ctx, followRecs(first, n, at)); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	write(0, 700, t0) // before the follower: never printed (tier of 700 records)

	r, err := OpenReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	q := NewQuery()
	cq, _ := q.compile()
	var got []uint16
	var missed uint64
	fw := &follower{r: r, d: d, cq: &cq, live: map[uint64]uint64{}, known: map[uint64]bool{},
		ev: FollowEvents{Missed: func(n uint64, why string) { missed += n }},
		fn: func(rec *flow.Record) error { got = append(got, rec.SrcPort); return nil }}
	m, err := readManifest(d)
	if err != nil {
		t.Fatal(err)
	}
	fw.start(m)
	step := func(want string, wantMissed uint64) {
		t.Helper()
		got, missed = nil, 0
		if err := fw.step(ctx); err != nil {
			t.Fatal(err)
		}
		if s := portSpan(got); s != want || missed != wantMissed {
			t.Fatalf("step printed %s and missed %d, want %s and %d", s, missed, want, wantMissed)
		}
	}
	maintain := func() {
		t.Helper()
		if err := s.Maintain(ctx); err != nil {
			t.Fatal(err)
		}
	}

	step("", 0)
	write(1000, 10, t0.Add(time.Minute)) // tier of 10 records
	step("1000-1009", 0)
	// Written and merged with the one already printed before the next
	// step: the merge holds 10 printed and 12 new records.
	write(2000, 12, t0.Add(30*time.Second)) // earlier records: written later all the same
	maintain()
	if s.Stats().Compactions != 1 {
		t.Fatalf("stats %+v: want one compaction", s.Stats())
	}
	step("2000-2011", 0)
	// A merge of segments all printed prints nothing.
	write(3000, 11, t0.Add(3*time.Minute))
	step("3000-3010", 0)
	write(3100, 9, t0.Add(3*time.Minute))
	step("3100-3108", 0)
	maintain()
	step("", 0)
	// Two writes merged with segments already printed, between two
	// steps: their records cannot be placed inside the merge; they are
	// reported, not printed.
	write(4000, 12, t0.Add(4*time.Minute))
	write(5000, 13, t0.Add(5*time.Minute))
	maintain()
	step("", 25)
	// The pre-start segment merged with new ones later: only new rows.
	write(6000, 690, t0.Add(6*time.Minute))
	maintain()
	step("6000-6689", 0)
	// Two writes merged together, alone in their tier (of 1 to 3
	// records), between two steps: all their records are new.
	write(7000, 1, t0.Add(7*time.Minute))
	write(8000, 2, t0.Add(8*time.Minute))
	maintain()
	step("[7000 8000 8001]", 0)
}

// TestFollowNewRows: which rows of a new segment the follower prints, from
// the ids it replaces and what the follower saw before.
func TestFollowNewRows(t *testing.T) {
	// Seen before: segments 10 (5 records) and 20 (7), live; 3 and 4,
	// which 10 replaced.
	mk := func() *follower {
		return &follower{live: map[uint64]uint64{10: 5, 20: 7}, known: map[uint64]bool{3: true, 4: true, 10: true, 20: true}}
	}
	for _, c := range []struct {
		name     string
		replaces []uint64
		n        int
		from, to int
		missed   uint64
	}{
		{"a write", nil, 9, 0, 9, 0},
		{"a merge of what was read", []uint64{3, 4, 10, 20}, 12, 0, 0, 0},
		{"a new write merged last", []uint64{3, 4, 10, 20, 30}, 15, 12, 15, 0},
		{"a new write merged between", []uint64{3, 4, 10, 15, 20}, 16, 5, 9, 0},
		{"a new write merged first", []uint64{8, 10, 20}, 13, 0, 1, 0},
		{"new writes merged alone", []uint64{30, 31, 32}, 6, 0, 6, 0},
		{"two new writes merged with what was read", []uint64{10, 30, 31}, 9, 0, 0, 4},
		{"a merge that holds more than its inputs", []uint64{10, 20}, 14, 0, 0, 2},
	} {
		fw := mk()
		var missed uint64
		fw.ev.Missed = func(n uint64, _ string) { missed += n }
		from, to, _ := fw.newRows(&segment{n: c.n, replaces: c.replaces})
		if from != c.from || to != c.to || missed != c.missed {
			t.Errorf("%s: rows [%d, %d), %d missed; want [%d, %d), %d", c.name, from, to, missed, c.from, c.to, c.missed)
		}
	}
}

// portSpan describes consecutive port numbers as first-last, and anything
// else in full.
func portSpan(ports []uint16) string {
	if len(ports) == 0 {
		return ""
	}
	for i := range ports {
		if ports[i] != ports[0]+uint16(i) {
			return fmt.Sprint(ports)
		}
	}
	return fmt.Sprintf("%d-%d", ports[0], ports[len(ports)-1])
}
