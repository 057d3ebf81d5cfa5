package datapath

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"loupe/internal/flow"
)

// Per-CPU flow tables are dense slot arrays behind an open-addressing
// index (bpf/flows/slots.h): in each half, each CPU owns a region of
// budget slots, filled in order, and a region of slotsFor(budget) index
// entries; a flow's entry sits at its home (a hash of its key) or at most
// slotProbes-1 entries after it, and a flow seen on several CPUs has a
// slot in each of their regions. Reading a half reads each CPU's filled
// slots, a chunk at a time: it costs the flows there are, not the regions'
// size. A flow no other CPU's index has its tag for (looked up in the
// index, mapped) is passed on at once; only the others wait to be merged
// by key, so that the memory a read needs is the flows several CPUs saw,
// not all the half's. Clearing zeroes the slots read and the index entries
// they name.

const (
	// slotHashVersion names slotHash in layout names: a pinned half is
	// read only by a build that hashes as the one that wrote it. 2: two
	// lanes.
	slotHashVersion = 2
	// slotProbes is SLOT_PROBES: how far past its home a flow's index
	// entry may sit.
	slotProbes = 64
	// slotSize is a slot's bytes.
	slotSize = int(unsafe.Sizeof(loupeFlowSlot{}))
	// slotChunk is the slots a read takes at a time: what it buffers.
	slotChunk = 4096
)

// slotsFor is the index entries each CPU's region has for a flow budget:
// twice as many, so that a CPU at its budget has its index half full,
// where a lookup finds its flow at its home entry or the next on average
// (linear probing), and an insert finds a free entry within slotProbes.
// Simulated (a full table, keys placed at random, 5 tables a case): at
// 65 536 flows, twice the entries put no flow past 31 entries; one and a
// half times needed 101, and refused 36 inserts a table at 32 probes.
// Rounded up to 32.
func slotsFor(budget int) int {
	n := max(2*budget, slotProbes)
	return (n + 31) / 32 * 32
}

// sizeSlots sizes the flow tables for kind: per-CPU slots holding budget
// flows per CPU and their index, or shared hash tables of budget flows
// (the ring buffer's kind writes neither). The tables a kind does not use
// are created at their smallest.
func sizeSlots(spec *ebpf.CollectionSpec, kind TableKind, budget, ncpu int) error {
	hashEntries, slots, index := budget, 1, 1
	cfgSlots := 0
	switch kind {
	case PerCPU:
		cfgSlots = slotsFor(budget)
		hashEntries, slots, index = 1, budget*ncpu, cfgSlots*ncpu
	case RingBuf:
		hashEntries = 1
	}
	for _, name := range []string{loupeMapFlowsA, loupeMapFlowsB} {
		t := spec.Maps[name]
		t.MaxEntries = uint32(hashEntries)
		t.Type = ebpf.Hash
	}
	for _, name := range []string{loupeMapFlowSlotsA, loupeMapFlowSlotsB} {
		spec.Maps[name].MaxEntries = uint32(slots)
	}
	for _, name := range []string{loupeMapFlowIndexA, loupeMapFlowIndexB} {
		spec.Maps[name].MaxEntries = uint32(index)
	}
	if err := spec.Variables[loupeVarCfgSlots].Set(uint32(cfgSlots)); err != nil {
		return fmt.Errorf("set slots: %w", err)
	}
	if err := spec.Variables[loupeVarCfgSlotBudget].Set(uint32(budget)); err != nil {
		return fmt.Errorf("set slot budget: %w", err)
	}
	return nil
}

// slotMix and slotHash are slot_mix and slot_hash of bpf/flows/slots.h:
// the key's 60 bytes as seven 8-byte words and a 4-byte one, in the
// machine's byte order, as the program reads them.
func slotMix(h, w uint64) uint64 {
	h ^= w
	h *= 0xbf58476d1ce4e5b9
	return h ^ h>>31
}

func slotHash(k *loupeFlowKey) uint64 {
	b := (*[unsafe.Sizeof(loupeFlowKey{})]byte)(unsafe.Pointer(k))
	lane := [2]uint64{0x9e3779b97f4a7c15, 0x94d049bb133111eb} // the even words, the odd ones
	for i := 0; i < 7; i++ {
		lane[i&1] = slotMix(lane[i&1], binary.NativeEndian.Uint64(b[i*8:]))
	}
	lane[1] = slotMix(lane[1], uint64(binary.NativeEndian.Uint32(b[56:])))
	return slotMix(lane[0], lane[1])
}

// slotHome is the home index entry of a key of hash h in a region of n
// entries.
func slotHome(h uint64, n int) int { return int((h >> 32) * uint64(n) >> 32) }

