package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
	"loupe/internal/sketch"
)

// TableKind selects how the flow tables are shared between CPUs.
type TableKind int

const (
	// PerCPU gives every CPU its own table (slot arrays, slots.go): no
	// cache line bouncing, no lock, at the price of a copy of a flow on
	// every CPU that sees it and a merge in userspace. The netobserv
	// paper's design, in a table of Loupe's own.
	PerCPU TableKind = iota
	// Shared keeps one copy, updated with atomic instructions (netobserv
	// 1.8 moved its main map to this, citing memory).
	Shared
	// RingBuf keeps no table: every packet's header goes through the ring
	// buffer and is counted in userspace (the off-path design of the
	// selective-measurement seed, and the netobserv paper's first
	// version). For comparing designs (bench/), not the default.
	RingBuf
)

func (k TableKind) String() string {
	switch k {
	case Shared:
		return "shared"
	case RingBuf:
		return "ringbuf"
	}
	return "percpu"
}

// perCPUMaxCPUs is the largest number of possible CPUs for which AutoTables
// picks per-CPU tables. Per-CPU tables (slots.go) give each CPU its own
// slots: no atomic instruction and no cache line shared between CPUs, and
// a lookup without a helper call, but a flow takes a 128-byte slot (twice,
// at the budget's load) on every CPU that sees it, and each CPU holds only
// its part of the budget. By default they take 64 MiB, twice the shared
// tables; past 4 CPUs each CPU's part gets small, a flow spread over CPUs
// (RPS, a multi-threaded sender) fills several, and the shared table is
// the better trade.
const perCPUMaxCPUs = 4

// AutoTables picks the table kind for this machine (map_type: auto).
func AutoTables() (TableKind, error) {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return PerCPU, fmt.Errorf("count possible CPUs: %w", err)
	}
	if n <= perCPUMaxCPUs {
		return PerCPU, nil
	}
	return Shared, nil
}

// defaultFlowBudget is the flow budget without a memory budget: a shared
// table's, and each CPU's part of a per-CPU table on up to two CPUs. More
// CPUs split perCPUDefaultTotal among them (at least minDefaultPerCPU
// each), so that the per-CPU tables take 64 MiB by default (512 bytes a
// flow and CPU for both halves, slotsFor) whatever the CPUs, and a CPU
// that sees every flow (a veth's sender, a single-queue NIC) still holds
// as many as the shared table on two. Two shared tables of 65536 flows
// take about 32 MiB.
const (
	defaultFlowBudget  = 65536
	perCPUDefaultTotal = 131072
	minDefaultPerCPU   = 4096
)

// DefaultFlowBudget is the flow budget of a table of kind without a memory
// budget: per CPU for per-CPU tables.
func DefaultFlowBudget(kind TableKind) (int, error) {
	if kind != PerCPU {
		return defaultFlowBudget, nil
	}
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, fmt.Errorf("count possible CPUs: %w", err)
	}
	return min(defaultFlowBudget, max(perCPUDefaultTotal/n, minDefaultPerCPU)), nil
}

