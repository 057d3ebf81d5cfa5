package store

import (
	"container/heap"
	"math/bits"
	"slices"
	"sync"
)

// This file holds the aggregation structures behind Top. They are built for
// the per-record loop: no Go maps there, and (for high-cardinality keys such
// as address pairs) radix partitioning so that the hash tables a record
// touches stay small enough for the CPU caches.

type agg struct{ packets, bytes, flows uint64 }

// none reports whether nothing was added to a: no record (when flows
// counts records), no flow new to a count (topState.counting) and no
// traffic.
func (a *agg) none() bool { return a.flows == 0 && a.bytes == 0 && a.packets == 0 }

func (a *agg) add(b *agg) {
	a.packets += b.packets
	a.bytes += b.bytes
	a.flows += b.flows
}

// Multipliers for Fibonacci-style hashing; two different ones so that the
// bits choosing a partition are independent of those choosing a slot.
const (
	hashMul = 0x9E3779B97F4A7C15
	partMul = 0xD6E8FEB86659FD93
)

// slotTable is an open-addressing hash table from uint64 group keys to
// aggregates, stored inline so that a lookup touches one cache line.
type slotTable struct {
	slots   []slot
	shift   uint
	used    int
	touched uint64 // keeps addAll's loads alive
}

type slot struct {
	key uint64 // group key + 1; 0 marks an empty slot
	agg
}

func (t *slotTable) init(logSize uint) {
	t.slots = make([]slot, 1<<logSize)
	t.shift = 64 - logSize
	t.used = 0
}

func (t *slotTable) get(k uint64) *agg {
	if t.used*4 >= len(t.slots)*3 {
		t.grow()
	}
	return t.at(k+1, ((k+1)*hashMul)>>t.shift)
}

// addAll adds each pending record to its group. Like interner.flush, it
// loads each group's first slot before it probes, so that the probes
// mostly hit the caches.
func (t *slotTable) addAll(es []pending) {
	const batch = 16
	var at [batch]uint64
	for len(es) > 0 {
		m := min(batch, len(es))
		for (t.used+m)*4 > len(t.slots)*3 {
			t.grow()
		}
		var touch uint64
		for j := range m {
			at[j] = ((es[j].key + 1) * hashMul) >> t.shift
			touch |= t.slots[at[j]].key
		}
		t.touched |= touch
		for j := range m {
			e := &es[j]
			a := t.at(e.key+1, at[j])
			a.bytes += e.bytes
			a.packets += e.packets
			a.flows += e.flows
		}
		es = es[m:]
	}
}

// at returns the aggregate of stored key k (group key + 1), whose first
// slot is h, in a table with room for it.
func (t *slotTable) at(k, h uint64) *agg {
	mask := uint64(len(t.slots) - 1)
	for ; ; h = (h + 1) & mask {
		sl := &t.slots[h]
		if sl.key == k {
			return &sl.agg
		}
		if sl.key == 0 {
			sl.key = k
			t.used++
			return &sl.agg
		}
	}
}

func (t *slotTable) grow() {
	old := t.slots
	if old == nil {
		t.init(8)
		return
	}
	t.init(64 - t.shift + 1)
	mask := uint64(len(t.slots) - 1)
	for _, sl := range old {
		if sl.key == 0 {
			continue
		}
		h := (sl.key * hashMul) >> t.shift
		for t.slots[h].key != 0 {
			h = (h + 1) & mask
		}
		t.slots[h] = sl
		t.used++
	}
}

func (t *slotTable) each(fn func(k uint64, a *agg)) {
	for i := range t.slots {
		if sl := &t.slots[i]; sl.key != 0 {
			fn(sl.key-1, &sl.agg)
		}
	}
}

const partBits = 8

