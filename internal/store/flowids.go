package store

import (
	"context"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
)

// flowIDs gives every distinct flow key of a Reader's segments one dense
// id, and each segment the ids of its records, computed once per segment
// (prepare) and kept with it in the Reader's cache (segcache.go), as the
// addresses' ids are. Top's second pass counts a group's distinct flows
// with a bit per id (distinct.go): a warm query hashes no flow key, where
// an exact count over millions of flows of their own took a hash-set
// insert, far out of the CPU caches, per record.
//
// A key is a flow.Key packed without loss into two words: the two
// addresses as stored (the raw interner's ids, so that keys that differ
// only in the bytes of a non-IP or malformed address stay apart), the
// ports, and a context id that stands for the rest (MACs, interface index,
// EtherType, VLAN, direction, protocol), which takes few distinct values
// on any host. The keys live in partitions by hash, each a table under its
// own lock: a segment's keys are sorted into their partitions first, so
// that each table takes them while it is in the caches, and workers
// computing two segments meet on one lock only for the same partition.
type flowIDs struct {
	raw  *interner // the addresses as stored, whose ids the keys hold
	vlan int       // the VLAN column, or -1 if this format has none
	ctxs ctxInterner
	next atomic.Uint32 // ids handed out
	// prepMu makes one prepare at a time: a query that wants the ids of
	// segments another is preparing waits for them.
	prepMu sync.Mutex
	parts  [1 << partBits]struct {
		mu sync.Mutex
		t  flowTable
	}
}

func newFlowIDs(raw *interner) *flowIDs {
	fl := &flowIDs{raw: raw, vlan: -1}
	if c, ok := fieldCol("vlan_id"); ok {
		fl.vlan = c
	}
	return fl
}

// size returns the ids handed out so far: every id of a segment that
// prepare gave its ids is below it.
func (fl *flowIDs) size() int { return int(fl.next.Load()) }

// idsOf returns the flow id of every record of s, which prepare computes
// (now, if it has not). The slice is read-only.
func (fl *flowIDs) idsOf(s *segment) []uint32 {
	for {
		s.flowMu.Lock()
		ids, ok := s.flowIDs, s.flowIn == fl
		s.flowMu.Unlock()
		if ok {
			return ids
		}
		_ = fl.prepare(context.Background(), []*segment{s}) // fails only when its context ends
	}
}

