package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"loupe/internal/flow"
)

// A retired pin set: the maps an agent of another layout pinned (an older
// or newer build, another flow budget or table kind). The links already run
// this agent's programs, so nothing writes these tables any more; they are
// read through their own BTF (btfdec.go), handed to the sinks under the
// set's own identity and epochs, and the set is unpinned after its last
// table, which also carries what is left in its ring buffer.
type retiredSet struct {
	pins   *pinDir
	ncpu   int
	name   string
	log    *slog.Logger
	maps   map[string]*ebpf.Map
	state  retiredState
	tables [2]*retiredTable
	slots  [2]*retiredSlots // per-CPU slot tables (slots.go), if the set has them
	events *structDec       // struct flow_event of the set's BTF; nil if absent
}

type retiredState struct {
	set       uint64
	active    uint32
	epoch     [2]uint64
	installed [2]uint64
}

type retiredTable struct {
	m              *ebpf.Map
	key, val       *structDec
	keySize, per   int
	valSize, valSt int // a value's size, and its stride per CPU
}

func openRetired(pins *pinDir, name string, ncpu int, log *slog.Logger) (*retiredSet, error) {
	maps, err := pins.loadSet(name)
	if err != nil {
		return nil, err
	}
	r := &retiredSet{pins: pins, name: name, log: log, maps: maps, ncpu: ncpu}
	for i, mn := range []string{loupeMapFlowsA, loupeMapFlowsB} {
		m := maps[mn]
		if m == nil {
			continue
		}
		t, err := openRetiredTable(m, ncpu)
		if err != nil {
			closeMaps(maps)
			return nil, fmt.Errorf("%s: %w", mn, err)
		}
		r.tables[i] = t
	}
	for i, mn := range []string{loupeMapFlowSlotsA, loupeMapFlowSlotsB} {
		m := maps[mn]
		if m == nil || m.MaxEntries() <= 1 {
			continue // a set of shared tables, or of a layout before slots
		}
		t, err := openRetiredSlots(m, ncpu)
		if err != nil {
			closeMaps(maps)
			return nil, fmt.Errorf("%s: %w", mn, err)
		}
		r.slots[i] = t
	}
	r.state = readRetiredState(maps[loupeMapFlowState])
	if m := maps[loupeMapEventLayout]; m != nil {
		r.events = eventDecoder(m)
	}
	return r, nil
}

// mapBTF returns the BTF the map was created with.
func mapBTF(m *ebpf.Map) (*btf.Spec, error) {
	h, err := m.Handle()
	if err != nil {
		return nil, fmt.Errorf("BTF of map: %w", err)
	}
	defer h.Close()
	spec, err := h.Spec(nil)
	if err != nil {
		return nil, fmt.Errorf("BTF of map: %w", err)
	}
	return spec, nil
}

// mapTypes returns the BTF types of a map's key and value.
func mapTypes(m *ebpf.Map) (key, val btf.Type, err error) {
	spec, err := mapBTF(m)
	if err != nil {
		return nil, nil, err
	}
	kid, vid, err := mapTypeIDs(m)
	if err != nil {
		return nil, nil, err
	}
	if kid == 0 || vid == 0 {
		return nil, nil, errors.New("map has no BTF key or value type")
	}
	if key, err = spec.TypeByID(btf.TypeID(kid)); err != nil {
		return nil, nil, fmt.Errorf("key type: %w", err)
	}
	if val, err = spec.TypeByID(btf.TypeID(vid)); err != nil {
		return nil, nil, fmt.Errorf("value type: %w", err)
	}
	return key, val, nil
}

func openRetiredTable(m *ebpf.Map, ncpu int) (*retiredTable, error) {
	kt, vt, err := mapTypes(m)
	if err != nil {
		return nil, err
	}
	key, err := newStructDec(kt)
	if err != nil {
		return nil, err
	}
	val, err := newStructDec(vt)
	if err != nil {
		return nil, err
	}
	if err := key.requireAll(keyFields...); err != nil {
		return nil, err
	}
	if err := val.requireAll(statsFields...); err != nil {
		return nil, err
	}
	t := &retiredTable{m: m, key: key, val: val, keySize: int(m.KeySize()), valSize: int(m.ValueSize()), per: 1}
	t.valSt = t.valSize
	switch m.Type() {
	case ebpf.PerCPUHash:
		t.per, t.valSt = ncpu, (t.valSize+7)&^7
	case ebpf.Hash:
	default:
		return nil, fmt.Errorf("map type %v is not a flow table", m.Type())
	}
	if key.size != t.keySize || val.size > t.valSize {
		return nil, fmt.Errorf("BTF sizes (key %d, value %d) do not match the map's (%d, %d)", key.size, val.size, t.keySize, t.valSize)
	}
	return t, nil
}

