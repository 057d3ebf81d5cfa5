package datapath

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
)

// Per-CPU flow tables are slot arrays (bpf/flows/slots.h): each CPU owns a
// region of perCPU slots in each half's array, a flow sits at its home
// slot (a hash of its key) or at most slotProbes-1 slots after it, and a
// flow seen on several CPUs has a slot in each of their regions. The
// program lists the slots each CPU filled (flow_slot_list), so reading a
// half reads the slots listed, through the array's memory mapping, and
// merges them by key: a drain costs the flows there are, not the regions'
// size (twice the budget, and at the default budget 16 MiB a CPU and
// half), and clearing frees those slots alone.

const (
	// slotHashVersion names slotHash in layout names: a pinned half is
	// read only by a build that hashes as the one that wrote it.
	slotHashVersion = 1
	// slotProbes is SLOT_PROBES: how far past its home a flow may sit.
	slotProbes = 64
	// slotSize is a slot's bytes, in the array and its mapping.
	slotSize = int(unsafe.Sizeof(loupeFlowSlot{}))
	// slotsPerPage is the slots in a page: regions start on one.
	slotsPerPage = 4096 / slotSize
)

// slotsFor is the slots each CPU's region has for a flow budget: twice as
// many, so that a table at its budget is half full, where a lookup finds
// its flow at its home slot or the next on average (linear probing), and
// an insert finds a free slot within slotProbes. Simulated (a full table,
// keys placed at random, 5 tables a case): at 65 536 flows, twice the
// slots put no flow past 31 slots; one and a half times needed 101, and
// refused 36 inserts a table at 32 probes. Rounded up to a page of slots.
func slotsFor(budget int) int {
	n := max(2*budget, slotProbes)
	return (n + slotsPerPage - 1) / slotsPerPage * slotsPerPage
}