// have reports whether every segment of segs has its ids in fl already.
func (fl *flowIDs) have(segs []*segment) bool {
	for _, s := range segs {
		s.flowMu.Lock()
		ok := s.flowIn == fl
		s.flowMu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// prepareRecords bounds the records prepare takes at once: their keys,
// 24 bytes each, are 96 MiB.
const prepareRecords = 4 << 20

// prepare gives the segments of segs that have no ids in fl theirs. It
// works partition by partition rather than segment by segment: a query's
// first look at a store computes the ids of millions of records, and its
// keys, inserted segment by segment, went to every partition's table in
// turn, each a cache miss once the tables outgrew the caches. Here the
// workers first sort the keys of many segments into their partitions, then
// take the partitions one at a time, each table in the caches while it
// takes all of its keys.
func (fl *flowIDs) prepare(ctx context.Context, segs []*segment) error {
	fl.prepMu.Lock()
	defer fl.prepMu.Unlock()
	var cold []*segment
	for _, s := range segs {
		s.flowMu.Lock()
		if s.flowIn != fl {
			cold = append(cold, s)
		}
		s.flowMu.Unlock()
	}
	left := 0
	for _, s := range cold {
		left += s.n
	}
	// The workers' key buffers, kept from one batch to the next: fresh
	// memory's page faults cost more than the keys' sorting.
	bufs := make([]*partKeys, maxWorkers())
	for w := range bufs {
		bufs[w] = &partKeys{}
	}
	for len(cold) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, records := 0, 0
		for ; m < len(cold) && (m == 0 || records+cold[m].n <= prepareRecords); m++ {
			records += cold[m].n
		}
		// Each table is sized for its share of every record left, as
		// if each were a flow of its own, up to twice its keys of this
		// batch: a table that grew from one batch to the next was
		// mapped afresh each time, and fresh memory's page faults cost
		// more than the keys' inserts. The bound keeps a store of long
		// flows, where most keys are not new, from reserving tables
		// for every record of it; the last batch's fit gives back what
		// the keys did not need.
		fl.prepareSome(cold[:m], bufs, left>>partBits+left>>(partBits+3)+64, m == len(cold))
		cold, left = cold[m:], left-records
	}
	return nil
}

// rowKey is a record's flow key and row; once its partition's table
// took it, id is the key's id.
type rowKey struct {
	k       flowKey
	row, id uint32
}

// partKeys are one worker's keys by partition, and where each of its
// segments' keys are in them.
type partKeys struct {
	p    [1 << partBits][]rowKey
	runs []keyRun
}

// keyRun says where a segment's keys are in a worker's partitions: from
// start to end in each.
type keyRun struct {
	seg        int
	start, end [1 << partBits]int32
}

// prepareSome is prepare for segs, which fit in the bound, with the
// workers' key buffers bufs and room in each table for expect keys; if
// last is set the tables then fit their keys.
func (fl *flowIDs) prepareSome(segs []*segment, bufs []*partKeys, expect int, last bool) {
	records := 0
	for _, s := range segs {
		records += s.n
	}
	per := records/len(bufs)>>partBits + records/len(bufs)>>(partBits+3) + 16 // the partitions are uneven; append copes with the rest
	var next atomic.Int64
	var wg sync.WaitGroup
	// The keys, segment by segment.
	for _, b := range bufs {
		b.runs = b.runs[:0]
		for p := range b.p {
			b.p[p] = slices.Grow(b.p[p][:0], per)
		}
		wg.Go(func() {
			var ctx ctxCache
			for {
				i := int(next.Add(1) - 1)
				if i >= len(segs) {
					return
				}
				b.runs = append(b.runs, keyRun{seg: i})
				run := &b.runs[len(b.runs)-1]
				for p := range b.p {
					run.start[p] = int32(len(b.p[p]))
				}
				fl.keys(segs[i], b, &ctx)
				for p := range b.p {
					run.end[p] = int32(len(b.p[p]))
				}
			}
		})
	}
	wg.Wait()
	// Their ids, partition by partition.
	next.Store(0)
	for range bufs {
		wg.Go(func() {
			for {
				p := int(next.Add(1) - 1)
				if p >= 1<<partBits {
					return
				}
				n := 0
				for _, b := range bufs {
					n += len(b.p[p])
				}
				pt := &fl.parts[p]
				pt.mu.Lock()
				pt.t.reserve(max(n, min(expect, 2*n)))
				for _, b := range bufs {
					pt.t.insertAll(b.p[p])
				}
				// The new keys' ids, handed out at once: an atomic add
				// per new key, on a line both CPUs write, was most of
				// the time the table took.
				base := fl.next.Add(uint32(len(pt.t.fresh))) - uint32(len(pt.t.fresh))
				for _, b := range bufs {
					for i := range b.p[p] {
						if id := b.p[p][i].id; id&provisional != 0 {
							b.p[p][i].id = base + id&^provisional
						}
					}
				}
				pt.t.settle(base)
				if last {
					pt.t.fit()
				}
				pt.mu.Unlock()
			}
		})
	}
	wg.Wait()
	// The ids into their segments, segment by segment: each segment's
	// ids are written where they stay in the caches.
	var runs []*keyRun
	var of []*partKeys
	for _, b := range bufs {
		for i := range b.runs {
			runs, of = append(runs, &b.runs[i]), append(of, b)
		}
	}
	next.Store(0)
	for range bufs {
		wg.Go(func() {
			for {
				r := int(next.Add(1) - 1)
				if r >= len(runs) {
					return
				}
				run, b := runs[r], of[r]
				s := segs[run.seg]
				ids := make([]uint32, s.n)
				for p := range b.p {
					for _, k := range b.p[p][run.start[p]:run.end[p]] {
						ids[k.row] = k.id
					}
				}
				s.flowMu.Lock()
				s.flowIDs, s.flowIn = ids, fl
				s.flowMu.Unlock()
			}
		})
	}
	wg.Wait()
}

// keys appends the flow keys of every record of s to their partitions in
// b.
func (fl *flowIDs) keys(s *segment, b *partKeys, ctx *ctxCache) {
	c := &s.cols
	raw := fl.raw.rawOf(s)
	var vlanCol []byte
	if fl.vlan >= 0 {
		vlanCol = c[fl.vlan]
	}
	ctx.reset(s, vlanCol)
	src, dst, sport, dport := c[cSrcAddr], c[cDstAddr], c[cSrcPort], c[cDstPort]
	for i := range s.n {
		k := flowKey{
			a: uint64(raw[le.Uint32(src[4*i:])])<<32 | uint64(raw[le.Uint32(dst[4*i:])]),
			b: uint64(ctx.id(i, &fl.ctxs)+1)<<32 | uint64(le.Uint16(sport[2*i:]))<<16 | uint64(le.Uint16(dport[2*i:])),
		}
		p := k.hash() >> (64 - partBits)
		b.p[p] = append(b.p[p], rowKey{k: k, row: uint32(i)})
	}
}

// flowKey is a flow.Key packed into ids. b is never zero (the context id
// is stored plus one), which marks a used slot.
type flowKey struct{ a, b uint64 }

func (k flowKey) hash() uint64 {
	x := k.a*hashMul ^ bits.RotateLeft64(k.b, 31)
	x ^= x >> 29
	x *= partMul
	return x ^ x>>32
}

// flowTable is an open-addressing map from flow keys to their ids.
type flowTable struct {
	slots   []flowSlot
	shift   uint
	used    int
	fresh   []uint32 // the slots of the keys new since the last settle
	touched uint32   // keeps insertAll's loads alive
}

type flowSlot struct {
	k  flowKey
	id uint32
}

// provisional marks the id of a key new to a table until settle: the
// key's index in fresh. Ids stay below it: a Reader's flow ids are
// replaced at twice the records its segments hold.
const provisional = 1 << 31

// insertAll gives each key its id, provisional if the key is new, in a
// table with room for them all (reserve). Like interner.flush, it loads
// each key's first slot before it probes, so that the probes mostly hit
// the caches.
func (t *flowTable) insertAll(keys []rowKey) {
	const batch = 16
	var at [batch]uint64
	for len(keys) > 0 {
		m := min(batch, len(keys))
		var touch uint32
		for j := range m {
			at[j] = (keys[j].k.hash() * hashMul) >> t.shift
			touch |= t.slots[at[j]].id
		}
		t.touched |= touch
		for j := range m {
			keys[j].id = t.put(keys[j].k, at[j])
		}
		keys = keys[m:]
	}
}

// settle gives the keys new since the last settle their ids, from base
// on, in the order they came.
func (t *flowTable) settle(base uint32) {
	for i, h := range t.fresh {
		t.slots[h].id = base + uint32(i)
	}
	t.fresh = t.fresh[:0]
}

// fitLog returns the log of the slots of a table of n keys, at most 3/4
// full.
func fitLog(n int) uint {
	logSize := uint(8)
	for 3<<logSize < 4*n {
		logSize++
	}
	return logSize
}

// reserve makes room for n more keys.
func (t *flowTable) reserve(n int) {
	if (t.used+n)*4 <= len(t.slots)*3 {
		return
	}
	if logSize := fitLog(t.used + n); len(t.slots) < 1<<logSize {
		t.rehash(logSize)
	}
}

// fit shrinks a table that reserve made far bigger than its keys need,
// most of them already in it.
func (t *flowTable) fit() {
	if logSize := fitLog(t.used); len(t.slots) > 2<<logSize {
		t.rehash(logSize)
	}
}

// rehash moves the keys to a table of 1<<logSize slots; no key may be
// provisional.
func (t *flowTable) rehash(logSize uint) {
	old := t.slots
	t.slots = populate(make([]flowSlot, 1<<logSize))
	t.shift = 64 - logSize
	mask := uint64(len(t.slots) - 1)
	for _, sl := range old {
		if sl.k.b == 0 {
			continue
		}
		h := (sl.k.hash() * hashMul) >> t.shift
		for ; t.slots[h].k.b != 0; h = (h + 1) & mask {
		}
		t.slots[h] = sl
	}
}

// put returns the id of k, whose first slot is h: provisional if k is
// new.
func (t *flowTable) put(k flowKey, h uint64) uint32 {
	mask := uint64(len(t.slots) - 1)
	for ; ; h = (h + 1) & mask {
		sl := &t.slots[h]
		if sl.k == k {
			return sl.id
		}
		if sl.k.b == 0 {
			*sl = flowSlot{k, provisional | uint32(len(t.fresh))}
			t.fresh = append(t.fresh, uint32(h))
			t.used++
			return sl.id
		}
	}
}

// flowCtx is the part of a flow.Key that is neither an address nor a
// port.
type flowCtx struct {
	srcMAC, dstMAC [6]byte
	ifindex        uint32
	ethType, vlan  uint16
	dir, proto     uint8
}

// ctxInterner gives each distinct flowCtx of a Reader one id. It is
// consulted once per distinct context per segment, not per record.
type ctxInterner struct {
	mu  sync.Mutex
	ids map[flowCtx]uint32
}

func (c *ctxInterner) id(x flowCtx) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = make(map[flowCtx]uint32)
	}
	id, ok := c.ids[x]
	if !ok {
		id = uint32(len(c.ids))
		c.ids[x] = id
	}
	return id
}

