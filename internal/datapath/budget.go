package datapath

import (
	"fmt"
	"math/bits"
	"reflect"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"loupe/internal/sketch"
)

// A memory budget (Options.Memory, the agent's --memory) bounds the kernel
// memory of every map of the datapath. The maps whose size does not depend
// on it (counters, the table switch, rules, capture) are estimated first,
// the ring buffer keeps its configured size, and what remains sizes the flow
// tables and the sketch behind them (planMemory). After the load, the
// kernel's own accounting (memlock) of every map is what the agent reports
// and checks against the budget.

// MemoryPlan is how a memory budget was split. Byte counts are the
// planner's estimates; Datapath.MapMemory gives the kernel's.
type MemoryPlan struct {
	Budget uint64 // bytes for every map of the datapath
	// FlowBudget is the flows each of the two tables holds.
	FlowBudget int
	// FlowBudgetGiven says FlowBudget came from the configuration, not
	// from the budget: it wins, and the sketch gets what is left.
	FlowBudgetGiven bool
	TablesBytes     uint64 // both flow tables
	// SketchPerCPU is the bytes of one half of the sketch on one CPU
	// (0: no sketch); SketchBytes all of it, both halves on every CPU.
	SketchPerCPU int
	SketchBytes  uint64
	RingBytes    uint64 // the ring buffer
	OtherBytes   uint64 // every map the budget does not size (Reserved included)
	Reserved     uint64 // of which maps outside the datapath's object (Options.Reserved)
}

// Unused is what the plan leaves of the budget.
func (p MemoryPlan) Unused() uint64 {
	used := p.TablesBytes + p.SketchBytes + p.RingBytes + p.OtherBytes
	if used > p.Budget {
		return 0
	}
	return p.Budget - used
}

// sketchShare is the part of what remains for tables and sketch that the
// sketch gets when the flow budget comes from the memory budget: half. The
// tables count exactly while flows fit; the sketch holds, in the same
// memory, about twice the flows a per-CPU table does on two CPUs (119
// bytes a flow per CPU and half, against 248 bytes a flow and table), so
// half each spills as many flows again into the sketch as the tables hold.
const sketchShare = 2

// sketchCost is what the sketch's maps take in the kernel (both halves,
// every CPU) when one half on one CPU is given perCPU bytes; ok is false
// when perCPU holds no sketch.
type sketchCost func(perCPU int) (bytes uint64, ok bool)

// planMemory splits budget: other and ring are fixed; flowBudget, when
// positive, is given and wins; cost prices a sketch (nil: the datapath
// builds none).
func planMemory(budget, other, ring uint64, flowBudget int, table tableShape, kind TableKind, ncpu int, cost sketchCost) (MemoryPlan, error) {
	p := MemoryPlan{Budget: budget, RingBytes: ring, OtherBytes: other, FlowBudgetGiven: flowBudget > 0}
	if fixed := other + ring; fixed >= budget {
		return p, fmt.Errorf("memory budget %s: the ring buffer (%s) and the maps of fixed size (%s) alone take %s",
			formatBytes(budget), formatBytes(ring), formatBytes(other), formatBytes(fixed))
	}
	left := budget - other - ring
	if kind == RingBuf {
		cost = nil // off-path: no table to fill, nothing spills
	}
	switch {
	case kind == RingBuf:
		p.FlowBudget = max(flowBudget, 1)
	case p.FlowBudgetGiven:
		p.FlowBudget = flowBudget
	default:
		share := left
		if cost != nil {
			if _, ok := sketchIn(left/sketchShare, ncpu, cost); ok {
				share = left - left/sketchShare
			}
		}
		p.FlowBudget = flowsIn(share, table, kind, ncpu)
		if p.FlowBudget < minFlowBudget {
			return p, fmt.Errorf("memory budget %s: after the ring buffer (%s) and the maps of fixed size (%s), %s holds %d flows, fewer than %d",
				formatBytes(budget), formatBytes(ring), formatBytes(other), formatBytes(share), p.FlowBudget, minFlowBudget)
		}
	}
	p.TablesBytes = 2 * tableBytes(table, kind, p.FlowBudget, ncpu)
	if p.TablesBytes > left {
		return p, fmt.Errorf("memory budget %s: flow_budget %d takes %s in its two tables, more than the %s left after the ring buffer (%s) and the maps of fixed size (%s); lower flow_budget or raise memory",
			formatBytes(budget), p.FlowBudget, formatBytes(p.TablesBytes), formatBytes(left), formatBytes(ring), formatBytes(other))
	}
	if cost != nil {
		if per, ok := sketchIn(left-p.TablesBytes, ncpu, cost); ok {
			p.SketchPerCPU = per
			p.SketchBytes, _ = cost(per)
		}
	}
	return p, nil
}

