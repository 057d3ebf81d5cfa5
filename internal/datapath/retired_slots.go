package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
)

// retiredSlots is one half of a retired set's per-CPU slot tables, read
// through its own BTF (struct flow_slot: key, tag, stats). The set may
// hash differently from this build, so its flows are merged by key in a
// map rather than found by their home slot: a retired set is drained
// once, and its memory is a start's, not every eviction's.
type retiredSlots struct {
	m       *ebpf.Map
	slot    *structDec
	valSize int
	perCPU  int
}

func openRetiredSlots(m *ebpf.Map, ncpu int) (*retiredSlots, error) {
	if m.Type() != ebpf.Array {
		return nil, fmt.Errorf("map type %v is not a slot table", m.Type())
	}
	_, vt, err := mapTypes(m)
	if err != nil {
		return nil, err
	}
	slot, err := newStructDec(vt)
	if err != nil {
		return nil, err
	}
	key, kok := slot.nested["key"]
	stats, sok := slot.nested["stats"]
	if !kok || !sok || !slot.has("tag") {
		return nil, errors.New("struct flow_slot without key, tag or stats")
	}
	if err := key.requireAll(keyFields...); err != nil {
		return nil, err
	}
	if err := stats.requireAll(statsFields...); err != nil {
		return nil, err
	}
	n := int(m.MaxEntries())
	if n%ncpu != 0 {
		return nil, fmt.Errorf("%d slots do not split into %d CPUs' regions", n, ncpu)
	}
	if slot.size > int(m.ValueSize()) {
		return nil, fmt.Errorf("BTF size %d does not match the map's value size %d", slot.size, m.ValueSize())
	}
	return &retiredSlots{m: m, slot: slot, valSize: int(m.ValueSize()), perCPU: n / ncpu}, nil
}

// read calls fn once for every flow, with its counters on every CPU.
func (t *retiredSlots) read(fn func(k *flow.Key, perCPU []flow.Stats)) (int, error) {
	const chunk = 1024
	ncpu := int(t.m.MaxEntries()) / t.perCPU
	keys, vals := make([]byte, 4*chunk), make([]byte, chunk*t.valSize)
	seen := make(map[flow.Key]int)
	var per [][]flow.Stats
	var order []flow.Key
	for start := 0; start < int(t.m.MaxEntries()); {
		n, err := arrayLookupBatch(t.m, uint32(start), keys, vals)
		if err != nil {
			return 0, fmt.Errorf("read retired flow slots: %w", err)
		}
		if n == 0 {
			break
		}
		for i := range n {
			v := vals[i*t.valSize : (i+1)*t.valSize]
			if t.slot.uint(v, "tag") == 0 {
				continue
			}
			kd, kb, _ := t.slot.sub(v, "key")
			sd, sb, _ := t.slot.sub(v, "stats")
			var k flow.Key
			kd.keyOf(kb, &k)
			j, ok := seen[k]
			if !ok {
				j = len(order)
				seen[k] = j
				order = append(order, k)
				per = append(per, make([]flow.Stats, ncpu))
			}
			sd.statsOf(sb, &per[j][(start+i)/t.perCPU])
		}
		start += n
	}
	for j := range order {
		fn(&order[j], per[j])
	}
	return len(order), nil
}
