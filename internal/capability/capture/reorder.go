package capture

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/cilium/ebpf/perf"

	"loupe/internal/datapath"
	"loupe/internal/flow"
)

// reorder puts the captured packets back in the order they crossed the
// hooks. Each CPU's buffer is in order, but the reader drains the buffers
// one at a time and a buffer under its watermark waits for the next
// deadline: the two directions of a connection, handled on two CPUs, would
// reach the file out of order, and Wireshark takes the later half for
// retransmissions (whose HTTP it never dissects).
//
// The reader adds every packet it reads and, each time a drain of every
// buffer has ended, releases those older than the drain's start, sorted
// by time. Packets are copied in (the reader's record is reused); past
// maxBytes held, everything is released at once, and the packets that then
// leave out of order are counted.
type reorder struct {
	pending  []held
	rest     []held // the next pending, swapped in at each release
	order    []heldKey
	arena    []byte // the pending packets' data
	spare    []byte // the next arena, swapped in at each release
	maxBytes int
	last     uint64 // time of the last live packet released
	late     uint64 // live packets released behind a later one
}

type held struct {
	p      datapath.CapturedPacket // Data nil: it is arena[off:off+n]
	off, n int
}

// heldKey is what release sorts: a held packet's time and place, 16 bytes
// where a held packet is 72; among equal times the place keeps the read
// order.
type heldKey struct {
	time uint64
	i    int
}

func newReorder(maxBytes int) *reorder { return &reorder{maxBytes: max(maxBytes, 1)} }

// maxRecord is the most a perf record takes: its size is 16 bits.
const maxRecord = 1 << 16

// room returns the arena's free space, empty, with room for a record: the
// reader reads the next record into it (perf.Reader.ReadInto fills the
// capacity it is given), so that add holds it without copying it.
func (r *reorder) room() []byte {
	if cap(r.arena)-len(r.arena) < maxRecord {
		r.arena = slices.Grow(r.arena, maxRecord)
	}
	return r.arena[len(r.arena):len(r.arena)]
}

// add holds p, whose Data is within raw, the record it was read from:
// where raw is the arena's free space (room), by taking that space,
// otherwise by a copy. It reports whether the held packets exceed the
// bound, when the caller should release them all.
func (r *reorder) add(p *datapath.CapturedPacket, raw []byte) (full bool) {
	h := held{p: *p, off: len(r.arena), n: len(p.Data)}
	h.p.Data = nil
	if free := r.arena[len(r.arena):cap(r.arena)]; len(p.Data) > 0 && len(raw) <= len(free) && &free[0] == &raw[0] {
		h.off += cap(raw) - cap(p.Data) // where Data starts in raw
		r.arena = r.arena[:len(r.arena)+len(raw)]
	} else {
		r.arena = append(r.arena, p.Data...)
	}
	r.pending = append(r.pending, h)
	return len(r.arena) >= r.maxBytes
}

// release emits, in time order, every held packet whose time is before
// horizon (CLOCK_MONOTONIC ns); p.Data is valid only during the call.
// Among equal times the read order stays.
func (r *reorder) release(horizon uint64, emit func(p *datapath.CapturedPacket)) {
	keys := r.order[:0]
	for i := range r.pending {
		keys = append(keys, heldKey{r.pending[i].p.Time, i})
	}
	slices.SortFunc(keys, func(a, b heldKey) int { return cmp.Or(cmp.Compare(a.time, b.time), cmp.Compare(a.i, b.i)) })
	n, _ := slices.BinarySearchFunc(keys, horizon, func(k heldKey, t uint64) int { return cmp.Compare(k.time, t) })
	for _, k := range keys[:n] {
		h := &r.pending[k.i]
		h.p.Data = r.arena[h.off : h.off+h.n]
		// A kept packet crossed its hook before its trigger fired and
		// is sent then: it is late by design, not by the reader.
		if !h.p.Kept {
			if h.p.Time < r.last {
				r.late++
			} else {
				r.last = h.p.Time
			}
		}
		emit(&h.p)
	}
	// What stays moves to the spare arena, in time order.
	rest := r.rest[:0]
	r.spare = r.spare[:0]
	for _, k := range keys[n:] {
		h := r.pending[k.i]
		data := r.arena[h.off : h.off+h.n]
		h.off = len(r.spare)
		r.spare = append(r.spare, data...)
		rest = append(rest, h)
	}
	r.arena, r.spare = r.spare, r.arena
	r.pending, r.rest = rest, r.pending[:0]
	r.order = keys
}