// slotHalf reads and clears one half of the per-CPU slot tables.
type slotHalf struct {
	m      *ebpf.Map // flow_slots_a or _b
	index  *ebpf.Map // flow_index_a or _b
	imap   []byte    // index, mapped
	imem   []uint64  // imap's entries
	fill   *ebpf.Map // flow_slots_fill
	idx    uint32    // the half: 0 (_a) or 1
	ncpu   int
	perCPU int // index entries in a CPU's region
	budget int // slots in a CPU's region: the flows it holds
}

func newSlotHalf(m, index, fill *ebpf.Map, idx uint32, ncpu, budget int) (*slotHalf, error) {
	h := &slotHalf{m: m, index: index, fill: fill, idx: idx, ncpu: ncpu, perCPU: slotsFor(budget), budget: budget}
	if want := uint32(ncpu * budget); m.MaxEntries() != want {
		return nil, fmt.Errorf("flow slots of %d entries, want %d", m.MaxEntries(), want)
	}
	if want := uint32(ncpu * h.perCPU); index.MaxEntries() != want {
		return nil, fmt.Errorf("flow index of %d entries, want %d", index.MaxEntries(), want)
	}
	// Read-only: the program alone writes it, and clear through the
	// map's syscalls.
	size := (ncpu*h.perCPU*8 + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
	b, err := unix.Mmap(index.FD(), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the flow index: %w", err)
	}
	h.imap = b
	h.imem = unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), ncpu*h.perCPU)
	return h, nil
}

// close unmaps the index.
func (h *slotHalf) close() error {
	if h == nil || h.imap == nil {
		return nil
	}
	h.imem = nil
	b := h.imap
	h.imap = nil
	return unix.Munmap(b)
}

// slotBuf is what reading a half reuses: every CPU's fill, a chunk of a
// CPU's slots, and the half's flows merged by key.
type slotBuf struct {
	fills []loupeSlotFill
	keys  []byte // array indexes, for the batch syscalls
	zero  []byte // a chunk of zeroed slots, for clearing
	slots []loupeFlowSlot
	// The flows that wait to be merged: flows and per (len(flows) ×
	// ncpu counters), found by their slotHash in seen, or by key in dup
	// when two of them share a hash (never seen: 64 bits).
	seen  map[uint64]int32
	dup   map[loupeFlowKey]int32
	flows []loupeFlowKey
	per   []loupeFlowStats
	stats []flow.Stats
}

func newSlotBuf(ncpu int) *slotBuf {
	return &slotBuf{fills: make([]loupeSlotFill, ncpu), keys: make([]byte, 4*slotChunk), zero: make([]byte, slotChunk*slotSize),
		slots: make([]loupeFlowSlot, slotChunk),
		seen:  make(map[uint64]int32), dup: make(map[loupeFlowKey]int32), stats: make([]flow.Stats, ncpu)}
}

// place returns where the waiting flow of key, of hash, is in b.flows,
// added if new.
func (b *slotBuf) place(hash uint64, key *loupeFlowKey, ncpu int) int {
	add := func() int32 {
		b.flows = append(b.flows, *key)
		for range ncpu {
			b.per = append(b.per, loupeFlowStats{})
		}
		return int32(len(b.flows) - 1)
	}
	j, ok := b.seen[hash]
	if !ok {
		j = add()
		b.seen[hash] = j
	} else if b.flows[j] != *key {
		if j, ok = b.dup[*key]; !ok {
			j = add()
			b.dup[*key] = j
		}
	}
	return int(j)
}

// filled returns how many slots each CPU filled in the half, in b.fills.
func (h *slotHalf) filled(b *slotBuf) error {
	if err := h.fill.Lookup(h.idx, &b.fills); err != nil {
		return fmt.Errorf("read flow slot counts: %w", err)
	}
	for c := range b.fills {
		if n := int(b.fills[c].Used); n > h.budget {
			return fmt.Errorf("CPU %d filled %d flow slots, more than its budget %d", c, n, h.budget)
		}
	}
	return nil
}

// readSlots reads n (at most slotChunk) of CPU c's slots, from its
// from-th, into b.slots.
func (h *slotHalf) readSlots(b *slotBuf, c, from, n int) ([]loupeFlowSlot, error) {
	start := c*h.budget + from
	vals := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b.slots))), n*slotSize)
	for done := 0; done < n; {
		got, err := arrayLookupBatch(h.m, uint32(start+done), b.keys[:4*(n-done)], vals[done*slotSize:])
		if err != nil {
			return nil, fmt.Errorf("read flow slots: %w", err)
		}
		if got == 0 {
			return nil, fmt.Errorf("read flow slots: %d of %d from %d", done, n, start)
		}
		done += got
	}
	return b.slots[:n], nil
}

