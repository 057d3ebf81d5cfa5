package store

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// keySet is the set of flow keys of Top's second pass, in partitions by
// hash, each a table under its own lock. Workers buffer keys per partition
// and fold each buffer into its partition's table (fold), which counts the
// keys new to the set.
//
// How often they fold depends on the keys. Where a flow spans many
// records, as on any real host (a flow evicted every 5 s for an hour is
// 720 records), the set stays small and folding every flushEvery keys
// keeps the buffers small. Where nearly every record is a flow of its own,
// the set is as big as the records, far out of the CPU caches: a key
// folded into it costs a cache miss, and its growth a rehash and fresh
// memory. So a worker whose buffer fills for the first time counts the
// distinct keys in it first (mostlyNew); if most are distinct, or a fold
// finds most of its keys new, the workers stop folding and keep their
// keys, up to budget in all, and finish takes them one partition at a
// time, in a table sized once that stays in the caches while it takes
// them.
type keySet struct {
	sh    *flowShared
	parts [1 << partBits]struct {
		mu sync.Mutex
		t  keyTable
	}
	limits    keyLimits
	deferring atomic.Bool
	buffered  atomic.Int64 // keys in the workers' buffers
}

// keyLimits are the thresholds of a keySet.
type keyLimits struct {
	flushEvery int       // keys a worker buffers before it folds them (while it folds)
	budget     int       // keys the workers hold in all instead of folding
	paths      *keyPaths // for tests: filled in as the set goes
}

// keyPaths says which ways a keySet took.
type keyPaths struct {
	Folds    atomic.Int64 // folds while the workers read
	Deferred atomic.Bool  // the workers held their keys for finish
}

// Top's keyLimits: a worker's buffer takes 16 MiB before it folds, and
// the workers hold 256 MiB at most.
const (
	flushEvery  = 1 << 20
	deferBudget = 1 << 24
)

// keyBuf is one worker's keys not yet in the set, by partition.
type keyBuf struct {
	p      [1 << partBits][]flowKey
	n      int  // keys held
	sized  int  // the keys the partitions have room for, spread evenly
	tested bool // mostlyNew ran
}

func (b *keyBuf) add(k flowKey) {
	i := k.hash() >> (64 - partBits)
	b.p[i] = append(b.p[i], k)
}

// reserve gives the partitions room for the keys the worker will hold at
// most: its share of the candidates' records, up to what it buffers before
// a fold while the set folds, or its share of the budget once the set
// defers. Sized once or twice, the buffers do not grow by copying.
func (b *keyBuf) reserve(s *keySet) {
	want := int(s.sh.records) / maxWorkers()
	if s.deferring.Load() {
		want = min(want, s.limits.budget/maxWorkers())
	} else {
		want = min(want, s.limits.flushEvery)
	}
	if want <= b.sized {
		return
	}
	b.sized = want
	per := want/len(b.p) + 1
	per += per/8 + 64 // the partitions are uneven; append copes with the rest
	for i := range b.p {
		if cap(b.p[i]) < per {
			p := make([]flowKey, len(b.p[i]), per)
			copy(p, b.p[i])
			b.p[i] = p
		}
	}
}

// added notes n keys a worker added to b, and folds b if it is time.
func (s *keySet) added(b *keyBuf, flows []uint64, n int) {
	b.n += n
	switch {
	case s.buffered.Add(int64(n)) > int64(s.limits.budget):
	case b.n < s.limits.flushEvery || s.deferring.Load():
		return
	case !b.tested && b.mostlyNew():
		s.deferred()
		return
	}
	s.fold(b, flows)
}

func (s *keySet) deferred() {
	s.deferring.Store(true)
	if p := s.limits.paths; p != nil {
		p.Deferred.Store(true)
	}
}

// mostlyNew reports whether most keys in b are distinct.
func (b *keyBuf) mostlyNew() bool {
	b.tested = true
	var t keyTable
	distinct := 0
	for _, p := range b.p {
		t.reset(len(p))
		for _, k := range p {
			t.put(k, (k.hash()*hashMul)>>t.shift)
		}
		distinct += t.used
	}
	return 2*distinct > b.n
}

