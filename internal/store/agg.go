package store

import (
	"slices"
	"sync"
)

// This file holds the aggregation structures behind Top. They are built for
// the per-record loop: no Go maps there, and (for high-cardinality keys such
// as address pairs) radix partitioning so that the hash tables a record
// touches stay small enough for the CPU caches.

type agg struct{ packets, bytes, flows uint64 }

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
	slots []slot
	shift uint
	used  int
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
	k++
	mask := uint64(len(t.slots) - 1)
	for h := (k * hashMul) >> t.shift; ; h = (h + 1) & mask {
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
		for _, e := range b[i] {
			a := pt.t.get(e.key)
			a.bytes += e.bytes
			a.packets += e.packets
			a.flows += e.flows
		}
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
}

type internSlot struct {
	hi, lo uint64
	fam    uint32
	id     uint32 // id+1; 0 marks an empty slot
}

func addrHash(hi, lo uint64, fam uint32) uint64 {
	h := (hi ^ uint64(fam)<<56) * hashMul
	return (h ^ lo) * partMul
}

func (in *interner) grow() {
	old := in.slots
	logSize := uint(12)
	if old != nil {
		logSize = 64 - in.shift + 1
	}
	in.slots = make([]internSlot, 1<<logSize)
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
	if len(in.keys)*2 >= len(in.slots) {
		in.grow()
	}
	hi, lo := le.Uint64(k.a[:8]), le.Uint64(k.a[8:])
	fam := uint32(k.fam)
	mask := uint64(len(in.slots) - 1)
	for h := addrHash(hi, lo, fam) >> in.shift; ; h = (h + 1) & mask {
		sl := &in.slots[h]
		if sl.id == 0 {
			*sl = internSlot{hi, lo, fam, uint32(len(in.keys)) + 1}
			in.keys = append(in.keys, k)
			return sl.id - 1
		}
		if sl.hi == hi && sl.lo == lo && sl.fam == fam {
			return sl.id - 1
		}
	}
}

// remap returns, for each address entry of s, its global id.
func (in *interner) remap(s *segment, dst []uint32) []uint32 {
	dst = slices.Grow(dst[:0], s.nAddr)[:s.nAddr]
	in.mu.Lock()
	defer in.mu.Unlock()
	for i := range dst {
		dst[i] = in.intern(canonical(s.addrKey(uint32(i))))
	}
	return dst
}

// rawIDs returns, for each address entry of s, an id of the entry as
// stored, given its canonical ids: the canonical id where the two are the
// same (every valid IPv4 and IPv6 entry), else 1<<31 plus the entry's id in
// in, which interns the others (non-IP and malformed entries) as they are.
func (in *interner) rawIDs(s *segment, canon, dst []uint32) []uint32 {
	dst = slices.Grow(dst[:0], s.nAddr)[:s.nAddr]
	for i := range dst {
		k := s.addrKey(uint32(i))
		if c := canonical(k); c == k {
			dst[i] = canon[i]
			continue
		}
		in.mu.Lock()
		dst[i] = 1<<31 | in.intern(k)
		in.mu.Unlock()
	}
	return dst
}

func (in *interner) size() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.keys)
}