// sizeSlots sizes the flow tables for kind: per-CPU slot arrays holding
// budget flows per CPU, or shared hash tables of budget flows (the ring
// buffer's kind writes neither). The tables a kind does not use are
// created at their smallest.
func sizeSlots(spec *ebpf.CollectionSpec, kind TableKind, budget, ncpu int) error {
	hashEntries, slots := budget, 0
	switch kind {
	case PerCPU:
		hashEntries, slots = 1, slotsFor(budget)
	case RingBuf:
		hashEntries = 1
	}
	for _, name := range []string{loupeMapFlowsA, loupeMapFlowsB} {
		t := spec.Maps[name]
		t.MaxEntries = uint32(hashEntries)
		t.Type = ebpf.Hash
	}
	for _, name := range []string{loupeMapFlowSlotsA, loupeMapFlowSlotsB} {
		spec.Maps[name].MaxEntries = uint32(max(slots*ncpu, 1))
	}
	list := 1
	if slots > 0 {
		list = ncpu * 2 * budget
	}
	spec.Maps[loupeMapFlowSlotList].MaxEntries = uint32(list)
	if err := spec.Variables[loupeVarCfgSlots].Set(uint32(slots)); err != nil {
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
	h := uint64(0x9e3779b97f4a7c15)
	for i := 0; i < 7; i++ {
		h = slotMix(h, binary.NativeEndian.Uint64(b[i*8:]))
	}
	return slotMix(h, uint64(binary.NativeEndian.Uint32(b[56:])))
}

// slotHome is the home slot of a key of hash h in a region of n slots.
func slotHome(h uint64, n int) int { return int((h >> 32) * uint64(n) >> 32) }

// slotHalf reads and clears one half of the per-CPU slot tables.
type slotHalf struct {
	m      *ebpf.Map
	mem    *ebpf.Memory // m, mapped
	fill   *ebpf.Map    // flow_slots_fill
	list   *ebpf.Map    // flow_slot_list
	idx    uint32       // the half: 0 (flow_slots_a) or 1
	ncpu   int
	perCPU int // slots in a CPU's region
	budget int // flows a CPU holds: the length of its list
}

func newSlotHalf(m, fill, list *ebpf.Map, idx uint32, ncpu, budget int) (*slotHalf, error) {
	mem, err := m.Memory()
	if err != nil {
		return nil, fmt.Errorf("map the flow slots: %w", err)
	}
	h := &slotHalf{m: m, mem: mem, fill: fill, list: list, idx: idx, ncpu: ncpu, perCPU: slotsFor(budget), budget: budget}
	if want := uint32(ncpu * 2 * budget); list.MaxEntries() != want {
		return nil, fmt.Errorf("flow slot list of %d entries, want %d", list.MaxEntries(), want)
	}
	if want := uint32(ncpu * h.perCPU); m.MaxEntries() != want {
		return nil, fmt.Errorf("flow slots of %d entries, want %d", m.MaxEntries(), want)
	}
	return h, nil
}

// slotBuf is what reading a half reuses: every CPU's fill and list, and
// the half's flows merged by key.
type slotBuf struct {
	fills []loupeSlotFill
	keys  []byte // array indexes, for the batch syscall
	refs  []byte // a CPU's list: slot indexes
	slot  loupeFlowSlot
	seen  map[loupeFlowKey]int
	flows []loupeFlowKey
	per   []loupeFlowStats // len(flows) × ncpu
	stats []flow.Stats
}

func newSlotBuf(ncpu, budget int) *slotBuf {
	return &slotBuf{fills: make([]loupeSlotFill, ncpu), keys: make([]byte, 4*budget), refs: make([]byte, 4*budget),
		seen: make(map[loupeFlowKey]int), stats: make([]flow.Stats, ncpu)}
}

// readSlot copies slot i of the half into s.
func (h *slotHalf) readSlot(i uint32, s *loupeFlowSlot) error {
	b := unsafe.Slice((*byte)(unsafe.Pointer(s)), slotSize)
	if _, err := h.mem.ReadAt(b, int64(i)*int64(slotSize)); err != nil {
		return fmt.Errorf("read flow slot %d: %w", i, err)
	}
	return nil
}

// listed returns the slots CPU c filled in the half, in b.refs.
func (h *slotHalf) listed(b *slotBuf, c int) ([]byte, error) {
	n := int(b.fills[c].Used)
	if n > h.budget {
		return nil, fmt.Errorf("CPU %d filled %d flow slots, more than its budget %d", c, n, h.budget)
	}
	start := (c*2 + int(h.idx)) * h.budget
	for done := 0; done < n; {
		got, err := arrayLookupBatch(h.list, uint32(start+done), b.keys[:4*(n-done)], b.refs[4*done:])
		if err != nil {
			return nil, fmt.Errorf("read flow slot list: %w", err)
		}
		if got == 0 {
			return nil, fmt.Errorf("read flow slot list: %d of %d from %d", done, n, start)
		}
		done += got
	}
	return b.refs[:4*n], nil
}

// read calls fn once for every flow of the half with its counters on
// every CPU (zero where a CPU has no slot for it), and records the slots
// it read in used.
func (h *slotHalf) read(b *slotBuf, used *[]uint32, fn func(k *flow.Key, perCPU []flow.Stats)) (int, error) {
	*used = (*used)[:0]
	clear(b.seen)
	b.flows, b.per = b.flows[:0], b.per[:0]
	if err := h.fill.Lookup(h.idx, &b.fills); err != nil {
		return 0, fmt.Errorf("read flow slot counts: %w", err)
	}
	for c := range h.ncpu {
		refs, err := h.listed(b, c)
		if err != nil {
			return 0, err
		}
		lo, hi := uint32(c*h.perCPU), uint32((c+1)*h.perCPU)
		for i := 0; i < len(refs); i += 4 {
			at := binary.NativeEndian.Uint32(refs[i:])
			if at < lo || at >= hi {
				return 0, fmt.Errorf("CPU %d listed flow slot %d, outside its region [%d, %d)", c, at, lo, hi)
			}
			s := &b.slot
			if err := h.readSlot(at, s); err != nil {
				return 0, err
			}
			*used = append(*used, at)
			if s.Tag == 0 {
				continue // a slot listed but not filled: never written so
			}
			j, ok := b.seen[s.Key]
			if !ok {
				j = len(b.flows)
				b.seen[s.Key] = j
				b.flows = append(b.flows, s.Key)
				for range h.ncpu {
					b.per = append(b.per, loupeFlowStats{})
				}
			}
			b.per[j*h.ncpu+c] = s.Stats
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
	return len(b.flows), nil
}

// clear frees the slots in used, or, with all, every slot of the half;
// then sets every CPU's fill of the half to zero. A slot is free when its
// tag is: an insert writes all of it.
func (h *slotHalf) clear(used []uint32, all bool) error {
	var zero [slotSize]byte
	if all {
		for off := int64(0); off < int64(h.mem.Size()); off += int64(len(zero)) {
			if _, err := h.mem.WriteAt(zero[:], off); err != nil {
				return fmt.Errorf("clear flow slots: %w", err)
			}
		}
	} else {
		for _, at := range used {
			if _, err := h.mem.WriteAt(zero[:], int64(at)*int64(slotSize)); err != nil {
				return fmt.Errorf("clear flow slot %d: %w", at, err)
			}
		}
	}
	if err := h.fill.Update(h.idx, make([]loupeSlotFill, h.ncpu), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("clear flow slot counts: %w", err)
	}
	return nil
}