// sketchIn is the largest per-CPU half budget whose sketch costs at most
// bytes, and whether there is one.
func sketchIn(bytes uint64, ncpu int, cost sketchCost) (int, bool) {
	hi := int(min(bytes/uint64(2*ncpu), 1<<40))
	// A budget too small to hold a sketch fits, for the search: what it
	// looks for is the last budget below the first that costs too much.
	fits := func(b int) bool { c, ok := cost(b); return !ok || c <= bytes }
	lo := 0
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	c, ok := cost(lo)
	return lo, lo > 0 && ok && c <= bytes
}

// minFlowBudget is the smallest flow budget (the configuration's lower
// bound for flow_budget).
const minFlowBudget = 16

// flowsIn is the largest flow budget whose two tables fit in bytes.
func flowsIn(bytes uint64, table tableShape, kind TableKind, ncpu int) int {
	lo, hi := 0, 1<<24
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if 2*tableBytes(table, kind, mid, ncpu) <= bytes {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// htabHeader is what the kernel accounts for a map beyond its elements,
// rounded up (struct bpf_htab or bpf_array, and the hash's per-CPU lock
// counts).
const htabHeader = 1024

// mapBytes estimates what the kernel accounts for a map of spec, after
// htab_map_mem_usage and array_map_mem_usage (kernel/bpf): a preallocated
// hash has a 16-byte bucket per power-of-two bucket and per element a
// 48-byte struct htab_elem, the key rounded to 8 bytes, and the value or,
// per-CPU, a pointer to one value per CPU; a shared hash also preallocates
// a spare element per CPU. Arrays hold their values, per-CPU ones behind a
// pointer each. A ring buffer maps its data pages twice. A trie, and a hash
// without preallocation, grow as entries are added, and are counted full; a perf event array's buffers are
// its reader's. Checked against the kernel by TestMemoryPlanMatchesKernel.
func mapBytes(m *ebpf.MapSpec, ncpu int) uint64 {
	key, val, n, cpus := round8(int(m.KeySize)), round8(int(m.ValueSize)), uint64(m.MaxEntries), uint64(ncpu)
	buckets := (uint64(1) << bits.Len64(max(n, 1)-1)) * 16
	switch m.Type {
	case ebpf.Array, ebpf.ProgramArray, ebpf.ArrayOfMaps:
		if m.Flags&unix.BPF_F_MMAPABLE != 0 {
			// The values start on a page of their own, and take
			// whole pages, so that they can be mapped.
			return pageAlign(htabHeader) + pageAlign(n*val)
		}
		return htabHeader + n*val
	case ebpf.PerCPUArray:
		return htabHeader + n*(8+val*cpus)
	case ebpf.PerCPUHash:
		return htabHeader + n*(48+key+8+val*cpus) + buckets
	case ebpf.Hash:
		return htabHeader + (n+cpus)*(48+key+val) + buckets
	case ebpf.RingBuf:
		// Two pages of positions, and a page pointer for every page,
		// the data pages twice (they are mapped twice in a row).
		return n + 8192 + (2*n/4096+2)*8 + 4608
	case ebpf.PerfEventArray:
		return htabHeader + cpus*8
	case ebpf.LPMTrie:
		return htabHeader + n*(64+key+val)
	}
	return htabHeader + n*(48+key+val) + buckets
}

func pageAlign(n uint64) uint64 { return (n + 4095) &^ 4095 }

// tableShape is what one flow table of the datapath is made of: the hash
// table (shared tables), the slots and their index (per-CPU tables;
// slots.go), and the tunnel table beside them that holds at most one entry
// a flow.
type tableShape struct {
	table, slots, index, tunnels *ebpf.MapSpec
}

// tableBytes estimates one flow table of n flows per table (shared) or
// per CPU (per-CPU), the tunnel table beside it counted full (every flow
// tunnelled). The kind's other table is there too, at its smallest.
func tableBytes(shape tableShape, kind TableKind, n, ncpu int) uint64 {
	t, sl, ix := *shape.table, *shape.slots, *shape.index
	t.Type, t.MaxEntries, sl.MaxEntries, ix.MaxEntries = ebpf.Hash, uint32(n), 1, 1
	if kind == PerCPU {
		t.MaxEntries, sl.MaxEntries, ix.MaxEntries = 1, uint32(n*ncpu), uint32(slotsFor(n)*ncpu)
	}
	total := mapBytes(&t, ncpu) + mapBytes(&sl, ncpu) + mapBytes(&ix, ncpu)
	if shape.tunnels != nil {
		tun := *shape.tunnels
		tun.MaxEntries = uint32(n)
		total += mapBytes(&tun, ncpu)
	}
	return total
}

func round8(n int) uint64 { return uint64(n+7) &^ 7 }

// formatBytes writes n in the largest binary unit that keeps one decimal.
func formatBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// planFor plans opts.Memory for spec, whose other maps are sized already.
func planFor(spec *ebpf.CollectionSpec, opts Options, ncpu int) (MemoryPlan, error) {
	var other uint64
	for name, m := range spec.Maps {
		switch name {
		case loupeMapFlowsA, loupeMapFlowsB, loupeMapFlowSlotsA, loupeMapFlowSlotsB, loupeMapFlowIndexA, loupeMapFlowIndexB, loupeMapTunnelsA, loupeMapTunnelsB, loupeMapFlowEvents,
			loupeMapSketchCells, loupeMapSketchFilter, loupeMapSketchCm:
			continue
		}
		other += mapBytes(m, ncpu)
	}
	other += opts.Reserved
	ring := mapBytes(spec.Maps[loupeMapFlowEvents], ncpu)
	var cost sketchCost
	if opts.SketchBytes == 0 && opts.sketchParams == nil {
		cost = func(perCPU int) (uint64, bool) {
			p, err := SketchParams(perCPU)
			if err != nil {
				return 0, false
			}
			return sketchMapBytes(spec, p, ncpu), true
		}
	} else if opts.SketchBytes > 0 {
		// Given: its cost is fixed, like the maps of fixed size.
		p, err := SketchParams(opts.SketchBytes)
		if err != nil {
			return MemoryPlan{}, err
		}
		other += sketchMapBytes(spec, p, ncpu)
	}
	shape := tableShape{table: spec.Maps[loupeMapFlowsA], slots: spec.Maps[loupeMapFlowSlotsA], index: spec.Maps[loupeMapFlowIndexA],
		tunnels: spec.Maps[loupeMapTunnelsA]}
	p, err := planMemory(opts.Memory, other, ring, opts.FlowBudget, shape, opts.Tables, ncpu, cost)
	p.Reserved = opts.Reserved
	return p, err
}

// sketchMapBytes is what the sketch maps of p take in the kernel, both
// halves (sizeSketch).
func sketchMapBytes(spec *ebpf.CollectionSpec, p sketch.Params, ncpu int) uint64 {
	var total uint64
	for name, n := range map[string]int{
		loupeMapSketchCells:  2 * (p.FlowSet.Cells + p.Cache),
		loupeMapSketchFilter: 2 * p.FlowSet.FilterBytes() / 8,
		loupeMapSketchCm:     2 * p.CountMin.Rows * p.CountMin.Width,
	} {
		m := *spec.Maps[name]
		m.MaxEntries = uint32(n)
		total += mapBytes(&m, ncpu)
	}
	return total
}

// Plan is how the memory budget was split (zero without one).
func (d *Datapath) Plan() MemoryPlan { return d.plan }

// checkMemory holds the kernel's accounting of every map to the budget: the
// plan is an estimate, the budget a promise.
func (d *Datapath) checkMemory() error {
	if d.plan.Budget == 0 {
		return nil
	}
	total, _, err := d.MemoryBytes()
	if err != nil {
		return err
	}
	if total += d.plan.Reserved; total > d.plan.Budget {
		return fmt.Errorf("memory budget %s: the maps take %s in the kernel, more than planned (%s); please report this",
			formatBytes(d.plan.Budget), formatBytes(total), formatBytes(d.plan.Budget-d.plan.Unused()))
	}
	return nil
}

// maps are every map of the loaded object.
func (d *Datapath) maps() []*ebpf.Map {
	var out []*ebpf.Map
	v := reflect.ValueOf(d.objs.loupeMaps)
	for i := range v.NumField() {
		if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && m != nil {
			out = append(out, m)
		}
	}
	return out
}