// readRetiredState decodes a set's table state by field name. Without one
// the set has no identity: its tables are drained with no mark, so that a
// crash while draining them may count them twice, but never loses them.
func readRetiredState(m *ebpf.Map) retiredState {
	st := retiredState{epoch: [2]uint64{1, 1}} // unknown epochs: read both
	if m == nil {
		return st
	}
	_, vt, err := mapTypes(m)
	if err != nil {
		return st
	}
	vd, err := newStructDec(vt)
	if err != nil || !vd.has("pin_set") {
		return st
	}
	var b []byte
	if err := m.Lookup(uint32(0), &b); err != nil {
		return st
	}
	st.set = vd.uint(b, "pin_set")
	st.active = uint32(vd.uint(b, "active")) & 1
	st.epoch = [2]uint64{vd.uint(b, "epoch_a"), vd.uint(b, "epoch_b")}
	st.installed = [2]uint64{vd.uint(b, "installed_a"), vd.uint(b, "installed_b")}
	if st.set == 0 {
		st.epoch = [2]uint64{1, 1}
	}
	return st
}

// eventDecoder reads struct flow_event, the ring buffer's record, from the
// value type of the set's event_layout map.
func eventDecoder(m *ebpf.Map) *structDec {
	_, vt, err := mapTypes(m)
	if err != nil {
		return nil
	}
	d, err := newStructDec(vt)
	if err != nil {
		return nil
	}
	return d
}

// drains returns the set's tables, the one swapped out first (its epoch is
// the older), the active one last; the last one removes the set.
func (r *retiredSet) drains() []flow.Drain {
	order := []uint32{r.state.active ^ 1, r.state.active}
	var out []flow.Drain
	for _, i := range order {
		if r.tables[i] == nil && r.slots[i] == nil {
			continue
		}
		out = append(out, &retiredDrain{r: r, idx: i})
	}
	if len(out) == 0 {
		out = append(out, &retiredDrain{r: r, idx: 2}) // nothing to read: still remove the set
	}
	out[len(out)-1].(*retiredDrain).last = true
	return out
}

type retiredDrain struct {
	r    *retiredSet
	idx  uint32 // 0, 1; 2: no table
	last bool
	done atomic.Bool
}

func (d *retiredDrain) Mark() flow.Mark {
	if d.idx > 1 {
		return flow.Mark{Set: d.r.state.set}
	}
	return flow.Mark{Set: d.r.state.set, Epoch: d.r.state.epoch[d.idx]}
}

func (d *retiredDrain) Cutoff() uint64 {
	if d.idx > 1 {
		return 0
	}
	return d.r.state.installed[d.idx]
}

func (d *retiredDrain) Read(fn func(k *flow.Key, perCPU []flow.Stats)) (int, error) {
	if d.idx > 1 {
		return 0, nil
	}
	total := 0
	if s := d.r.slots[d.idx]; s != nil {
		n, err := s.read(fn)
		if err != nil {
			return n, err
		}
		total = n
	}
	t := d.r.tables[d.idx]
	if t == nil {
		return total, nil
	}
	b := newRawBatch(t.m, t.keySize, t.valSt*t.per, 1024)
	stats := make([]flow.Stats, t.per)
	for {
		n, err := b.next()
		if err != nil {
			return total, fmt.Errorf("read retired flow table: %w", err)
		}
		if n == 0 {
			return total, nil
		}
		for i := range n {
			var k flow.Key
			t.key.keyOf(b.key(i), &k)
			v := b.value(i)
			for c := range t.per {
				t.val.statsOf(v[c*t.valSt:c*t.valSt+t.valSize], &stats[c])
			}
			fn(&k, stats)
		}
		total += n
	}
}

// Events reads what the set's ring buffer holds past from (the last table
// only): the packets its programs diverted and no agent stored.
func (d *retiredDrain) Events(from uint64, fn func(*flow.Event)) (uint64, error) {
	m := d.r.maps[loupeMapFlowEvents]
	if !d.last || m == nil {
		return from, nil
	}
	rg, err := openRing(m)
	if err != nil {
		return from, err
	}
	defer rg.close()
	rg.skipTo(from)
	skipped := 0
	for {
		b, _, err := rg.next()
		if errors.Is(err, errRingEmpty) {
			break
		}
		if err != nil {
			return rg.position(), err
		}
		var ev flow.Event
		if d.r.events == nil || d.r.events.eventOf(b, &ev) != nil {
			skipped++
			continue
		}
		fn(&ev)
	}
	if skipped > 0 {
		d.r.log.Error("events of a retired pin set could not be decoded (its event_layout map is missing): their packets are lost",
			"set", d.r.name, "events", skipped)
	}
	return rg.position(), nil
}

// Clear removes the set after its last table; its other tables need no
// clearing (the set's mark says they are stored, should this agent crash
// before the last one).
func (d *retiredDrain) Clear() error {
	if !d.last || d.done.Swap(true) {
		return nil
	}
	closeMaps(d.r.maps)
	if err := d.r.pins.removeSet(d.r.name); err != nil {
		return err
	}
	d.r.log.Info("retired pin set drained and unpinned", "set", d.r.name)
	return nil
}