// ctxCache maps one segment's contexts, as a row holds them (MAC
// dictionary indices and the fixed columns), to a ctxInterner's ids. Its
// keys are three words, compared and hashed as such: an array key, copied
// whole, cost several times the lookup.
type ctxCache struct {
	slots []ctxSlot
	shift uint
	used  int
	// The segment's columns of the context.
	s                                        *segment
	smac, dmac, ifindex, ethType, vlan, dirs []byte
	protos                                   []byte
}

type ctxSlot struct {
	k0, k1 uint64
	k2     uint16
	id     uint32 // id+1; 0 marks an empty slot
}

func (c *ctxCache) reset(s *segment, vlanCol []byte) {
	if c.slots == nil {
		c.slots = make([]ctxSlot, 1<<8)
		c.shift = 64 - 8
	} else {
		clear(c.slots)
	}
	c.used = 0
	cols := &s.cols
	c.s, c.vlan = s, vlanCol
	c.smac, c.dmac, c.ifindex, c.ethType = cols[cSrcMAC], cols[cDstMAC], cols[cIfIndex], cols[cEthType]
	c.dirs, c.protos = cols[cDirection], cols[cProto]
}

// id returns the context id of row i of the segment of the last reset.
func (c *ctxCache) id(i int, in *ctxInterner) uint32 {
	smac, dmac := le.Uint32(c.smac[4*i:]), le.Uint32(c.dmac[4*i:])
	var vlan uint16
	if len(c.vlan) > 0 {
		vlan = le.Uint16(c.vlan[2*i:])
	}
	k0 := uint64(smac)<<32 | uint64(dmac)
	k1 := uint64(le.Uint32(c.ifindex[4*i:]))<<32 | uint64(le.Uint16(c.ethType[2*i:]))<<16 | uint64(vlan)
	k2 := uint16(c.dirs[i])<<8 | uint16(c.protos[i])
	if c.used*4 >= len(c.slots)*3 {
		c.grow()
	}
	mask := uint64(len(c.slots) - 1)
	for h := (ctxHash(k0, k1, k2) * hashMul) >> c.shift; ; h = (h + 1) & mask {
		sl := &c.slots[h]
		if sl.id == 0 {
			id := in.id(flowCtx{
				srcMAC: c.s.mac(smac), dstMAC: c.s.mac(dmac),
				ifindex: uint32(k1 >> 32), ethType: uint16(k1 >> 16), vlan: vlan,
				dir: uint8(k2 >> 8), proto: uint8(k2),
			})
			*sl = ctxSlot{k0: k0, k1: k1, k2: k2, id: id + 1}
			c.used++
			return id
		}
		if sl.k0 == k0 && sl.k1 == k1 && sl.k2 == k2 {
			return sl.id - 1
		}
	}
}

func ctxHash(k0, k1 uint64, k2 uint16) uint64 {
	return (k0*hashMul^k1)*partMul ^ uint64(k2)
}

func (c *ctxCache) grow() {
	old := c.slots
	logSize := 64 - c.shift + 1
	c.slots = make([]ctxSlot, 1<<logSize)
	c.shift = 64 - logSize
	mask := uint64(len(c.slots) - 1)
	for _, sl := range old {
		if sl.id == 0 {
			continue
		}
		h := (ctxHash(sl.k0, sl.k1, sl.k2) * hashMul) >> c.shift
		for ; c.slots[h].id != 0; h = (h + 1) & mask {
		}
		c.slots[h] = sl
	}
}