// Options size the datapath.
type Options struct {
	// FlowBudget is the number of distinct flows a table holds per
	// eviction interval: a shared table, or each CPU's part of a per-CPU
	// table. Packets of further flows go through the ring buffer (or the
	// sketch) and trigger an early eviction. 0 with a Memory budget:
	// sized from it.
	FlowBudget int
	// Memory, when not 0, bounds the kernel memory of every map: the flow
	// tables (unless FlowBudget is given, which wins) and the sketch are
	// sized from what the other maps and the ring buffer leave (budget.go).
	Memory uint64
	// Reserved is kernel memory the budget also pays for, taken by maps
	// outside this object (the kernel signals' tables).
	Reserved uint64
	// Tables selects per-CPU or shared flow tables.
	Tables TableKind
	// RingBufSize is the size of the diverted-packets ring buffer in
	// bytes: a power of two and a multiple of the page size.
	RingBufSize int
	// PinDir is the directory on a bpf file system where the maps are
	// pinned, so that they outlive the agent (pins.go); empty: unpinned.
	// Without a bpf file system there, or without write access, Load
	// warns and runs unpinned.
	PinDir string
	// Capabilities are the capabilities to switch on in the entry
	// programs, by name (the cfg_cap_<name> constants of bpf/loupe.c).
	// Every other one is compiled out at load and costs nothing per
	// packet; with none, the programs return at once ("hooks only").
	Capabilities []string
	// Capture sizes the capture capability's maps (zero value: the
	// defaults), used when "capture" is among Capabilities.
	Capture CaptureSizes
	// JudgeEveryPacket turns the rules' verdict cache off: every packet
	// is judged by the rules, as a flow's first packet is. For
	// benchmarks and tests that measure or check the cache.
	JudgeEveryPacket bool
	// SketchBytes switches sketch mode on (0: off): once the active
	// table holds FlowBudget flows, new flows spill into per-CPU sketches
	// instead of the ring buffer (bpf/sketch/sketch.h, sketch.go). It is
	// the per-CPU memory of one interval's sketch, sized by
	// SketchParams (sketch.Size); the datapath holds two, one per table,
	// so the sketches take 2 × SketchBytes per possible CPU (and a few
	// KiB of spill totals). Needs flows. With a Memory budget and no
	// SketchBytes, the budget sizes it.
	SketchBytes int
	// DNS and Handshake size the tables of the dns and handshake
	// capabilities (zero value: the defaults), used when they are among
	// Capabilities.
	DNS       DNSSizes
	Handshake HandshakeSizes
	// Latency configures the latency capability (zero value: the
	// defaults), used when "latency" is among Capabilities.
	Latency LatencySizes
	Logger  *slog.Logger

	// sketchParams, if set, is the sketch's shape instead of SketchBytes'
	// (tests: shapes sketch.Size never picks).
	sketchParams *sketch.Params

	// allBuild loads the build with every capability even for flows
	// alone: benchmarks compare a capability on and off in one build.
	allBuild bool
}

// Datapath is the loaded flow program and its maps.
type Datapath struct {
	opts   Options
	log    *slog.Logger
	objs   loupeObjects
	tables [2]*ebpf.Map // flows_a, flows_b: indexed by table_state.active
	// slots are the per-CPU tables' halves (flow_slots_a, flow_slots_b),
	// nil unless Tables is PerCPU (slots.go).
	slots   [2]*slotHalf
	slotBuf *slotBuf
	ncpu    int
	sketch  *sketch.Params // nil: sketch mode off

	// state mirrors the flow_state map, of which the Datapath is the only
	// writer. cleared says which tables are known to be empty: a table is
	// made active again only once its last contents were committed and
	// cleared, or they would be counted twice.
	state   loupeTableState
	cleared [2]bool

	layout  string
	plan    MemoryPlan // zero without a memory budget
	pins    *pinDir    // nil: unpinned
	setName string     // the directory of this set in pins
	adopted bool       // the set was pinned by an earlier agent
	retired []string   // pin sets of another layout, to drain (Leftovers)

	// grace is how a swap waits out the programs still running.
	grace *grace

	// captureSel is the capture config slot in force (SetCaptureConfig).
	captureMu  sync.Mutex
	captureSel uint32

	// rulesGen is the generation in force (rules_sel, rules.go): its
	// low bit is the set in force. rulesLen is the rules of each set.
	rulesMu  sync.Mutex
	rulesGen uint32
	rulesLen [2]int

	// Reused across evictions so that draining a shared table does not
	// allocate.
	keys  []loupeFlowKey
	vals  []loupeFlowStats
	stats []flow.Stats
}

// drainBatch is the number of entries read per batch syscall.
const drainBatch = 4096