// fold adds a worker's buffered keys to the set, and counts in flows, per
// candidate, those that were new.
func (s *keySet) fold(b *keyBuf, flows []uint64) {
	sh := s.sh
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	sh.ctxs.mu.RLock()
	defer sh.ctxs.mu.RUnlock()
	fresh := 0
	for i := range b.p {
		if len(b.p[i]) == 0 {
			continue
		}
		p := &s.parts[i]
		p.mu.Lock()
		fresh += p.t.insertAll(b.p[i], sh, flows)
		p.mu.Unlock()
		b.p[i] = b.p[i][:0]
	}
	s.buffered.Add(-int64(b.n))
	// Most keys new: the set grows with the records.
	if 2*fresh > b.n {
		s.deferred()
	}
	if p := s.limits.paths; p != nil {
		p.Folds.Add(1)
	}
	b.n = 0
}

// finish adds what the workers still hold, one partition at a time, on
// a goroutine per worker, each counting into its worker's flows. It runs
// once the workers are done.
func (s *keySet) finish(ws []*flowWorker) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			var t keyTable
			for {
				i := int(next.Add(1) - 1)
				if i >= len(s.parts) {
					return
				}
				// The partition's table, with room for every key held:
				// sized once, and in the caches while it takes them.
				old := &s.parts[i].t
				n := old.used
				for _, o := range ws {
					n += len(o.keys.p[i])
				}
				t.reset(n)
				for _, k := range old.slots {
					if k.b != 0 {
						t.put(k, (k.hash()*hashMul)>>t.shift)
					}
				}
				*old = keyTable{}
				for _, o := range ws {
					t.insertAll(o.keys.p[i], s.sh, w.flows)
					o.keys.p[i] = nil
				}
			}
		})
	}
	wg.Wait()
}

// flowKey is a flow.Key packed into query-wide ids. b is never zero (the
// context id is stored plus one), which marks a used slot.
type flowKey struct{ a, b uint64 }

func (k flowKey) hash() uint64 {
	x := k.a*hashMul ^ bits.RotateLeft64(k.b, 31)
	x ^= x >> 29
	x *= partMul
	return x ^ x>>32
}

// keyTable is an open-addressing set of flow keys.
type keyTable struct {
	slots   []flowKey
	shift   uint
	used    int
	touched uint64 // keeps insertAll's loads alive
}

// reset empties the table and sizes it for n keys, at most 3/4 full,
// reusing its memory if it is big enough.
func (t *keyTable) reset(n int) {
	logSize := uint(8)
	for 3<<logSize < 4*n {
		logSize++
	}
	if len(t.slots) >= 1<<logSize && len(t.slots) <= 4<<logSize {
		clear(t.slots)
		logSize = uint(bits.Len(uint(len(t.slots))) - 1)
	} else {
		t.slots = make([]flowKey, 1<<logSize)
	}
	t.shift = 64 - logSize
	t.used = 0
}

// insertAll inserts keys, and counts in flows, per candidate, those that
// were new; it returns how many were. Like interner.flush, it loads each
// key's first slot before it probes, so that the probes mostly hit the
// caches.
func (t *keyTable) insertAll(keys []flowKey, sh *flowShared, flows []uint64) (fresh int) {
	const batch = 16
	var at [batch]uint64
	for len(keys) > 0 {
		m := min(batch, len(keys))
		if (t.used+m)*4 > len(t.slots)*3 {
			t.grow(t.used + m)
		}
		var touch uint64
		for j := range m {
			at[j] = (keys[j].hash() * hashMul) >> t.shift
			touch |= t.slots[at[j]].b
		}
		t.touched |= touch
		for j := range m {
			if t.put(keys[j], at[j]) {
				fresh++
				if c := sh.candOf(keys[j]); int(c) < len(flows) {
					flows[c]++
				}
			}
		}
		keys = keys[m:]
	}
	return fresh
}

// grow makes room for n keys, doubling the table as often as needed.
func (t *keyTable) grow(n int) {
	old := t.slots
	logSize := uint(8)
	if old != nil {
		logSize = 64 - t.shift + 1
	}
	for 3<<logSize < 4*n {
		logSize++
	}
	t.slots = make([]flowKey, 1<<logSize)
	t.shift = 64 - logSize
	t.used = 0
	for _, k := range old {
		if k.b != 0 {
			t.put(k, (k.hash()*hashMul)>>t.shift)
		}
	}
}

// put adds k, whose first slot is h, to a table with room for it, and
// reports whether it was new.
func (t *keyTable) put(k flowKey, h uint64) bool {
	mask := uint64(len(t.slots) - 1)
	for ; ; h = (h + 1) & mask {
		sl := &t.slots[h]
		if *sl == k {
			return false
		}
		if sl.b == 0 {
			*sl = k
			t.used++
			return true
		}
	}
}