// elsewhere reports whether a CPU other than c has, in its index, an
// entry of tag within the probe sequence from home: whether it may hold
// the flow (a tag can be another flow's too, rarely).
func (h *slotHalf) elsewhere(c, home int, tag uint32) bool {
	for o := range h.ncpu {
		if o == c {
			continue
		}
		region := h.imem[o*h.perCPU : (o+1)*h.perCPU]
		for i := range slotProbes {
			e := region[(home+i)%h.perCPU]
			if e == 0 {
				break // the end of the probe sequence: not there
			}
			if uint32(e>>32) == tag {
				return true
			}
		}
	}
	return false
}

// read calls fn once for every flow of the half with its counters on
// every CPU (zero where a CPU has no slot for it), and records the index
// entries of the slots it read in used. The index must not change
// meanwhile: the half is swapped out.
func (h *slotHalf) read(b *slotBuf, used *[]uint32, fn func(k *flow.Key, perCPU []flow.Stats)) (int, error) {
	*used = (*used)[:0]
	clear(b.seen)
	clear(b.dup)
	b.flows, b.per = b.flows[:0], b.per[:0]
	if err := h.filled(b); err != nil {
		return 0, err
	}
	total := 0
	for c := range h.ncpu {
		lo, hi := uint32(c*h.perCPU), uint32((c+1)*h.perCPU)
		for from, n := 0, int(b.fills[c].Used); from < n; from += slotChunk {
			slots, err := h.readSlots(b, c, from, min(slotChunk, n-from))
			if err != nil {
				return 0, err
			}
			for i := range slots {
				s := &slots[i]
				if s.Tag == 0 {
					// Zeroed by a clear that an agent's end cut
					// short: its flows were committed before it
					// began.
					continue
				}
				if s.Entry < lo || s.Entry >= hi {
					return 0, fmt.Errorf("CPU %d: flow slot %d names index entry %d, outside its region [%d, %d)", c, from+i, s.Entry, lo, hi)
				}
				*used = append(*used, s.Entry)
				hash := slotHash(&s.Key)
				if !h.elsewhere(c, slotHome(hash, h.perCPU), s.Tag) {
					// This CPU's alone: passed on now.
					var k flow.Key
					keyFromBPF(&k, &s.Key)
					clear(b.stats)
					statsFromBPF(&b.stats[c], &s.Stats)
					fn(&k, b.stats)
					total++
					continue
				}
				b.per[b.place(hash, &s.Key, h.ncpu)*h.ncpu+c] = s.Stats
			}
		}
	}
	for i := range b.flows {
		var k flow.Key
		keyFromBPF(&k, &b.flows[i])
		for c := range h.ncpu {
			statsFromBPF(&b.stats[c], &b.per[i*h.ncpu+c])
		}
		fn(&k, b.stats)
	}
	return total + len(b.flows), nil
}

// clear frees the index entries in used and every CPU's filled slots, or,
// with all, every entry and slot of the half; then sets every CPU's fill
// of the half to zero.
func (h *slotHalf) clear(b *slotBuf, used []uint32, all bool) error {
	// write zeroes the n entries of m from idx(0), idx(1), ...
	write := func(m *ebpf.Map, n int, idx func(i int) uint32) error {
		for done := 0; done < n; {
			k := min(n-done, slotChunk)
			for i := range k {
				binary.NativeEndian.PutUint32(b.keys[4*i:], idx(done+i))
			}
			if err := arrayUpdateBatch(m, b.keys, b.zero, k); err != nil {
				return err
			}
			done += k
		}
		return nil
	}
	if all {
		for _, m := range []*ebpf.Map{h.index, h.m} {
			if err := write(m, int(m.MaxEntries()), func(i int) uint32 { return uint32(i) }); err != nil {
				return fmt.Errorf("clear flow slots: %w", err)
			}
		}
	} else {
		if err := write(h.index, len(used), func(i int) uint32 { return used[i] }); err != nil {
			return fmt.Errorf("clear flow index: %w", err)
		}
		if err := h.filled(b); err != nil {
			return err
		}
		for c := range h.ncpu {
			start := uint32(c * h.budget)
			if err := write(h.m, int(b.fills[c].Used), func(i int) uint32 { return start + uint32(i) }); err != nil {
				return fmt.Errorf("clear flow slots: %w", err)
			}
		}
	}
	if err := h.fill.Update(h.idx, make([]loupeSlotFill, h.ncpu), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("clear flow slot counts: %w", err)
	}
	return nil
}