// partTable aggregates by uint64 key in 256 partitions, shared by the
// workers. A worker appends each record to the buffer of the partition its
// key hashes to (sequential writes), and after each segment folds each
// buffer into its partition's table under that partition's lock. A table is
// 1/256 of the whole, so the fold mostly hits the CPU caches, where one big
// table would take a cache miss per record once it holds millions of keys;
// and as the workers share the tables there is no merge at the end and no
// second copy of every key.
type partTable struct {
	parts [1 << partBits]struct {
		mu sync.Mutex
		t  slotTable
	}
}

// pending is one record's contribution to a group, or (bytes and packets
// zero, flows 1) a flow the group had not seen before.
type pending struct{ key, bytes, packets, flows uint64 }

// partBuf is one worker's pending records.
type partBuf [1 << partBits][]pending

func (b *partBuf) add(k, bytes, packets, flows uint64) {
	i := (k * partMul) >> (64 - partBits)
	b[i] = append(b[i], pending{k, bytes, packets, flows})
}

// flush folds a worker's buffers into the tables.
func (p *partTable) flush(b *partBuf) {
	for i := range b {
		if len(b[i]) == 0 {
			continue
		}
		pt := &p.parts[i]
		pt.mu.Lock()
		pt.t.addAll(b[i])
		pt.mu.Unlock()
		b[i] = b[i][:0]
	}
}

// each visits every group; no flush may run concurrently.
func (p *partTable) each(fn func(k uint64, a *agg)) {
	for i := range p.parts {
		p.parts[i].t.each(fn)
	}
}

// interner gives every distinct (canonical) address of a query one global
// id, shared by the workers, so that per-segment dictionary ids translate
// to global ids once per dictionary entry rather than once per record, and
// the workers' results merge by id.
type interner struct {
	mu    sync.Mutex
	slots []internSlot
	shift uint
	keys  []addrKey
	// touched keeps the loads of flush's first loop alive.
	touched uint32
}

type internSlot struct {
	hi, lo uint64
	fam    uint32
	id     uint32 // id+1; 0 marks an empty slot
}

// addrHash mixes every bit of an address into the high bits a table
// takes: addresses often differ only in their last bytes (the top bits of
// lo), which a multiplication alone would leave in a few high bits.
func addrHash(hi, lo uint64, fam uint32) uint64 {
	h := (hi^uint64(fam)<<56)*hashMul ^ bits.RotateLeft64(lo, 32)
	h ^= h >> 32
	h *= partMul
	return h ^ h>>29
}

func (in *interner) grow() {
	old := in.slots
	logSize := uint(12)
	if old != nil {
		logSize = 64 - in.shift + 1
	}
	in.slots = populate(make([]internSlot, 1<<logSize))
	in.shift = 64 - logSize
	mask := uint64(len(in.slots) - 1)
	for _, sl := range old {
		if sl.id == 0 {
			continue
		}
		h := addrHash(sl.hi, sl.lo, sl.fam) >> in.shift
		for in.slots[h].id != 0 {
			h = (h + 1) & mask
		}
		in.slots[h] = sl
	}
}

func (in *interner) intern(k addrKey) uint32 {
	in.reserve(1)
	return in.put(&k, addrKeyHash(&k))
}

func addrKeyHash(k *addrKey) uint64 {
	return addrHash(le.Uint64(k.a[:8]), le.Uint64(k.a[8:]), uint32(k.fam))
}

// reserve grows the table so that m more keys keep it at most half full.
func (in *interner) reserve(m int) {
	for (len(in.keys)+m)*2 > len(in.slots) {
		in.grow()
	}
}

// put interns k, whose addrHash is h, into a table with room for it.
func (in *interner) put(k *addrKey, h uint64) uint32 {
	hi, lo := le.Uint64(k.a[:8]), le.Uint64(k.a[8:])
	fam := uint32(k.fam)
	mask := uint64(len(in.slots) - 1)
	for h >>= in.shift; ; h = (h + 1) & mask {
		sl := &in.slots[h]
		if sl.id == 0 {
			*sl = internSlot{hi, lo, fam, uint32(len(in.keys)) + 1}
			in.keys = append(in.keys, *k)
			return sl.id - 1
		}
		if sl.hi == hi && sl.lo == lo && sl.fam == fam {
			return sl.id - 1
		}
	}
}

