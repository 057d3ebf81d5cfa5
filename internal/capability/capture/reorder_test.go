package capture

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"loupe/internal/datapath"
)

type released struct {
	time uint64
	data string
	kept bool
}

func releaseAll(r *reorder, horizon uint64) []released {
	var out []released
	r.release(horizon, func(p *datapath.CapturedPacket) {
		out = append(out, released{p.Time, string(p.Data), p.Kept})
	})
	return out
}

// add holds a packet read as the reader reads one: a record of a 32-byte
// header and the packet, read into the reorder's free space.
func add(t *testing.T, r *reorder, time uint64, kept bool) bool {
	t.Helper()
	data := fmt.Sprintf("packet@%d", time)
	raw := r.room()[:32+len(data)]
	copy(raw[32:], data)
	held := len(r.arena)
	full := r.add(&datapath.CapturedPacket{Time: time, Kept: kept, Data: raw[32:]}, raw)
	if len(r.arena) != held+len(raw) {
		t.Fatalf("a record read into the free space was copied: %d bytes held, want %d", len(r.arena), held+len(raw))
	}
	return full
}

// Two CPUs' buffers read one after the other come out merged by time, up
// to the horizon; what is newer waits, with its data intact, for the next
// release.
func TestReorderMergesBuffersUpToTheHorizon(t *testing.T) {
	r := newReorder(1 << 20)
	for _, tm := range []uint64{10, 30, 50, 70} { // CPU 0's buffer
		add(t, r, tm, false)
	}
	for _, tm := range []uint64{20, 40, 60, 80} { // CPU 1's
		add(t, r, tm, false)
	}
	got := releaseAll(r, 55)
	want := []released{{10, "packet@10", false}, {20, "packet@20", false}, {30, "packet@30", false}, {40, "packet@40", false}, {50, "packet@50", false}}
	if !slices.Equal(got, want) {
		t.Fatalf("first release: %v, want %v", got, want)
	}
	add(t, r, 65, false)
	add(t, r, 90, false)
	got = releaseAll(r, 100)
	want = []released{{60, "packet@60", false}, {65, "packet@65", false}, {70, "packet@70", false}, {80, "packet@80", false}, {90, "packet@90", false}}
	if !slices.Equal(got, want) {
		t.Fatalf("second release: %v, want %v", got, want)
	}
	if r.late != 0 {
		t.Errorf("late = %d, want 0", r.late)
	}
	if len(r.pending) != 0 || len(r.arena) != 0 {
		t.Errorf("after releasing everything: %d packets, %d bytes held", len(r.pending), len(r.arena))
	}
}

// Equal times keep their read order; a kept packet, old by design, is not
// counted late; a live packet behind one already released is.
func TestReorderCountsLatePackets(t *testing.T) {
	r := newReorder(1 << 20)
	// Records read elsewhere are copied in.
	for _, d := range []string{"a", "b"} {
		raw := []byte("header" + d)
		r.add(&datapath.CapturedPacket{Time: 5, Data: raw[6:]}, raw)
	}
	got := releaseAll(r, 10)
	if len(got) != 2 || got[0].data != "a" || got[1].data != "b" {
		t.Fatalf("equal times: %v, want a then b", got)
	}
	add(t, r, 3, true)
	add(t, r, 4, false)
	add(t, r, 6, false)
	got = releaseAll(r, 10)
	if len(got) != 3 || got[0].time != 3 || got[1].time != 4 || got[2].time != 6 {
		t.Fatalf("got %v", got)
	}
	if r.late != 1 {
		t.Errorf("late = %d, want 1 (the live packet at 4, behind 5)", r.late)
	}
}

// Past its bound the buffer asks for a release of everything.
func TestReorderBound(t *testing.T) {
	r := newReorder(200)
	full := false
	n := 0
	for tm := uint64(1); !full; tm++ {
		full = add(t, r, tm, false)
		n++
	}
	if n != 5 { // a record of "packet@N" is 40 bytes: the fifth fills 200
		t.Errorf("full after %d packets, want 5", n)
	}
	if got := releaseAll(r, math.MaxUint64); len(got) != n {
		t.Errorf("released %d, want %d", len(got), n)
	}
}