// Load loads the flow program and creates its maps, or, with a pin
// directory, adopts the maps an earlier agent of the same layout pinned
// there (load.go). Nothing is attached.
func Load(opts Options) (*Datapath, error) {
	if opts.FlowBudget < 1 && opts.Memory == 0 {
		return nil, fmt.Errorf("flow budget %d: must be positive", opts.FlowBudget)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	spec, err := loadLoupe()
	if err != nil {
		return nil, fmt.Errorf("parse flow program: %w", err)
	}
	if opts.RingBufSize > 0 {
		spec.Maps[loupeMapFlowEvents].MaxEntries = uint32(opts.RingBufSize)
	}
	if err := switchCapabilities(spec, opts.Capabilities); err != nil {
		return nil, err
	}
	if err := faultRefuse(opts.Capabilities); err != nil {
		return nil, err
	}
	rules := slices.Contains(opts.Capabilities, "rules")
	if rules && !slices.Contains(opts.Capabilities, "flows") {
		return nil, errors.New("the rules capability decides what flows measures: it needs flows")
	}
	sizeRules(spec, rules)
	if err := spec.Variables[loupeVarCfgRulesCache].Set(boolByte(!opts.JudgeEveryPacket)); err != nil {
		return nil, fmt.Errorf("set rules cache: %w", err)
	}
	if err := sizeTCSignals(spec, &opts); err != nil {
		return nil, err
	}
	latency := slices.Contains(opts.Capabilities, "latency")
	if latency && !slices.Contains(opts.Capabilities, "flows") {
		// The entry programs parse only when flows or capture is on.
		return nil, errors.New("the latency capability needs flows")
	}
	if opts.Latency == (LatencySizes{}) {
		opts.Latency = DefaultLatencySizes()
	}
	if err := sizeLatency(spec, opts.Latency, latency); err != nil {
		return nil, err
	}
	if opts.Capture == (CaptureSizes{}) {
		opts.Capture = DefaultCaptureSizes()
	}
	if slices.Contains(opts.Capabilities, "capture") {
		if err := sizeCapture(spec, opts.Capture, ncpu); err != nil {
			return nil, err
		}
	} else if err := sizeCapture(spec, CaptureSizes{Connections: 1, KeepSnap: 1, HTTPSeries: 16}, ncpu); err != nil {
		// Off: its maps are created all the same (the object names
		// them), at their smallest.
		return nil, err
	}
	var plan MemoryPlan
	if opts.Memory > 0 {
		if plan, err = planFor(spec, opts, ncpu); err != nil {
			return nil, err
		}
		opts.FlowBudget = plan.FlowBudget
		if opts.SketchBytes == 0 && opts.sketchParams == nil {
			opts.SketchBytes = plan.SketchPerCPU
		}
	}
	if err := sizeSlots(spec, opts.Tables, opts.FlowBudget, ncpu); err != nil {
		return nil, err
	}
	// Each flow of a table has at most one entry in its tunnel table.
	for _, name := range []string{loupeMapTunnelsA, loupeMapTunnelsB} {
		spec.Maps[name].MaxEntries = uint32(max(opts.FlowBudget, 1))
	}
	if err := spec.Variables[loupeVarCfgSharedTable].Set(boolByte(opts.Tables == Shared)); err != nil {
		return nil, fmt.Errorf("set table kind: %w", err)
	}
	if err := spec.Variables[loupeVarCfgOffpath].Set(boolByte(opts.Tables == RingBuf)); err != nil {
		return nil, fmt.Errorf("set table kind: %w", err)
	}
	sk := opts.sketchParams
	if sk == nil && opts.SketchBytes > 0 && opts.Tables != RingBuf {
		p, err := SketchParams(opts.SketchBytes)
		if err != nil {
			return nil, err
		}
		sk = &p
	}
	if sk != nil && !slices.Contains(opts.Capabilities, "flows") {
		return nil, errors.New("sketch mode spills the flow tables: it needs the flows capability")
	}
	if err := sizeSketch(spec, sk); err != nil {
		return nil, err
	}
	layout, err := layoutName(spec, opts.Tables, opts.FlowBudget, sk)
	if err != nil {
		return nil, err
	}

	d := &Datapath{opts: opts, ncpu: ncpu, sketch: sk, layout: layout, plan: plan, log: opts.Logger.With("component", "datapath")}
	if err := d.load(spec); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.checkMemory(); err != nil {
		d.Close()
		return nil, err
	}
	d.tables = [2]*ebpf.Map{d.objs.FlowsA, d.objs.FlowsB}
	if opts.Tables == PerCPU {
		index := []*ebpf.Map{d.objs.FlowIndexA, d.objs.FlowIndexB}
		for i, m := range []*ebpf.Map{d.objs.FlowSlotsA, d.objs.FlowSlotsB} {
			if d.slots[i], err = newSlotHalf(m, index[i], d.objs.FlowSlotsFill, uint32(i), ncpu, opts.FlowBudget); err != nil {
				d.Close()
				return nil, err
			}
		}
		d.slotBuf = newSlotBuf(ncpu)
	}
	if d.grace, err = newGrace(d.log); err != nil {
		d.Close()
		return nil, err
	}

	if opts.Tables != PerCPU {
		// The shared tables are hash maps, read in batches.
		d.keys = make([]loupeFlowKey, drainBatch)
		d.vals = make([]loupeFlowStats, drainBatch)
		d.stats = make([]flow.Stats, 1)
	}
	return d, nil
}

// capPrefix starts the name of every capability switch in bpf/loupe.c.
const capPrefix = "cfg_cap_"

// Capabilities lists the capabilities the entry programs were built with,
// by name, sorted.
func Capabilities() ([]string, error) {
	spec, err := loadLoupe()
	if err != nil {
		return nil, fmt.Errorf("parse datapath object: %w", err)
	}
	var names []string
	for v := range spec.Variables {
		if name, ok := strings.CutPrefix(v, capPrefix); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// switchCapabilities sets every capability switch of spec: on for the
// names in on, off for the others.
func switchCapabilities(spec *ebpf.CollectionSpec, on []string) error {
	want := make(map[string]bool, len(on))
	for _, name := range on {
		if _, ok := spec.Variables[capPrefix+name]; !ok {
			return fmt.Errorf("capability %q: the datapath has no such capability", name)
		}
		want[name] = true
	}
	for v, vs := range spec.Variables {
		name, ok := strings.CutPrefix(v, capPrefix)
		if !ok {
			continue
		}
		if err := vs.Set(boolByte(want[name])); err != nil {
			return fmt.Errorf("switch capability %s: %w", name, err)
		}
	}
	return nil
}

// loadErr explains a failed load.
func loadErr(err error) error {
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) && strings.Contains(strings.Join(verr.Log, "\n"), "!root") {
		// The verifier treats a loader without CAP_PERFMON like an
		// unprivileged one and refuses packet pointer arithmetic.
		return fmt.Errorf("load flow program: %w (CAP_PERFMON is missing)", err)
	}
	return fmt.Errorf("load flow program: %w", err)
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Ingress and Egress are the programs to attach at each interface's hooks.
// Flows alone runs its own build of the entry programs (bpf/loupe.c: the
// build with every capability would cost it stack traffic); any other set
// runs the build with every capability, switched at load.
func (d *Datapath) Ingress() *ebpf.Program {
	if d.flowsOnly() {
		return d.objs.LoupeFlowsIngress
	}
	return d.objs.LoupeIngress
}

// Egress is the program for the egress hook.
func (d *Datapath) Egress() *ebpf.Program {
	if d.flowsOnly() {
		return d.objs.LoupeFlowsEgress
	}
	return d.objs.LoupeEgress
}

func (d *Datapath) hasCapability(name string) bool {
	return slices.Contains(d.opts.Capabilities, name)
}

func (d *Datapath) flowsOnly() bool {
	return !d.opts.allBuild && slices.Equal(d.opts.Capabilities, []string{"flows"})
}

// Options returns the options the datapath was loaded with.
func (d *Datapath) Options() Options { return d.opts }

// CPUs is the number of per-CPU copies each per-CPU table entry has.
func (d *Datapath) CPUs() int { return d.ncpu }

// Set is the identity of the set of tables (flow.Mark.Set).
func (d *Datapath) Set() uint64 { return d.state.PinSet }

// Rotate makes the programs write the standby table, in a new epoch, waits
// until no program can still write the previous one, and returns the
// previous one for draining. The standby table must have been cleared (the
// Clear of the Drain that emptied it): Rotate refuses otherwise. Rotate
// must not be called concurrently with itself.
func (d *Datapath) Rotate() (flow.Drain, error) {
	prev := d.state.Active & 1
	next := prev ^ 1
	if !d.cleared[next] {
		return nil, fmt.Errorf("swap flow tables: the standby table still holds records not yet committed and cleared")
	}
	st := d.state
	// Taken before the switch: every packet counted into the new table
	// is later (the evictor's stale filter relies on it).
	st.activate(next, monoNow())
	if err := d.writeState(st); err != nil {
		return nil, fmt.Errorf("swap flow tables: %w", err)
	}
	d.state = st
	d.cleared[next] = false
	d.waitGrace()
	return &tableDrain{d: d, idx: prev, mark: flow.Mark{Set: st.PinSet, Epoch: st.epoch(prev)},
		cutoff: st.installed(prev)}, nil
}

// waitGrace returns once every program that could have read the table
// switch before now has finished.
func (d *Datapath) waitGrace() { d.grace.wait() }

func keyFromBPF(k *flow.Key, b *loupeFlowKey) {
	*k = flow.Key{
		SrcAddr:   b.SrcAddr,
		DstAddr:   b.DstAddr,
		SrcMAC:    b.SrcMac,
		DstMAC:    b.DstMac,
		IfIndex:   b.Ifindex,
		EtherType: b.EthType,
		SrcPort:   b.SrcPort,
		DstPort:   b.DstPort,
		VlanID:    b.VlanId,
		Proto:     b.Proto,
		Direction: flow.Direction(b.Direction),
		AggPrefix: b.AggPrefix,
	}
}

func statsFromBPF(s *flow.Stats, b *loupeFlowStats) {
	*s = flow.Stats{
		Packets:   b.Packets,
		Bytes:     b.Bytes,
		Segments:  b.Packets + b.ExtraSegments,
		WireBytes: b.Bytes + b.ExtraWireBytes,
		FirstSeen: b.FirstSeen,
		LastSeen:  b.LastSeen,
		Sampling:  uint32(b.Sampling),
		TCPFlags:  uint16(b.TcpFlags),
		DSCP:      b.Dscp,
	}
}

// MemoryBytes is the kernel memory the datapath's maps use, as the kernel
// accounts it (memlock in fdinfo): every map, and the part of it that is
// flow tables.
func (d *Datapath) MemoryBytes() (total, tables uint64, err error) {
	for _, m := range d.maps() {
		info, err := m.Info()
		if err != nil {
			return 0, 0, fmt.Errorf("map info: %w", err)
		}
		n, _ := info.Memlock()
		total += n
		if m == d.tables[0] || m == d.tables[1] || m == d.objs.FlowSlotsA || m == d.objs.FlowSlotsB || m == d.objs.FlowIndexA || m == d.objs.FlowIndexB {
			tables += n
		}
	}
	return total, tables, nil
}

// Close releases the programs and maps. Links attached to the programs keep
// them alive in the kernel until they are closed too, and pinned maps stay
// pinned for the next agent: only Unpin removes them.
func (d *Datapath) Close() error {
	errs := []error{d.grace.close(), d.slots[0].close(), d.slots[1].close(), d.objs.Close()}
	if d.pins != nil {
		d.pins.close(false)
		d.pins = nil
	}
	return errors.Join(errs...)
}
