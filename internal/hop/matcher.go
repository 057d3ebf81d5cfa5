package hop

import (
	"container/list"
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"loupe/internal/flow"
)

// Defaults of Options.
const (
	DefaultTableSize = 16384
	// DefaultWindow is how long a segment's group waits for more hooks.
	// A path through one host takes microseconds to a few milliseconds
	// (more behind a queue); the stamps of its hooks reach userspace
	// through one ring buffer within the reader's wake-up time.
	DefaultWindow = 200 * time.Millisecond
)

// Options configure a Matcher.
type Options struct {
	// TableSize bounds the groups being matched plus the trace contexts
	// waiting for their segment's stamps. When it is full the oldest
	// entry is finished early (counted in Stats.Evicted or
	// Stats.ContextsDropped).
	TableSize int
	// Window: a group this old (since its first stamp arrived) is
	// finished and emitted, whichever hooks it has.
	Window   time.Duration
	Resolver Resolver
	// Node, BootID and ClockSync are copied into every record.
	Node      string
	BootID    string
	ClockSync bool
	// MonoNow is the kernel's stamp clock, CLOCK_MONOTONIC in ns; WallNow
	// the wall clock. Tests inject both.
	MonoNow func() uint64
	WallNow func() time.Time
	// Emit receives every finished record with at least two hooks. Calls
	// are serialised; it must not call back into the Matcher.
	Emit func(*Request)
}

// Stats count what the matcher did, since it was made.
type Stats struct {
	Stamps, Contexts uint64
	// Requests and Sampled are the records emitted.
	Requests, Sampled uint64
	// Incomplete are groups finished with one hook: nothing to time.
	Incomplete uint64
	// Duplicates are stamps of a hook its group already had (a
	// retransmission, or GSO splitting one buffer into several at a
	// later hook): each starts or joins another group.
	Duplicates uint64
	// Evicted are groups finished before their window because the table
	// was full; ContextsDropped are contexts pushed out likewise.
	Evicted, ContextsDropped uint64
	// ContextsUnmatched are contexts no group claimed within the window.
	ContextsUnmatched uint64
	// Open is what the table holds now (groups and waiting contexts).
	Open int
}

// tuple is the inner 5-tuple: the flow key without the hook (IfIndex,
// Direction), the MACs and the VLAN, which differ from hook to hook.
type tuple struct {
	src, dst     [16]byte
	sport, dport uint16
	etherType    uint16
	proto        uint8
}

func tupleOf(k *flow.Key) tuple {
	return tuple{src: k.SrcAddr, dst: k.DstAddr, sport: k.SrcPort, dport: k.DstPort, etherType: k.EtherType, proto: k.Proto}
}

// group is the stamps of one segment, so far. lo and hi bound the bytes
// every stamp holds (the intersection of their [Seq, Seq+Len) ranges).
type group struct {
	t      tuple
	lo, hi uint32
	stamps []Stamp
	// inline holds the first stamps: a segment is seen at a few hooks,
	// and the slice grown from nil took an allocation per hook.
	inline [3]Stamp
	ctx    *Context
	born   uint64
	elem   *list.Element
}

// waiting is a trace context that arrived before its segment's stamps.
type waiting struct {
	ctx  Context
	born uint64
	elem *list.Element
}

// Matcher joins the stamps of one segment across the hooks of a host:
// stamps of the same inner 5-tuple whose sequence ranges share a byte are
// one segment, at most one stamp per hook (see docs/architecture.md,
// "Per-hop latency"). It implements Sink and is safe for concurrent use.
type Matcher struct {
	opts Options

	mu      sync.Mutex
	groups  map[tuple]*segments
	waiting map[tuple][]*waiting
	// fifo holds every group and waiting context in arrival order, which
	// is also the order their windows end in.
	fifo  list.List
	stats Stats

	emitMu sync.Mutex
}

