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

func newReorder(maxBytes int) *reorder { return &reorder{maxBytes: max(maxBytes, 1)} }

// add holds a copy of p; it reports whether the held packets exceed the
// bound, when the caller should release them all.
func (r *reorder) add(p *datapath.CapturedPacket) (full bool) {
	h := held{p: *p, off: len(r.arena), n: len(p.Data)}
	h.p.Data = nil
	r.arena = append(r.arena, p.Data...)
	r.pending = append(r.pending, h)
	return len(r.arena) >= r.maxBytes
}

// release emits, in time order, every held packet whose time is before
// horizon (CLOCK_MONOTONIC ns); p.Data is valid only during the call.
// Among equal times the read order stays (a stable sort).
func (r *reorder) release(horizon uint64, emit func(p *datapath.CapturedPacket)) {
	slices.SortStableFunc(r.pending, func(a, b held) int { return cmp.Compare(a.p.Time, b.p.Time) })
	n, _ := slices.BinarySearchFunc(r.pending, horizon, func(h held, t uint64) int { return cmp.Compare(h.p.Time, t) })
	for i := range r.pending[:n] {
		h := &r.pending[i]
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
	// What stays moves to the spare arena.
	rest := r.pending[n:]
	r.spare = r.spare[:0]
	for i := range rest {
		h := &rest[i]
		data := r.arena[h.off : h.off+h.n]
		h.off = len(r.spare)
		r.spare = append(r.spare, data...)
	}
	r.arena, r.spare = r.spare, r.arena
	r.pending = append(r.pending[:0], rest...)
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
	var nextMono, released, drainMono uint64
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
		horizon := uint64(0)
		if order.add(&p) {
			horizon = math.MaxUint64
		} else if now := o.clock.Mono(); now-released > uint64(4*readWake) {
			horizon = now - uint64(2*readWake)
		}
		if horizon != 0 {
			if err := release(horizon); err != nil {
				return finish(err)
			}
			released = o.clock.Mono()
		}
	}
}
