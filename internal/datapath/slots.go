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
// flow seen on several CPUs has a slot in each of their regions. Reading a
// half merges those slots by key, one window of home slots at a time: a
// flow belongs to the window its home slot is in, and its slots on every
// CPU lie between its home and slotProbes slots later, so a window read
// with slotProbes slots past its end holds every slot of its flows, and
// the memory a read needs is a window's, whatever the table's size.

const (
	// slotHashVersion names slotHash in layout names: a pinned half is
	// read only by a build that hashes as the one that wrote it.
	slotHashVersion = 1
	// slotProbes is SLOT_PROBES: how far past its home a flow may sit.
	slotProbes = 64
	// slotWindow is the home slots a read merges at a time, per CPU.
	slotWindow = 4096
	// slotsPerPage is the slots in a page: regions start on one.
	slotsPerPage = 4096 / int(unsafe.Sizeof(loupeFlowSlot{}))
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
	fill   *ebpf.Map // flow_slots_fill
	idx    uint32    // the half: 0 (flow_slots_a) or 1
	ncpu   int
	perCPU int
}

// slotBuf is what reading a half reuses: a window of slots of every CPU,
// and the window's flows merged by key.
type slotBuf struct {
	keys  []byte // array indexes, for the batch syscall
	slots []loupeFlowSlot
	pos   []int // where the guard's slots are in the region
	seen  map[loupeFlowKey]int
	flows []loupeFlowKey
	per   []loupeFlowStats // len(flows) × ncpu
	stats []flow.Stats
}

func newSlotBuf(ncpu int) *slotBuf {
	n := slotWindow + slotProbes
	return &slotBuf{keys: make([]byte, 4*n), slots: make([]loupeFlowSlot, n), pos: make([]int, 0, slotProbes),
		seen: make(map[loupeFlowKey]int), stats: make([]flow.Stats, ncpu)}
}

// readRange reads the n slots from index start of the array into
// b.slots[at:at+n].
func (h *slotHalf) readRange(b *slotBuf, start, n, at int) error {
	vals := unsafe.Slice((*byte)(unsafe.Pointer(&b.slots[at])), n*int(unsafe.Sizeof(loupeFlowSlot{})))
	for done := 0; done < n; {
		got, err := arrayLookupBatch(h.m, uint32(start+done), b.keys[:4*(n-done)],
			vals[done*int(unsafe.Sizeof(loupeFlowSlot{})):])
		if err != nil {
			return fmt.Errorf("read flow slots: %w", err)
		}
		if got == 0 {
			return fmt.Errorf("read flow slots: %d of %d from %d", done, n, start)
		}
		done += got
	}
	return nil
}

// read calls fn once for every flow of the half with its counters on
// every CPU (zero where a CPU has no slot for it), and records the
// indexes of the slots it read in used.
func (h *slotHalf) read(b *slotBuf, used *[]uint32, fn func(k *flow.Key, perCPU []flow.Stats)) (int, error) {
	*used = (*used)[:0]
	total := 0
	for w := 0; w < h.perCPU; w += slotWindow {
		end := min(w+slotWindow, h.perCPU)
		clear(b.seen)
		b.flows, b.per = b.flows[:0], b.per[:0]
		for c := range h.ncpu {
			if err := h.window(b, c, w, end, used); err != nil {
				return total, err
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
		total += len(b.flows)
	}
	return total, nil
}

// window reads CPU c's slots from w to end, and the slotProbes after end
// (wrapping at the region's end) where a flow whose home is in [w, end)
// may sit, and merges the flows whose home is in [w, end).
func (h *slotHalf) window(b *slotBuf, c, w, end int, used *[]uint32) error {
	base := c * h.perCPU
	n := end - w
	if err := h.readRange(b, base+w, n, 0); err != nil {
		return err
	}
	// The guard: positions end.. end+slotProbes-1 of the region, those
	// not already read in [w, end) (a window that is the whole region).
	pos := b.pos[:0]
	for j := range slotProbes {
		p := (end + j) % h.perCPU
		if p >= w && p < end {
			break
		}
		pos = append(pos, p)
	}
	b.pos = pos
	for i := 0; i < len(pos); {
		run := 1
		for i+run < len(pos) && pos[i+run] == pos[i]+run {
			run++
		}
		if err := h.readRange(b, base+pos[i], run, n+i); err != nil {
			return err
		}
		i += run
	}
	for i := range n + len(pos) {
		s := &b.slots[i]
		if s.Tag == 0 {
			continue
		}
		at := w + i
		if i >= n {
			at = pos[i-n]
		}
		if home := slotHome(slotHash(&s.Key), h.perCPU); home < w || home >= end {
			continue // another window's flow
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
		*used = append(*used, uint32(base+at))
	}
	return nil
}

// clear frees the slots in used, or, with all, every slot of the half;
// then sets every CPU's fill of the half to zero.
func (h *slotHalf) clear(used []uint32, all bool) error {
	const chunk = 4096
	zero := make([]byte, chunk*int(unsafe.Sizeof(loupeFlowSlot{})))
	keys := make([]byte, 4*chunk)
	write := func(idx []uint32) error {
		for i, x := range idx {
			binary.NativeEndian.PutUint32(keys[4*i:], x)
		}
		return arrayUpdateBatch(h.m, keys, zero, len(idx))
	}
	if all {
		idx := make([]uint32, 0, chunk)
		for i := range h.ncpu * h.perCPU {
			idx = append(idx, uint32(i))
			if len(idx) == chunk {
				if err := write(idx); err != nil {
					return fmt.Errorf("clear flow slots: %w", err)
				}
				idx = idx[:0]
			}
		}
		used = idx
	}
	for len(used) > 0 {
		n := min(len(used), chunk)
		if err := write(used[:n]); err != nil {
			return fmt.Errorf("clear flow slots: %w", err)
		}
		used = used[n:]
	}
	if err := h.fill.Update(h.idx, make([]loupeSlotFill, h.ncpu), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("clear flow slot counts: %w", err)
	}
	return nil
}
