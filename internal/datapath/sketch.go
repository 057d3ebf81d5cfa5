package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
	"loupe/internal/sketch"
)

// Sketch mode (bpf/sketch/sketch.h): when the active flow table is full, a
// new flow's packets go into fixed-size per-CPU sketches instead of the ring
// buffer. Like the tables, the sketches are double-buffered: the half
// written is the one whose table is active, and a drain (Rotate, Leftovers)
// reads its half with its table and clears it with its table.
//
// Each half is four ranges of four per-CPU arrays: the flow set's cells,
// the flow filter's words, the count-min pairs, and the spill slots (exact
// spill totals per interface and direction, and the half's full flag); and
// a fifth range, the flow cache's entries, in the cells' array after both
// halves' cells. A half decodes with its flow cache (sketch.TakeCache,
// sketch.DecodeCached): each entry's exact counts are added to what the
// flow set decodes of its flow.
//
// Pinning: the sketch maps are pinned with the tables, in the same set, so
// that a sketch half swapped out before a crash (or still active when the
// agent stopped) is decoded by the next agent like the table it goes with.
// A half must be decoded with the parameters it was written with, so they
// are part of the layout name (layoutName): an agent with other parameters
// never adopts the set, it retires it. A retired set is read with its own
// parameters, which it holds in its sketch_conf map (written at creation,
// never by the programs), with the version of the hashing that placed
// its flows (sketch.HashVersion, also part of the layout name); a set
// without them (an older build, or maps of another shape) or of another
// hashing has its sketch halves left unread, and Sketch says so by an
// error rather than misread them.

// SketchSpillSlots is the number of (ifindex, direction) pairs whose spill
// totals a CPU keeps apart per half (SKETCH_SPILL_SLOTS); the spill of a
// pair whose slot another pair holds is counted in SketchHalf.Other.
const SketchSpillSlots = 256

const (
	spillStride        = SketchSpillSlots + 1 // the header, then the slots
	maxSketchFilterHas = 32                   // SKETCH_MAX_FILTER_HASHES
	spillSlotSize      = 24                   // struct sketch_slot
	sketchConfSize     = 28                   // struct sketch_params
)

// SketchParams sizes the sketch of one half for a per-CPU budget of bytes
// (sketch.Size), and checks that the datapath can run it.
func SketchParams(budget int) (sketch.Params, error) {
	p, err := sketch.Size(budget)
	if err != nil {
		return sketch.Params{}, fmt.Errorf("sketch budget %d bytes: %w", budget, err)
	}
	return p, checkSketchParams(p)
}

// checkSketchParams says why the datapath cannot run a sketch of p.
func checkSketchParams(p sketch.Params) error {
	if err := p.Validate(); err != nil {
		return err
	}
	words := p.FlowSet.FilterBytes() / 8
	switch {
	case p.FlowSet.FilterHashes > maxSketchFilterHas:
		return fmt.Errorf("sketch: %d filter hashes, the datapath does at most %d", p.FlowSet.FilterHashes, maxSketchFilterHas)
	case p.FlowSet.FilterBits > math.MaxUint32:
		return fmt.Errorf("sketch: %d filter bits, want at most 2^32-1", p.FlowSet.FilterBits)
	case 2*(p.FlowSet.Cells+p.Cache) > math.MaxUint32, 2*words > math.MaxUint32, 2*p.CountMin.Rows*p.CountMin.Width > math.MaxUint32:
		return errors.New("sketch: two halves exceed 2^32 array entries")
	}
	return nil
}

