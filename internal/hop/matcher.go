package hop

import (
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
	// are serialised; it must not call back into the Matcher. The
	// record is the matcher's again once Emit returns: to keep it, keep
	// a Clone.
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

// entry is a group's or a waiting context's place in the matcher's FIFO:
// a list threaded through the entries themselves, so that entering one
// allocates nothing more.
type entry struct {
	prev, next *entry
	born       uint64
	// One of the two is set: the entry's owner.
	g *group
	w *waiting
}

// fifo is a circular list of entries around a sentinel.
type fifo struct {
	root entry
	n    int
}

func (f *fifo) init() { f.root.prev, f.root.next = &f.root, &f.root }

func (f *fifo) front() *entry {
	if f.n == 0 {
		return nil
	}
	return f.root.next
}

func (f *fifo) pushBack(e *entry) {
	e.prev, e.next = f.root.prev, &f.root
	f.root.prev.next = e
	f.root.prev = e
	f.n++
}

func (f *fifo) remove(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	f.n--
}

// group is the stamps of one segment, so far. lo and hi bound the bytes
// every stamp holds (the intersection of their [Seq, Seq+Len) ranges).
type group struct {
	entry
	t      tuple
	lo, hi uint32
	stamps []sight
	// inline holds the first stamps: a segment is seen at a few hooks,
	// and the slice grown from nil took an allocation per hook.
	inline [4]sight
	ctx    Context
	hasCtx bool
}

// sight is a stamp as its group keeps it: without the flow key, whose
// 5-tuple is the group's and whose MACs and VLAN no record shows. A
// quarter of a Stamp's bytes: a loaded node's table holds a window's worth
// of groups, and their size was the matcher's cache misses.
type sight struct {
	TimeNs    uint64
	IfIndex   uint32
	Seq, Len  uint32
	Direction flow.Direction
	Tunneled  bool
	Kind      Kind
}

// waiting is a trace context that arrived before its segment's stamps.
type waiting struct {
	entry
	ctx Context
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
	fifo  fifo
	stats Stats
	// free holds finished groups for reuse: under load a group is made
	// and finished for every request, and each was an allocation of a
	// few hundred bytes for the collector to sweep. At most a table's
	// worth. records likewise holds the memory of emitted records.
	free    []*group
	records []*recordMem
	dones   [][]*recordMem
	// The tuple looked up last, and its groups (segmentsOf).
	lastT    tuple
	lastSegs *segments
	// The wall clock as clocks last read it, and the interfaces named
	// since ifacesAt.
	clockAt, ifacesAt uint64
	clockSet          bool
	wall              time.Time
	offset            int64
	ifaces            map[uint32]Iface

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
	m := &Matcher{opts: o, groups: map[tuple]*segments{}, waiting: map[tuple][]*waiting{}, ifaces: map[uint32]Iface{}}
	m.fifo.init()
	return m
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

// Stamp implements Sink.
func (m *Matcher) Stamp(s Stamp) {
	now := m.opts.MonoNow()
	m.mu.Lock()
	done := m.expire(now, nil)
	done = m.stamp(&s, now, done)
	m.mu.Unlock()
	m.emit(done)
}

// Batch implements BatchSink: the stamps, then the contexts, with one
// reading of the clock and one hold of the lock for all of them. A
// context finds its segment's group whether its stamps came before it or
// after it, so the order between the two kinds does not matter.
func (m *Matcher) Batch(stamps []Stamp, ctxs []Context) {
	if len(stamps)+len(ctxs) == 0 {
		return
	}
	now := m.opts.MonoNow()
	m.mu.Lock()
	done := m.expire(now, nil)
	for i := range stamps {
		done = m.stamp(&stamps[i], now, done)
	}
	for i := range ctxs {
		done = m.context(&ctxs[i], now, done)
	}
	m.mu.Unlock()
	m.emit(done)
}

// stamp adds s; m.mu is held.
func (m *Matcher) stamp(s *Stamp, now uint64, done []*recordMem) []*recordMem {
	m.stats.Stamps++
	t := tupleOf(&s.Key)
	lo, hi := seqRange(s)
	segs := m.segmentsOf(t)
	var g *group
	if segs != nil {
		g = segs.find(lo, hi, func(c *group) bool {
			if slices.ContainsFunc(c.stamps, func(o sight) bool { return o.IfIndex == s.Key.IfIndex && o.Direction == s.Key.Direction }) {
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
		done = m.makeRoom(now, done)
		if segs = m.segmentsOf(t); segs == nil {
			// makeRoom may have taken the tuple's last group.
			segs = &segments{}
			m.groups[t] = segs
		}
		g = m.newGroup()
		g.t, g.lo, g.hi, g.born = t, lo, hi, now
		m.fifo.pushBack(&g.entry)
		segs.insert(g)
	}
	g.stamps = append(g.stamps, sight{TimeNs: s.TimeNs, IfIndex: s.Key.IfIndex, Seq: s.Seq, Len: s.Len,
		Direction: s.Key.Direction, Tunneled: s.Tunneled, Kind: s.Kind})
	if !g.hasCtx {
		m.claim(g)
	}
	return done
}

// newGroup is a group from the free list, or a new one.
func (m *Matcher) newGroup() *group {
	if n := len(m.free); n > 0 {
		g := m.free[n-1]
		m.free[n-1] = nil
		m.free = m.free[:n-1]
		return g
	}
	g := &group{}
	g.entry.g = g
	g.stamps = g.inline[:0]
	return g
}

// release puts a finished group on the free list.
func (m *Matcher) release(g *group) {
	if len(m.free) >= m.opts.TableSize {
		return
	}
	*g = group{}
	g.entry.g = g
	g.stamps = g.inline[:0]
	m.free = append(m.free, g)
}

// Context implements Sink.
func (m *Matcher) Context(c Context) {
	now := m.opts.MonoNow()
	m.mu.Lock()
	done := m.expire(now, nil)
	done = m.context(&c, now, done)
	m.mu.Unlock()
	m.emit(done)
}

// context adds c; m.mu is held.
func (m *Matcher) context(c *Context, now uint64, done []*recordMem) []*recordMem {
	m.stats.Contexts++
	t := tupleOf(&c.Key)
	if g := m.groupOf(t, c.Seq); g != nil {
		if !g.hasCtx {
			g.ctx, g.hasCtx = *c, true
		}
	} else if !slices.ContainsFunc(m.waiting[t], func(w *waiting) bool { return w.ctx.Seq == c.Seq }) {
		// Every hook reports the context it finds: one waits per request.
		done = m.makeRoom(now, done)
		w := &waiting{ctx: *c}
		w.entry.w, w.born = w, now
		m.fifo.pushBack(&w.entry)
		m.waiting[t] = append(m.waiting[t], w)
	}
	return done
}

// groupOf is the group of t whose bytes start at seq or hold it.
func (m *Matcher) groupOf(t tuple, seq uint32) *group {
	segs := m.segmentsOf(t)
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
			g.ctx, g.hasCtx = w.ctx, true
			m.fifo.remove(&w.entry)
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
	segs := m.segmentsOf(g.t)
	segs.remove(g)
	if len(segs.gs) == 0 {
		delete(m.groups, g.t)
		if m.lastSegs == segs {
			m.lastSegs = nil
		}
	}
}

// segmentsOf is the groups of t (nil: none). The tuple asked last is
// remembered: a request's stamps at a node's hooks come one after the
// other, and each lookup hashed the 40-byte tuple. m.mu is held.
func (m *Matcher) segmentsOf(t tuple) *segments {
	// The ports first: they tell most tuples apart without comparing
	// the addresses' 32 bytes.
	if m.lastSegs != nil && m.lastT.sport == t.sport && m.lastT.dport == t.dport && m.lastT == t {
		return m.lastSegs
	}
	segs := m.groups[t]
	if segs != nil {
		m.lastT, m.lastSegs = t, segs
	}
	return segs
}

// takeDone is a slice for the records a call finishes, from the ones
// emit gave back. m.mu is held.
func (m *Matcher) takeDone() []*recordMem {
	if n := len(m.dones); n > 0 {
		d := m.dones[n-1]
		m.dones = m.dones[:n-1]
		return d
	}
	return nil
}

// makeRoom finishes the oldest entry when the table is full.
func (m *Matcher) makeRoom(now uint64, done []*recordMem) []*recordMem {
	for m.fifo.n >= m.opts.TableSize {
		done = m.finish(m.fifo.front(), now, done, true)
	}
	return done
}

// expire finishes the entries whose window ended by now.
func (m *Matcher) expire(now uint64, done []*recordMem) []*recordMem {
	win := uint64(m.opts.Window)
	for e := m.fifo.front(); e != nil && now-e.born >= win; e = m.fifo.front() {
		done = m.finish(e, now, done, false)
	}
	return done
}

// finish takes an entry out of the table, and adds its record to done if
// it is a group with something to time.
func (m *Matcher) finish(e *entry, now uint64, done []*recordMem, evicted bool) []*recordMem {
	m.fifo.remove(e)
	if w := e.w; w != nil {
		t := tupleOf(&w.ctx.Key)
		m.dropWaiting(t, slices.Index(m.waiting[t], w))
		if evicted {
			m.stats.ContextsDropped++
		} else {
			m.stats.ContextsUnmatched++
		}
		return done
	}
	g := e.g
	m.dropGroup(g)
	if evicted {
		m.stats.Evicted++
	}
	if len(g.stamps) < 2 {
		m.stats.Incomplete++
		m.release(g)
		return done
	}
	mem := m.record(g, now)
	m.release(g)
	if mem.r.Kind == KindNameRequest {
		m.stats.Requests++
	} else {
		m.stats.Sampled++
	}
	if done == nil {
		done = m.takeDone()
	}
	return append(done, mem)
}

// recordMem is a record and room for its path and hops in one
// allocation: a path of up to four hooks, which is most.
type recordMem struct {
	r    Request
	path [4]Point
	hops [3]Hop
}

// record makes the Request of a finished group.
func (m *Matcher) record(g *group, now uint64) *recordMem {
	// By time, stably: an insertion sort, as a path has a few stamps.
	ss := g.stamps
	for i := 1; i < len(ss); i++ {
		for j := i; j > 0 && ss[j].TimeNs < ss[j-1].TimeNs; j-- {
			ss[j], ss[j-1] = ss[j-1], ss[j]
		}
	}
	mem := m.newRecord()
	r := &mem.r
	t := &g.t
	k := flow.Key{EtherType: t.etherType, SrcAddr: t.src, DstAddr: t.dst}
	*r = Request{
		Kind:      KindNameSampled,
		SrcAddr:   k.SrcIP(),
		DstAddr:   k.DstIP(),
		SrcPort:   t.sport,
		DstPort:   t.dport,
		Proto:     t.proto,
		Seq:       g.lo,
		Node:      m.opts.Node,
		BootID:    m.opts.BootID,
		ClockSync: m.opts.ClockSync,
		Path:      mem.path[:0],
	}
	m.clocks(now)
	r.ClockOffsetNs = m.offset
	// Field by field into the record's own memory (zeroed), not through
	// a Point built aside and copied: that copy was most of record's time.
	r.Path = slices.Grow(r.Path, len(g.stamps))[:len(g.stamps)]
	for i := range g.stamps {
		s, p := &g.stamps[i], &r.Path[i]
		if s.Kind == KindRequest {
			r.Kind = KindNameRequest
		}
		m.iface(s.IfIndex, p)
		p.IfIndex, p.Hook = s.IfIndex, s.Direction.String()
		p.TimeNs, p.Tunneled, p.Seq, p.Len = s.TimeNs, s.Tunneled, s.Seq, s.Len
	}
	if g.hasCtx {
		c := &g.ctx
		r.Kind = KindNameRequest
		r.Seq = c.Seq
		r.TraceID, r.SpanID, r.TraceSource = hexID(c.TraceID[:]), hexID(c.SpanID[:]), c.Source.String()
	}
	r.Time = r.Wall(r.Path[0])
	r.Hops = appendHops(mem.hops[:0], r.Path)
	return mem
}

// clockEvery is how often the matcher reads the wall clock: for the
// records' offset between the wall clock and the stamps' monotonic one,
// which moves only as NTP slews it, and for the interface cache's age.
const clockEvery = 100 * time.Millisecond

// ifaceEvery is how long the matcher keeps its own copy of the resolver's
// answers: the resolver keeps them longer, but behind a lock, and the
// matcher asks for every hook of every record.
const ifaceEvery = time.Second

// clocks reads the wall clock if it last did more than clockEvery before
// now (monotonic); m.mu is held.
func (m *Matcher) clocks(now uint64) {
	if m.clockSet && now-m.clockAt < uint64(clockEvery) {
		return
	}
	mono := m.opts.MonoNow()
	m.wall = m.opts.WallNow()
	m.offset = m.wall.UnixNano() - int64(mono)
	m.clockAt, m.clockSet = now, true
	if now-m.ifacesAt >= uint64(ifaceEvery) {
		clear(m.ifaces)
		m.ifacesAt = now
	}
}

// iface names ifindex in p (name, kind, pod); m.mu is held, and clocks
// was called.
func (m *Matcher) iface(ifindex uint32, p *Point) {
	ifc, ok := m.ifaces[ifindex]
	if !ok {
		if timed, isTimed := m.opts.Resolver.(TimedResolver); isTimed {
			ifc = timed.IfaceAt(ifindex, m.wall)
		} else {
			ifc = m.opts.Resolver.Iface(ifindex)
		}
		if len(m.ifaces) >= 1024 {
			clear(m.ifaces)
		}
		m.ifaces[ifindex] = ifc
	}
	p.Iface, p.Kind, p.Pod = ifc.Name, ifc.Kind, ifc.Pod
}

// newRecord is a record's memory from the free list, or new; m.mu is
// held.
func (m *Matcher) newRecord() *recordMem {
	if n := len(m.records); n > 0 {
		mem := m.records[n-1]
		m.records = m.records[:n-1]
		return mem
	}
	return &recordMem{}
}

// emit hands done to Emit, then takes the records' memory back: Emit
// must not keep a record (Request.Clone copies one).
func (m *Matcher) emit(done []*recordMem) {
	if len(done) == 0 {
		return
	}
	m.emitMu.Lock()
	for _, mem := range done {
		m.opts.Emit(&mem.r)
	}
	m.emitMu.Unlock()
	m.mu.Lock()
	for _, mem := range done {
		if len(m.records) >= m.opts.TableSize {
			break
		}
		*mem = recordMem{}
		m.records = append(m.records, mem)
	}
	if len(m.dones) < 4 {
		clear(done)
		m.dones = append(m.dones, done[:0])
	}
	m.mu.Unlock()
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
	now := m.opts.MonoNow()
	m.mu.Lock()
	var done []*recordMem
	for e := m.fifo.front(); e != nil; e = m.fifo.front() {
		done = m.finish(e, now, done, false)
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
	s.Open = m.fifo.n
	return s
}
