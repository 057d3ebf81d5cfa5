package store

import (
	"math/bits"
	"sync"

	"loupe/internal/flow"
)

// Top counts distinct flows exactly: every matching record's flow.Key goes
// into one set shared by the workers, and a group's flow count goes up by
// one when a key enters the set for the first time. The key is packed
// without loss into two words of query-wide ids: the two addresses (as
// stored, so that keys that differ only in the bytes of a non-IP or
// malformed address stay apart), the ports, and a context id that stands
// for the rest (MACs, interface index, EtherType, VLAN, direction,
// protocol), which takes few distinct values on any host.

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
	slots []flowKey
	shift uint
	used  int
}

// insert adds k and reports whether it was new.
func (t *keyTable) insert(k flowKey) bool {
	if t.used*4 >= len(t.slots)*3 {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for h := (k.hash() * hashMul) >> t.shift; ; h = (h + 1) & mask {
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

func (t *keyTable) grow() {
	old := t.slots
	logSize := uint(8)
	if old != nil {
		logSize = 64 - t.shift + 1
	}
	t.slots = make([]flowKey, 1<<logSize)
	t.shift = 64 - logSize
	t.used = 0
	for _, k := range old {
		if k.b != 0 {
			t.insert(k)
		}
	}
}

// keySet is the set of flow keys, in partitions for the same reason as
// partTable: each worker appends keys to per-partition buffers and folds a
// buffer into its partition under the partition's lock.
type keySet struct {
	parts [1 << partBits]struct {
		mu sync.Mutex
		t  keyTable
	}
}

type keyPending struct {
	k     flowKey
	group uint64
}

// keyBuf is one worker's keys not yet in the set, with their groups.
type keyBuf [1 << partBits][]keyPending

func (b *keyBuf) add(k flowKey, group uint64) {
	i := k.hash() >> (64 - partBits)
	b[i] = append(b[i], keyPending{k, group})
}

// flush adds the buffered keys to the set, and appends to fresh the group
// of each key that was not in it yet.
func (s *keySet) flush(b *keyBuf, fresh []uint64) []uint64 {
	for i := range b {
		if len(b[i]) == 0 {
			continue
		}
		p := &s.parts[i]
		p.mu.Lock()
		for _, e := range b[i] {
			if p.t.insert(e.k) {
				fresh = append(fresh, e.group)
			}
		}
		p.mu.Unlock()
		b[i] = b[i][:0]
	}
	return fresh
}

// flowCtx is the part of a flow.Key that is neither an address nor a
// port.
type flowCtx struct {
	srcMAC, dstMAC [6]byte
	ifindex        uint32
	ethType, vlan  uint16
	dir, proto     uint8
}

// ctxInterner gives each distinct flowCtx of a query one id. It is
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
// dictionary indices and the fixed columns), to query-wide ids.
type ctxCache struct {
	slots []ctxSlot
	shift uint
	used  int
}

type ctxSlot struct {
	k  [3]uint64
	id uint32 // id+1; 0 marks an empty slot
}

func (c *ctxCache) reset() {
	if c.slots == nil {
		c.slots = make([]ctxSlot, 1<<8)
		c.shift = 64 - 8
	} else {
		clear(c.slots)
	}
	c.used = 0
}

// id returns the context id of row i of s.
func (c *ctxCache) id(s *segment, i int, vlanCol []byte, in *ctxInterner) uint32 {
	cols := &s.cols
	smac, dmac := le.Uint32(cols[cSrcMAC][4*i:]), le.Uint32(cols[cDstMAC][4*i:])
	var vlan uint16
	if vlanCol != nil {
		vlan = le.Uint16(vlanCol[2*i:])
	}
	k := [3]uint64{
		uint64(smac)<<32 | uint64(dmac),
		uint64(le.Uint32(cols[cIfIndex][4*i:]))<<32 | uint64(le.Uint16(cols[cEthType][2*i:]))<<16 | uint64(vlan),
		uint64(cols[cDirection][i])<<8 | uint64(cols[cProto][i]),
	}
	if c.used*4 >= len(c.slots)*3 {
		c.grow()
	}
	mask := uint64(len(c.slots) - 1)
	h := ((k[0]*hashMul ^ k[1]) * partMul) ^ k[2]
	for h = (h * hashMul) >> c.shift; ; h = (h + 1) & mask {
		sl := &c.slots[h]
		if sl.id != 0 && sl.k == k {
			return sl.id - 1
		}
		if sl.id == 0 {
			id := in.id(flowCtx{
				srcMAC: s.mac(smac), dstMAC: s.mac(dmac),
				ifindex: uint32(k[1] >> 32), ethType: uint16(k[1] >> 16), vlan: vlan,
				dir: uint8(k[2] >> 8), proto: uint8(k[2]),
			})
			*sl = ctxSlot{k, id + 1}
			c.used++
			return id
		}
	}
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
		h := ((sl.k[0]*hashMul ^ sl.k[1]) * partMul) ^ sl.k[2]
		for h = (h * hashMul) >> c.shift; c.slots[h].id != 0; h = (h + 1) & mask {
		}
		c.slots[h] = sl
	}
}

// fieldCol returns the column that holds flow field name in this version
// of the segment format, if there is one: columns are the fields' store
// kinds in flow's registry, so a column added there is found here.
func fieldCol(name string) (int, bool) {
	f, ok := flow.FieldByName(name)
	if !ok || f.Wire.Store < 1 || f.Wire.Store > numCols {
		return 0, false
	}
	return int(f.Wire.Store) - 1, true
}
