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
// the set is as big as the records, far out of the CPU caches, and a key
// folded into it costs a cache miss, and its growth costs a rehash and
// fresh memory: then, once a fold finds most of its keys new, the workers
// stop folding and keep their keys, up to deferBudget in all, and finish
// takes them one partition at a time, in a table sized once that stays in
// the caches while it takes them.
type keySet struct {
	sh    *flowShared
	parts [1 << partBits]struct {
		mu sync.Mutex
		t  keyTable
	}
	deferring atomic.Bool
	buffered  atomic.Int64 // keys in the workers' buffers
	seen      atomic.Int64 // keys handed to the set so far
}

// flushEvery is how many keys a worker buffers before it folds them into
// the set (while it folds at all).
const flushEvery = 1 << 20

// deferBudget bounds the keys the workers hold instead of folding: 16
// bytes each.
const deferBudget = 1 << 24

// keyBuf is one worker's keys not yet in the set, by partition.
type keyBuf struct {
	p     [1 << partBits][]flowKey
	n     int  // keys held
	sized bool // the partitions have room for the worker's share of the keys left
}

func (b *keyBuf) add(k flowKey) {
	i := k.hash() >> (64 - partBits)
	b.p[i] = append(b.p[i], k)
}

// reserve makes room for n more keys. Once the set defers, it gives each
// partition room for the worker's share of all the keys still to come,
// from the first pass's record counts, rather than let them grow by
// copying.
func (b *keyBuf) reserve(sh *flowShared, n int) {
	if b.sized || !sh.keys.deferring.Load() {
		return
	}
	b.sized = true
	left := int64(sh.records) - sh.keys.seen.Load()
	per := int(min(left, deferBudget)/int64(maxWorkers())/int64(len(b.p))) + 1
	per += per/8 + 64 // the partitions are uneven; append copes with the rest
	for i := range b.p {
		if cap(b.p[i])-len(b.p[i]) < per {
			p := make([]flowKey, len(b.p[i]), len(b.p[i])+per)
			copy(p, b.p[i])
			b.p[i] = p
		}
	}
}

// added notes n keys a worker added to b, and folds b if it is time.
func (s *keySet) added(b *keyBuf, flows []uint64, n int) {
	b.n += n
	s.seen.Add(int64(n))
	if s.buffered.Add(int64(n)) > deferBudget || (b.n >= flushEvery && !s.deferring.Load()) {
		s.fold(b, flows)
	}
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
	s.deferring.Store(2*fresh > b.n)
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