// NewMatcher returns a matcher; zero options take their defaults.
func NewMatcher(o Options) *Matcher {
	if o.TableSize <= 0 {
		o.TableSize = DefaultTableSize
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.MonoNow == nil {
		o.MonoNow = newMonoClock().now
	}
	if o.WallNow == nil {
		o.WallNow = time.Now
	}
	if o.Resolver == nil {
		o.Resolver = ResolverFunc(func(uint32) Iface { return Iface{} })
	}
	if o.Emit == nil {
		o.Emit = func(*Request) {}
	}
	return &Matcher{opts: o, groups: map[tuple]*segments{}, waiting: map[tuple][]*waiting{}}
}

// MonotonicNow is CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns,
// read by a system call: for a reading now and then (the matcher reads
// its own monoClock).
func MonotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// monoClock reads CLOCK_MONOTONIC through Go's own monotonic clock, which
// is CLOCK_MONOTONIC read from the vDSO, offset by the runtime's start:
// one system call learns the offset, and every later reading is a
// time.Since. The matcher reads the clock for every stamp, context and
// record; unix.ClockGettime is a system call each time, and took a fifth
// of the pipeline's CPU.
type monoClock struct {
	base uint64    // CLOCK_MONOTONIC at t0
	t0   time.Time // with Go's monotonic reading
}

func newMonoClock() monoClock {
	t0 := time.Now()
	m := MonotonicNow()
	t1 := time.Now()
	// The system call read the clock somewhere between t0 and t1.
	return monoClock{base: m - uint64(t1.Sub(t0))/2, t0: t0}
}

func (c monoClock) now() uint64 { return c.base + uint64(time.Since(c.t0)) }

// seqRange is a stamp's bytes; a stamp without payload (a bare SYN or FIN)
// holds its one sequence number.
func seqRange(s *Stamp) (lo, hi uint32) { return s.Seq, s.Seq + max(s.Len, 1) }

// seqLess compares sequence numbers modulo 2^32.
func seqLess(a, b uint32) bool { return int32(a-b) < 0 }

func seqMax(a, b uint32) uint32 {
	if seqLess(a, b) {
		return b
	}
	return a
}

func seqMin(a, b uint32) uint32 {
	if seqLess(a, b) {
		return a
	}
	return b
}

func sameHook(a, b *flow.Key) bool { return a.IfIndex == b.IfIndex && a.Direction == b.Direction }

// Stamp implements Sink.
func (m *Matcher) Stamp(s Stamp) {
	now := m.opts.MonoNow()
	m.mu.Lock()
	m.stats.Stamps++
	done := m.expire(now, nil)
	t := tupleOf(&s.Key)
	lo, hi := seqRange(&s)
	segs := m.groups[t]
	var g *group
	if segs != nil {
		g = segs.find(lo, hi, func(c *group) bool {
			if slices.ContainsFunc(c.stamps, func(o Stamp) bool { return sameHook(&o.Key, &s.Key) }) {
				m.stats.Duplicates++
				return false
			}
			return true
		})
	}
	if g != nil {
		ilo, ihi := seqMax(g.lo, lo), seqMin(g.hi, hi)
		if ilo != g.lo {
			// Its first byte moves: so does its place.
			segs.remove(g)
			g.lo, g.hi = ilo, ihi
			segs.insert(g)
		} else {
			g.hi = ihi
		}
	} else {
		done = m.makeRoom(done)
		if segs = m.groups[t]; segs == nil {
			// makeRoom may have taken the tuple's last group.
			segs = &segments{}
			m.groups[t] = segs
		}
		g = &group{t: t, lo: lo, hi: hi, born: now}
		g.stamps = g.inline[:0]
		g.elem = m.fifo.PushBack(g)
		segs.insert(g)
	}
	g.stamps = append(g.stamps, s)
	if g.ctx == nil {
		m.claim(g)
	}
	m.mu.Unlock()
	m.emit(done)
}

// Context implements Sink.
func (m *Matcher) Context(c Context) {
	now := m.opts.MonoNow()
	m.mu.Lock()
	m.stats.Contexts++
	done := m.expire(now, nil)
	t := tupleOf(&c.Key)
	if g := m.groupOf(t, c.Seq); g != nil {
		if g.ctx == nil {
			g.ctx = &c
		}
	} else if !slices.ContainsFunc(m.waiting[t], func(w *waiting) bool { return w.ctx.Seq == c.Seq }) {
		// Every hook reports the context it finds: one waits per request.
		done = m.makeRoom(done)
		w := &waiting{ctx: c, born: now}
		w.elem = m.fifo.PushBack(w)
		m.waiting[t] = append(m.waiting[t], w)
	}
	m.mu.Unlock()
	m.emit(done)
}

// groupOf is the group of t whose bytes start at seq or hold it.
func (m *Matcher) groupOf(t tuple, seq uint32) *group {
	segs := m.groups[t]
	if segs == nil {
		return nil
	}
	return segs.find(seq, seq+1, func(*group) bool { return true })
}

// claim gives g the waiting context of its segment, if one came first.
func (m *Matcher) claim(g *group) {
	ws := m.waiting[g.t]
	for i, w := range ws {
		if w.ctx.Seq == g.lo || (!seqLess(w.ctx.Seq, g.lo) && seqLess(w.ctx.Seq, g.hi)) {
			g.ctx = &w.ctx
			m.fifo.Remove(w.elem)
			m.dropWaiting(g.t, i)
			return
		}
	}
}

func (m *Matcher) dropWaiting(t tuple, i int) {
	ws := slices.Delete(m.waiting[t], i, i+1)
	if len(ws) == 0 {
		delete(m.waiting, t)
		return
	}
	m.waiting[t] = ws
}

func (m *Matcher) dropGroup(g *group) {
	segs := m.groups[g.t]
	segs.remove(g)
	if len(segs.gs) == 0 {
		delete(m.groups, g.t)
	}
}

// makeRoom finishes the oldest entry when the table is full.
func (m *Matcher) makeRoom(done []*Request) []*Request {
	for m.fifo.Len() >= m.opts.TableSize {
		done = m.finish(m.fifo.Front(), done, true)
	}
	return done
}

// expire finishes the entries whose window ended by now.
func (m *Matcher) expire(now uint64, done []*Request) []*Request {
	win := uint64(m.opts.Window)
	for e := m.fifo.Front(); e != nil; e = m.fifo.Front() {
		var born uint64
		switch v := e.Value.(type) {
		case *group:
			born = v.born
		case *waiting:
			born = v.born
		}
		if now-born < win {
			break
		}
		done = m.finish(e, done, false)
	}
	return done
}

// finish takes an entry out of the table, and adds its record to done if
// it is a group with something to time.
func (m *Matcher) finish(e *list.Element, done []*Request, evicted bool) []*Request {
	m.fifo.Remove(e)
	switch v := e.Value.(type) {
	case *waiting:
		t := tupleOf(&v.ctx.Key)
		m.dropWaiting(t, slices.Index(m.waiting[t], v))
		if evicted {
			m.stats.ContextsDropped++
		} else {
			m.stats.ContextsUnmatched++
		}
	case *group:
		m.dropGroup(v)
		if evicted {
			m.stats.Evicted++
		}
		if len(v.stamps) < 2 {
			m.stats.Incomplete++
			return done
		}
		r := m.record(v)
		if r.Kind == KindNameRequest {
			m.stats.Requests++
		} else {
			m.stats.Sampled++
		}
		done = append(done, r)
	}
	return done
}

// record makes the Request of a finished group.
func (m *Matcher) record(g *group) *Request {
	slices.SortStableFunc(g.stamps, func(a, b Stamp) int {
		switch {
		case a.TimeNs < b.TimeNs:
			return -1
		case a.TimeNs > b.TimeNs:
			return 1
		}
		return 0
	})
	first := &g.stamps[0]
	r := &Request{
		Kind:      KindNameSampled,
		SrcAddr:   first.Key.SrcIP(),
		DstAddr:   first.Key.DstIP(),
		SrcPort:   first.Key.SrcPort,
		DstPort:   first.Key.DstPort,
		Proto:     first.Key.Proto,
		Seq:       g.lo,
		Node:      m.opts.Node,
		BootID:    m.opts.BootID,
		ClockSync: m.opts.ClockSync,
		Path:      make([]Point, 0, len(g.stamps)),
	}
	wall := m.opts.WallNow()
	r.ClockOffsetNs = wall.UnixNano() - int64(m.opts.MonoNow())
	timed, _ := m.opts.Resolver.(TimedResolver)
	for i := range g.stamps {
		s := &g.stamps[i]
		if s.Kind == KindRequest {
			r.Kind = KindNameRequest
		}
		var ifc Iface
		if timed != nil {
			ifc = timed.IfaceAt(s.Key.IfIndex, wall)
		} else {
			ifc = m.opts.Resolver.Iface(s.Key.IfIndex)
		}
		r.Path = append(r.Path, Point{
			Iface: ifc.Name, IfIndex: s.Key.IfIndex, Kind: ifc.Kind, Pod: ifc.Pod, Hook: s.Key.Direction.String(),
			TimeNs: s.TimeNs, Tunneled: s.Tunneled, Seq: s.Seq, Len: s.Len,
		})
	}
	if c := g.ctx; c != nil {
		r.Kind = KindNameRequest
		r.Seq = c.Seq
		r.TraceID, r.SpanID, r.TraceSource = hexID(c.TraceID[:]), hexID(c.SpanID[:]), c.Source.String()
	}
	r.Time = r.Wall(r.Path[0])
	r.Hops = Hops(r.Path)
	return r
}

func (m *Matcher) emit(done []*Request) {
	if len(done) == 0 {
		return
	}
	m.emitMu.Lock()
	defer m.emitMu.Unlock()
	for _, r := range done {
		m.opts.Emit(r)
	}
}

// Expire finishes the groups and contexts whose window ended. Run calls it
// periodically, so that the last segments before a quiet time are emitted.
func (m *Matcher) Expire() {
	now := m.opts.MonoNow()
	m.mu.Lock()
	done := m.expire(now, nil)
	m.mu.Unlock()
	m.emit(done)
}

// Run expires groups every quarter window until ctx is done, then
// flushes what is left.
func (m *Matcher) Run(ctx context.Context) {
	t := time.NewTicker(m.opts.Window / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.Flush()
			return
		case <-t.C:
			m.Expire()
		}
	}
}

// Flush finishes everything the table holds (at shutdown).
func (m *Matcher) Flush() {
	m.mu.Lock()
	var done []*Request
	for e := m.fifo.Front(); e != nil; e = m.fifo.Front() {
		done = m.finish(e, done, false)
	}
	m.mu.Unlock()
	m.emit(done)
}

// Window is how long a group waits for more hooks.
func (m *Matcher) Window() time.Duration { return m.opts.Window }

// Stats returns the counters.
func (m *Matcher) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Open = m.fifo.Len()
	return s
}