// sizeSketch sets the sketch's switch, constants and map sizes in spec: p
// nil switches sketch mode off (the maps keep their smallest sizes).
func sizeSketch(spec *ebpf.CollectionSpec, p *sketch.Params) error {
	if p == nil {
		return spec.Variables[loupeVarCfgSketch].Set(uint8(0))
	}
	if err := checkSketchParams(*p); err != nil {
		return err
	}
	fs, cm := p.FlowSet, p.CountMin
	words := fs.FilterBytes() / 8
	for name, v := range map[string]any{
		loupeVarCfgSketch:             uint8(1),
		loupeVarCfgSketchCells:        uint32(fs.Cells),
		loupeVarCfgSketchSub:          uint32(fs.Cells / sketch.K),
		loupeVarCfgSketchFilterBits:   uint32(fs.FilterBits),
		loupeVarCfgSketchFilterWords:  uint32(words),
		loupeVarCfgSketchFilterHashes: uint32(fs.FilterHashes),
		loupeVarCfgSketchRows:         uint32(cm.Rows),
		loupeVarCfgSketchWidth:        uint32(cm.Width),
		loupeVarCfgSketchCache:        uint32(p.Cache),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	spec.Maps[loupeMapSketchCells].MaxEntries = uint32(2 * (fs.Cells + p.Cache))
	spec.Maps[loupeMapSketchFilter].MaxEntries = uint32(2 * words)
	spec.Maps[loupeMapSketchCm].MaxEntries = uint32(2 * cm.Rows * cm.Width)
	return nil
}

// SpillTotal is the exact traffic that spilled into the sketch from one
// interface in one direction, summed over the CPUs.
type SpillTotal struct {
	IfIndex   uint32
	Direction flow.Direction
	sketch.Counts
}

// SketchHalf is the sketch half that goes with a drained flow table: each
// CPU's tables, laid out as sketch.Decode and sketch.NewCountMin take them,
// and the exact spill totals.
type SketchHalf struct {
	// Params are the parameters the half was written with.
	Params sketch.Params
	// FlowSet[cpu] is a CPU's flow set (Params.FlowSet.Cells ×
	// sketch.CellSize bytes): sketch.Decode(Params.FlowSet, FlowSet).
	// With a flow cache, FlowSet, Filter and CountMin are as the datapath
	// left them: without what Cache holds.
	FlowSet [][]byte
	// Filter[cpu] is a CPU's flow filter (Params.FlowSet.FilterBytes()):
	// not needed to decode; there for tests and diagnostics.
	Filter [][]byte
	// CountMin[cpu] is a CPU's count-min sketch (Params.CountMin.Bytes()):
	// sketch.NewCountMin(Params.CountMin, CountMin).
	CountMin [][]byte
	// Spill is the traffic that spilled, exactly, per interface and
	// direction, sorted by interface then direction. With Other it adds
	// up to the half's spilled_packets and spilled_bytes counters.
	Spill []SpillTotal
	// Other is the spill no slot held apart: that of a pair whose slot
	// another pair took first on that CPU (more than SketchSpillSlots
	// pairs, or two pairs hashing alike).
	Other sketch.Counts
	// FullCPUs is the number of CPUs that saw the table full (their full
	// flag, which spares a spilled packet the table's failed insert).
	FullCPUs int
	// Cache[cpu] is a CPU's flow cache (Params.Cache × sketch.CellSize
	// bytes; nil without one): Decode takes its entries as they are
	// (sketch.TakeCache); sketch.FoldCache inserts them instead.
	Cache [][]byte
}

// Total is the traffic the half holds: every spilled packet, exactly.
func (h *SketchHalf) Total() sketch.Counts {
	t := h.Other
	for _, s := range h.Spill {
		t.Packets += s.Packets
		t.Bytes += s.Bytes
	}
	return t
}

// SketchDrain is implemented by every drain this package returns (Rotate,
// Leftovers). The evictor (or whoever decodes) asserts a flow.Drain to it:
//
//	if sd, ok := d.(datapath.SketchDrain); ok {
//		h, err := sd.Sketch() // nil, nil: no sketch (sketch mode off)
//		...
//		res, err := sketch.Decode(h.Params.FlowSet, h.FlowSet)
//		cm, err := sketch.NewCountMin(h.Params.CountMin, h.CountMin)
//	}
//
// and calls Sketch between the drain's Read and Clear: Clear clears the
// half (and its full flags) with the table, so the next interval holds only
// new packets.
type SketchDrain interface {
	// Sketch reads the half. nil, nil when the set has no sketch half to
	// read (sketch mode off, or a retired set that never had one). An
	// error when a half exists but cannot be read as written (a retired
	// set without its parameters): its traffic is then only in the
	// counters.
	Sketch() (*SketchHalf, error)
}

// sketchMaps are the maps of one set's sketches and the parameters they
// were written with.
type sketchMaps struct {
	cells, filter, cm, spill *ebpf.Map
	p                        sketch.Params
	slots                    int // spill slots per half (the header not counted)
	ncpu                     int
}

// read returns one half of every CPU's sketch.
func (s *sketchMaps) read(half uint32) (*SketchHalf, error) {
	fs, cm := s.p.FlowSet, s.p.CountMin
	h := &SketchHalf{Params: s.p}
	var err error
	if h.FlowSet, err = readPerCPU(s.cells, half*uint32(fs.Cells), fs.Cells, sketch.CellSize, s.ncpu); err != nil {
		return nil, fmt.Errorf("read sketch flow set: %w", err)
	}
	words := fs.FilterBytes() / 8
	if h.Filter, err = readPerCPU(s.filter, half*uint32(words), words, 8, s.ncpu); err != nil {
		return nil, fmt.Errorf("read sketch flow filter: %w", err)
	}
	if h.CountMin, err = readPerCPU(s.cm, half*uint32(cm.Rows*cm.Width), cm.Rows*cm.Width, sketch.CounterSize, s.ncpu); err != nil {
		return nil, fmt.Errorf("read count-min sketch: %w", err)
	}
	if s.p.Cache > 0 {
		if h.Cache, err = readPerCPU(s.cells, s.cacheStart(half), s.p.Cache, sketch.CellSize, s.ncpu); err != nil {
			return nil, fmt.Errorf("read the sketch's flow cache: %w", err)
		}
	}
	slots, err := readPerCPU(s.spill, half*uint32(s.slots+1), s.slots+1, spillSlotSize, s.ncpu)
	if err != nil {
		return nil, fmt.Errorf("read spill totals: %w", err)
	}
	type pair struct {
		ifindex uint32
		dir     uint8
	}
	sum := make(map[pair]*sketch.Counts)
	le := binary.LittleEndian
	for _, t := range slots {
		hdr := t[:spillSlotSize]
		h.Other.Packets += le.Uint64(hdr[0:])
		h.Other.Bytes += le.Uint64(hdr[8:])
		if hdr[22] != 0 { // full
			h.FullCPUs++
		}
		for i := 1; i <= s.slots; i++ {
			b := t[i*spillSlotSize : (i+1)*spillSlotSize]
			if b[21] == 0 { // unused
				continue
			}
			k := pair{le.Uint32(b[16:]), b[20]}
			c := sum[k]
			if c == nil {
				c = &sketch.Counts{}
				sum[k] = c
			}
			c.Packets += le.Uint64(b[0:])
			c.Bytes += le.Uint64(b[8:])
		}
	}
	for k, c := range sum {
		h.Spill = append(h.Spill, SpillTotal{IfIndex: k.ifindex, Direction: flow.Direction(k.dir), Counts: *c})
	}
	sort.Slice(h.Spill, func(i, j int) bool {
		a, b := h.Spill[i], h.Spill[j]
		return a.IfIndex < b.IfIndex || a.IfIndex == b.IfIndex && a.Direction < b.Direction
	})
	return h, nil
}

// clear zeroes one half of every CPU's sketch, full flags included.
func (s *sketchMaps) clear(half uint32) error {
	fs, cm := s.p.FlowSet, s.p.CountMin
	for _, z := range []struct {
		m     *ebpf.Map
		start uint32
		n     int
		size  int
	}{
		{s.cells, half * uint32(fs.Cells), fs.Cells, sketch.CellSize},
		{s.filter, half * uint32(fs.FilterBytes()/8), fs.FilterBytes() / 8, 8},
		{s.cm, half * uint32(cm.Rows*cm.Width), cm.Rows * cm.Width, sketch.CounterSize},
		{s.spill, half * uint32(s.slots+1), s.slots + 1, spillSlotSize},
		{s.cells, s.cacheStart(half), s.p.Cache, sketch.CellSize},
	} {
		if z.n == 0 {
			continue
		}
		if err := zeroPerCPU(z.m, z.start, z.n, z.size, s.ncpu); err != nil {
			return fmt.Errorf("clear sketch: %w", err)
		}
	}
	return nil
}

// cacheStart is the index of a half's first flow cache entry in the cells'
// array: after both halves' cells (sketch_cache_set).
func (s *sketchMaps) cacheStart(half uint32) uint32 {
	return uint32(2*s.p.FlowSet.Cells) + half*uint32(s.p.Cache)
}

// readPerCPU reads entries [start, start+n) of a per-CPU array whose
// values are size bytes (a multiple of 8), and returns each CPU's n values
// back to back.
func readPerCPU(m *ebpf.Map, start uint32, n, size, ncpu int) ([][]byte, error) {
	out := make([][]byte, ncpu)
	for c := range out {
		out[c] = make([]byte, n*size)
	}
	const chunk = 4096
	keys := make([]byte, 4*chunk)
	vals := make([]byte, chunk*ncpu*size)
	for done := 0; done < n; {
		cnt := min(chunk, n-done)
		got, err := arrayLookupBatch(m, start+uint32(done), keys[:4*cnt], vals[:cnt*ncpu*size])
		if err != nil {
			return nil, err
		}
		if got != cnt {
			return nil, fmt.Errorf("batch lookup read %d of %d entries", got, cnt)
		}
		for i := range cnt {
			for c := range ncpu {
				src := vals[(i*ncpu+c)*size : (i*ncpu+c+1)*size]
				copy(out[c][(done+i)*size:], src)
			}
		}
		done += cnt
	}
	return out, nil
}

// zeroPerCPU zeroes entries [start, start+n) of a per-CPU array whose
// values are size bytes, on every CPU.
func zeroPerCPU(m *ebpf.Map, start uint32, n, size, ncpu int) error {
	const chunk = 4096
	keys := make([]byte, 4*min(chunk, n))
	vals := make([]byte, min(chunk, n)*ncpu*size)
	for done := 0; done < n; {
		cnt := min(chunk, n-done)
		for i := range cnt {
			binary.NativeEndian.PutUint32(keys[4*i:], start+uint32(done+i))
		}
		if err := arrayUpdateBatch(m, keys[:4*cnt], vals[:cnt*ncpu*size], cnt); err != nil {
			return err
		}
		done += cnt
	}
	return nil
}

// sketchMaps returns the running set's sketch maps, nil when sketch mode
// is off.
func (d *Datapath) sketchMaps() *sketchMaps {
	if d.sketch == nil {
		return nil
	}
	return &sketchMaps{
		cells: d.objs.SketchCells, filter: d.objs.SketchFilter, cm: d.objs.SketchCm, spill: d.objs.SketchSpill,
		p: *d.sketch, slots: SketchSpillSlots, ncpu: d.ncpu,
	}
}

// writeSketchConf records the sketch's parameters in the set's sketch_conf
// (all zero when sketch mode is off), for an agent that retires the set.
func (d *Datapath) writeSketchConf() error {
	var c loupeSketchParams
	if p := d.sketch; p != nil {
		c = loupeSketchParams{
			Cells: uint32(p.FlowSet.Cells), FilterBits: uint32(p.FlowSet.FilterBits),
			FilterHashes: uint32(p.FlowSet.FilterHashes), Rows: uint32(p.CountMin.Rows),
			Width: uint32(p.CountMin.Width), SpillSlots: SketchSpillSlots, Hash: sketch.HashVersion,
		}
	}
	if err := d.objs.SketchConf.Update(uint32(0), &c, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write sketch parameters: %w", err)
	}
	return nil
}

// Sketch reads the half that goes with this table (SketchDrain).
func (t *tableDrain) Sketch() (*SketchHalf, error) {
	s := t.d.sketchMaps()
	if s == nil {
		return nil, nil
	}
	return s.read(t.idx)
}

// SketchParams returns the parameters of the running sketch, false when
// sketch mode is off.
func (d *Datapath) SketchParams() (sketch.Params, bool) {
	if d.sketch == nil {
		return sketch.Params{}, false
	}
	return *d.sketch, true
}

// retiredSketch opens the sketch maps of a retired set with the parameters
// its sketch_conf holds: nil, nil when it has no sketch to read.
func retiredSketch(maps map[string]*ebpf.Map, ncpu int) (*sketchMaps, error) {
	conf := maps[loupeMapSketchConf]
	if conf == nil {
		// A build without sketch mode: nothing spilled.
		return nil, nil
	}
	if conf.ValueSize() != sketchConfSize {
		return nil, fmt.Errorf("sketch_conf holds %d-byte values, want %d", conf.ValueSize(), sketchConfSize)
	}
	var b []byte
	if err := conf.Lookup(uint32(0), &b); err != nil {
		return nil, fmt.Errorf("read sketch_conf: %w", err)
	}
	le := binary.LittleEndian
	p := sketch.Params{
		FlowSet:  sketch.FlowSetParams{Cells: int(le.Uint32(b[0:])), FilterBits: int(le.Uint32(b[4:])), FilterHashes: int(le.Uint32(b[8:]))},
		CountMin: sketch.CountMinParams{Rows: int(le.Uint32(b[12:])), Width: int(le.Uint32(b[16:]))},
	}
	slots := int(le.Uint32(b[20:]))
	if p.FlowSet.Cells == 0 {
		return nil, nil // sketch mode was off
	}
	if v := le.Uint32(b[24:]); v != sketch.HashVersion {
		return nil, fmt.Errorf("sketch written with hash version %d, this build decodes version %d", v, sketch.HashVersion)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sketch_conf: %w", err)
	}
	s := &sketchMaps{cells: maps[loupeMapSketchCells], filter: maps[loupeMapSketchFilter], cm: maps[loupeMapSketchCm],
		spill: maps[loupeMapSketchSpill], p: p, slots: slots, ncpu: ncpu}
	// The flow cache's entries follow both halves' cells: sketch_conf
	// does not hold its size (a set from before the cache has none), the
	// cells' array does.
	if s.cells != nil && int(s.cells.MaxEntries()) > 2*p.FlowSet.Cells {
		s.p.Cache = (int(s.cells.MaxEntries()) - 2*p.FlowSet.Cells) / 2
	}
	for _, c := range []struct {
		m          *ebpf.Map
		name       string
		size, want int
	}{
		{s.cells, loupeMapSketchCells, sketch.CellSize, 2 * (p.FlowSet.Cells + s.p.Cache)},
		{s.filter, loupeMapSketchFilter, 8, 2 * (p.FlowSet.FilterBytes() / 8)},
		{s.cm, loupeMapSketchCm, sketch.CounterSize, 2 * p.CountMin.Rows * p.CountMin.Width},
		{s.spill, loupeMapSketchSpill, spillSlotSize, 2 * (slots + 1)},
	} {
		switch {
		case c.m == nil:
			return nil, fmt.Errorf("%s is not pinned", c.name)
		case c.m.Type() != ebpf.PerCPUArray || int(c.m.ValueSize()) != c.size || int(c.m.MaxEntries()) != c.want:
			return nil, fmt.Errorf("%s is not the %d × %d-byte per-CPU array its parameters say", c.name, c.want, c.size)
		}
	}
	return s, nil
}

// Sketch reads the retired set's half that goes with this table.
func (d *retiredDrain) Sketch() (*SketchHalf, error) {
	if d.idx > 1 {
		return nil, nil
	}
	s, err := retiredSketch(d.r.maps, d.r.ncpu)
	if err != nil || s == nil {
		if err != nil {
			err = fmt.Errorf("retired pin set %s: its sketch cannot be read: %w", d.r.name, err)
		}
		return nil, err
	}
	return s.read(d.idx)
}

// Spill decodes the half that goes with this table (flow.SketchDrain).
func (t *tableDrain) Spill() (flow.Spill, error) { return spillOf(t) }

// Spill decodes the retired set's half that goes with this table.
func (d *retiredDrain) Spill() (flow.Spill, error) { return spillOf(d) }

// spillOf reads and decodes the sketch half of a drain: zero when it has
// none.
func spillOf(d SketchDrain) (flow.Spill, error) {
	h, err := d.Sketch()
	if err != nil || h == nil {
		return flow.Spill{}, err
	}
	return h.Decode()
}

// Decode decodes the half into what the evictor makes records of: every
// flow the flow sets give back, the count-min sketch to estimate the rest
// with, and the exact totals per interface and direction (what no slot
// held apart goes to interface 0).
func (h *SketchHalf) Decode() (flow.Spill, error) {
	total := h.Total()
	if total.Packets == 0 {
		return flow.Spill{}, nil
	}
	countMin, cached, err := h.takeCache()
	if err != nil {
		return flow.Spill{}, err
	}
	res, err := sketch.DecodeCached(h.Params.FlowSet, h.FlowSet, h.Filter, cached)
	if err != nil {
		return flow.Spill{}, fmt.Errorf("decode the sketch: %w", err)
	}
	cm, err := sketch.NewCountMin(h.Params.CountMin, countMin)
	if err != nil {
		return flow.Spill{}, fmt.Errorf("read the count-min sketch: %w", err)
	}
	filter, err := sketch.NewFilter(h.Params.FlowSet, h.Filter)
	if err != nil {
		return flow.Spill{}, fmt.Errorf("read the flow filter: %w", err)
	}
	s := flow.Spill{
		Decoded:    spillFlows(res.Flows),
		Unverified: spillFlows(res.Unverified),
		Undecoded:  res.Undecoded,
		Estimate: func(k *flow.Key) flow.Estimate {
			var sk sketch.Key
			keyToBytes(sk[:], k)
			var e flow.Estimate
			e.Packets, e.Bytes, e.MaxErrorPackets, e.MaxErrorBytes, e.Confidence = cm.Estimate(&sk)
			return e
		},
		Seen: func(k *flow.Key) bool {
			var sk sketch.Key
			keyToBytes(sk[:], k)
			return filter.Contains(&sk)
		},
	}
	for _, t := range h.Spill {
		s.Totals = append(s.Totals, flow.SpillTotal{IfIndex: t.IfIndex, Direction: t.Direction, Packets: t.Packets, Bytes: t.Bytes})
	}
	if h.Other.Packets > 0 {
		s.Totals = append(s.Totals, flow.SpillTotal{Packets: h.Other.Packets, Bytes: h.Other.Bytes})
	}
	return s, nil
}

// takeCache returns the flows of the CPUs' flow caches (sketch.TakeCache)
// and copies of the CPUs' count-min sketches that count them; nil flows
// and the half's own sketches without a cache. The half is left as read.
func (h *SketchHalf) takeCache() (countMin [][]byte, cached [][]sketch.Flow, err error) {
	if h.Cache == nil {
		return h.CountMin, nil, nil
	}
	n := len(h.CountMin)
	countMin, cached = make([][]byte, n), make([][]sketch.Flow, n)
	for c := range n {
		countMin[c] = slices.Clone(h.CountMin[c])
		if cached[c], err = sketch.TakeCache(h.Params, countMin[c], h.Cache[c]); err != nil {
			return nil, nil, fmt.Errorf("take in the flow cache of CPU %d: %w", c, err)
		}
	}
	return countMin, cached, nil
}

func spillFlows(fs []sketch.Flow) []flow.SpillFlow {
	out := make([]flow.SpillFlow, len(fs))
	for i := range fs {
		keyFromBytes(&out[i].Key, fs[i].Key[:])
		out[i].Packets, out[i].Bytes = fs[i].Packets, fs[i].Bytes
	}
	return out
}

// keyToBytes encodes k as keyFromBytes reads it; b holds at least
// flowKeySize bytes, and the padding is left as it is (zero).
func keyToBytes(b []byte, k *flow.Key) {
	ne := binary.NativeEndian
	_ = b[flowKeySize-1]
	copy(b[0:16], k.SrcAddr[:])
	copy(b[16:32], k.DstAddr[:])
	copy(b[32:38], k.SrcMAC[:])
	copy(b[38:44], k.DstMAC[:])
	ne.PutUint32(b[44:], k.IfIndex)
	ne.PutUint16(b[48:], k.EtherType)
	ne.PutUint16(b[50:], k.SrcPort)
	ne.PutUint16(b[52:], k.DstPort)
	ne.PutUint16(b[54:], k.VlanID)
	b[56] = k.Proto
	b[57] = uint8(k.Direction)
	b[58] = k.AggPrefix
}