// reorderSlack is how long after its timestamp a packet may still be on its
// way into its CPU's buffer: the program takes the time, then writes.
const reorderSlack = 10 * time.Millisecond

// orderedRead reads a perf reader of captured packets and hands them to
// emit in time order (see reorder).
type orderedRead struct {
	rd       *perf.Reader
	clock    flow.Clock
	maxBytes int         // held at most before an early release
	done     func() bool // checked after every record and deadline
	end      time.Time   // a deadline of the whole read, or zero
	emit     func(*datapath.CapturedPacket) error
	tick     func() error // after every release (flush what was written)
	log      *slog.Logger
	lost     uint64 // records the kernel could not buffer
	late     uint64 // live packets that left behind a later one
}

// errEnough, returned by emit, ends the read without an error.
var errEnough = errors.New("enough packets")

// run reads until done holds, then drains the buffers (the programs that
// fill them are detached, or the read is over) and releases everything.
//
// perf.Reader reads every CPU's buffer at each wake-up, and a deadline
// wakes it even below the watermark: once a deadline has been reported,
// everything written before it has been read, so what is older than it,
// less reorderSlack, can go. Under a load that never lets a deadline
// pass, packets leave once they are two wakes old.
func (o *orderedRead) run() error {
	var (
		rec      perf.Record
		p        datapath.CapturedPacket
		order    = newReorder(o.maxBytes)
		emitErr  error
		draining bool
	)
	emit := func(p *datapath.CapturedPacket) {
		if emitErr == nil {
			emitErr = o.emit(p)
		}
	}
	release := func(horizon uint64) error {
		order.release(horizon, emit)
		o.late = order.late
		if emitErr != nil && !errors.Is(emitErr, errEnough) {
			return emitErr
		}
		if err := o.tick(); err != nil {
			return err
		}
		return emitErr
	}
	finish := func(err error) error {
		if errors.Is(err, errEnough) {
			return nil
		}
		return err
	}
	var next time.Time
	var nextMono, released, drainMono, newest uint64
	schedule := func() {
		now, mono := time.Now(), o.clock.Mono()
		next, nextMono = now.Add(readWake), mono+uint64(readWake)
		if draining {
			next, nextMono = now, mono
		}
		if !o.end.IsZero() && o.end.Before(next) {
			next, nextMono = o.end, mono+uint64(max(time.Until(o.end), 0))
		}
		o.rd.SetDeadline(next)
	}
	schedule()
	released = o.clock.Mono()
	for {
		if !draining && o.done() {
			draining, drainMono = true, o.clock.Mono()
			schedule()
		}
		rec.RawSample = order.room()
		err := o.rd.ReadInto(&rec)
		switch {
		case isDeadline(err) || errors.Is(err, perf.ErrFlushed):
			if draining {
				return finish(release(math.MaxUint64))
			}
			if err := release(nextMono - min(nextMono, uint64(reorderSlack))); err != nil {
				return finish(err)
			}
			released = o.clock.Mono()
			schedule()
			continue
		case errors.Is(err, perf.ErrClosed):
			return finish(release(math.MaxUint64))
		case err != nil:
			return fmt.Errorf("reading captured packets: %w", err)
		}
		if rec.LostSamples > 0 {
			o.lost += rec.LostSamples
			continue
		}
		if err := datapath.DecodeCapturedPacket(rec.RawSample, &p); err != nil {
			o.log.Error("decoding a captured packet", "err", err)
			continue
		}
		if draining && p.Time > drainMono {
			// Crossed its hook after the end: the read is over, even
			// if packets keep coming (an on-demand filter still set).
			return finish(release(math.MaxUint64))
		}
		// The newest packet's time stands for the clock, which is not
		// read per packet: it is at most the clock's, so what leaves
		// on it is as old as on the clock, or older.
		newest = max(newest, p.Time)
		horizon := uint64(0)
		if order.add(&p, rec.RawSample) {
			horizon = math.MaxUint64
		} else if newest > released && newest-released > uint64(4*readWake) {
			horizon = newest - uint64(2*readWake)
		}
		if horizon != 0 {
			if err := release(horizon); err != nil {
				return finish(err)
			}
			released = o.clock.Mono()
		}
	}
}