// internBatch is a batch of keys to intern, and their ids.
type internBatch struct {
	n    int
	keys [16]addrKey
	hash [16]uint64
	ids  [16]uint32
}

func (b *internBatch) full() bool { return b.n == len(b.keys) }

// add appends a key; the caller flushes a full batch first.
func (b *internBatch) add(k addrKey) {
	b.keys[b.n] = k
	b.n++
}

// flush interns the batch's keys into b.ids. A table of a hundred
// thousand addresses is megabytes, far out of the CPU caches, and the
// probes are cache misses: it loads each key's first slot before it
// probes, independent loads that the CPU overlaps, so that the probes
// mostly hit the caches. The caller holds the lock that guards in.
func (in *interner) flush(b *internBatch) {
	in.reserve(b.n)
	var touch uint32
	for j := range b.n {
		b.hash[j] = addrKeyHash(&b.keys[j])
		touch |= in.slots[b.hash[j]>>in.shift].id
	}
	in.touched |= touch
	for j := range b.n {
		b.ids[j] = in.put(&b.keys[j], b.hash[j])
	}
}

// remap returns, for each address entry of s, its global id.
func (in *interner) remap(s *segment, dst []uint32) []uint32 {
	dst = slices.Grow(dst[:0], s.nAddr)[:s.nAddr]
	in.mu.Lock()
	defer in.mu.Unlock()
	var b internBatch
	for base := 0; base < len(dst); base += b.n {
		b.n = 0
		for j := base; j < len(dst) && !b.full(); j++ {
			b.add(canon(s.addrKey(uint32(j))))
		}
		in.flush(&b)
		copy(dst[base:], b.ids[:b.n])
	}
	return dst
}

// remapOf is remap, computed once per segment and interner: a Reader's
// queries share both (segcache.go). The slice is read-only.
func (in *interner) remapOf(s *segment) []uint32 {
	s.idsMu.Lock()
	defer s.idsMu.Unlock()
	if s.idsIn != in {
		s.ids, s.byID, s.idsIn = in.remap(s, nil), nil, in
	}
	return s.ids
}

// sortedOf is remapOf as (global id << 32 | entry) pairs in order of id,
// computed once per segment and interner. A loop that adds each entry's
// sums to its global id's walks the global arrays forwards through it,
// which the CPU prefetches, where the entries' own order is a cache miss
// per entry once the arrays outgrow the caches. The slice is read-only.
//
// All of it under the segment's lock: a query of a Reader whose interner
// was replaced meanwhile (segcache.go) may be reading the same segment
// with the old one, and each must get the ids of its own.
func (in *interner) sortedOf(s *segment) []uint64 {
	s.idsMu.Lock()
	defer s.idsMu.Unlock()
	if s.idsIn != in {
		s.ids, s.byID, s.idsIn = in.remap(s, nil), nil, in
	}
	if s.byID == nil {
		byID := make([]uint64, len(s.ids))
		top := uint32(0)
		for e, g := range s.ids {
			byID[e] = uint64(g)<<32 | uint64(e)
			top = max(top, g)
		}
		sortHigh(byID, top)
		s.byID = byID
	}
	return s.byID
}

// sortHigh sorts xs by their high 32 bits, each at most top, in passes of
// a radix sort, 11 bits a pass: two for up to 4 Mi ids, where a sort by
// comparisons took most of a first query's per-segment bookkeeping.
func sortHigh(xs []uint64, top uint32) {
	const digit = 11
	src, dst := xs, make([]uint64, len(xs))
	for shift := 32; shift < 32+bits.Len32(top); shift += digit {
		var at [1 << digit]int
		for _, x := range src {
			at[x>>shift&(1<<digit-1)]++
		}
		sum := 0
		for d, n := range at {
			at[d], sum = sum, sum+n
		}
		for _, x := range src {
			d := x >> shift & (1<<digit - 1)
			dst[at[d]] = x
			at[d]++
		}
		src, dst = dst, src
	}
	if len(xs) > 0 && &src[0] != &xs[0] {
		copy(xs, src)
	}
}

// rawOf is remapOf for the addresses as stored (not canonical), which
// the flow keys hold (distinct.go).
func (in *interner) rawOf(s *segment) []uint32 {
	s.idsMu.Lock()
	defer s.idsMu.Unlock()
	if s.rawIn != in {
		s.rawIDs, s.rawIn = in.intern16(s), in
	}
	return s.rawIDs
}

// intern16 interns every address entry of s as stored.
func (in *interner) intern16(s *segment) []uint32 {
	dst := make([]uint32, s.nAddr)
	in.mu.Lock()
	defer in.mu.Unlock()
	var b internBatch
	for base := 0; base < len(dst); base += b.n {
		b.n = 0
		for j := base; j < len(dst) && !b.full(); j++ {
			b.add(s.addrKey(uint32(j)))
		}
		in.flush(&b)
		copy(dst[base:], b.ids[:b.n])
	}
	return dst
}

// canon is canonical without building a netip.Addr for the entries that
// are their own canonical form, which is nearly all of them: every IPv6
// entry, and every IPv4 entry in the IPv4-mapped form flow.Key stores.
func canon(k addrKey) addrKey {
	switch k.fam {
	case famV6:
		return k
	case famV4:
		if le.Uint64(k.a[:8]) == 0 && le.Uint32(k.a[8:12]) == 0xffff0000 {
			return k
		}
	}
	return canonical(k)
}

// keysNow returns the keys interned so far, by id. The interner of a
// Reader is shared by its queries: a query takes the slice under the lock,
// and the keys in it never change.
func (in *interner) keysNow() []addrKey {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.keys
}

func (in *interner) size() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.keys)
}

// u64Map is an open-addressing map from uint64 keys to uint32 values,
// filled once (init, put) and then only read.
type u64Map struct {
	slots []u64Slot
	shift uint
}

type u64Slot struct {
	k uint64
	v uint32 // value+1; 0 marks an empty slot
}

// init sizes the map for n keys, at most half full.
func (m *u64Map) init(n int) {
	logSize := uint(max(4, bits.Len(uint(2*n))))
	m.slots = make([]u64Slot, 1<<logSize)
	m.shift = 64 - logSize
}

func (m *u64Map) put(k uint64, v uint32) {
	mask := uint64(len(m.slots) - 1)
	h := (k * hashMul) >> m.shift
	for m.slots[h].v != 0 && m.slots[h].k != k {
		h = (h + 1) & mask
	}
	m.slots[h] = u64Slot{k, v + 1}
}

// find returns the value of k, or noID.
func (m *u64Map) find(k uint64) uint32 {
	mask := uint64(len(m.slots) - 1)
	for h := (k * hashMul) >> m.shift; ; h = (h + 1) & mask {
		sl := &m.slots[h]
		if sl.v == 0 {
			return noID
		}
		if sl.k == k {
			return sl.v - 1
		}
	}
}

// nthBytes returns the n-th biggest bytes of the groups (0 if there are
// fewer than n); no flush may run concurrently.
func (p *partTable) nthBytes(n int) uint64 {
	h := &volumeHeap{}
	p.each(func(_ uint64, a *agg) {
		switch v := (volume{bytes: a.bytes}); {
		case h.Len() < n:
			heap.Push(h, v)
		case (*h)[0].less(v):
			(*h)[0] = v
			heap.Fix(h, 0)
		}
	})
	if h.Len() < n {
		return 0
	}
	return (*h)[0].bytes
}
