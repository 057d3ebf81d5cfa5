package datapath

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"loupe/internal/sketch"
)

// layoutVersion is part of every layout name. Bump it when the meaning of
// a pinned map changes without its types changing (a field that keeps its
// name, type and place but is counted differently): an agent must then
// drain the old tables through BTF rather than adopt them.
const layoutVersion = 1

// pinnedMaps are the maps a pin set holds: what outlives the agent.
var pinnedMaps = []string{loupeMapFlowsA, loupeMapFlowsB, loupeMapFlowSlotsA, loupeMapFlowSlotsB, loupeMapFlowSlotsFill, loupeMapFlowIndexA, loupeMapFlowIndexB, loupeMapFlowState, loupeMapCounters, loupeMapFlowEvents, loupeMapEventLayout,
	loupeMapSketchCells, loupeMapSketchFilter, loupeMapSketchCm, loupeMapSketchSpill, loupeMapSketchConf,
	loupeMapTunnelsA, loupeMapTunnelsB}

// layoutTypes are the structs shared with userspace whose layout a pin set
// depends on.
var layoutTypes = []string{"flow_key", "flow_stats", "flow_slot", "slot_fill", "flow_event", "table_state",
	"sketch_cell", "sketch_counter", "sketch_slot", "sketch_params", "tunnel_info"}

// layoutName names the layout of the maps spec describes, as sized: the
// table kind, flow budget and ring-buffer size in clear, then a hash of
// everything an adopting agent relies on (the structs' members, offsets
// and sizes, each pinned map's type, sizes and flags, the counters, the
// sketch's parameters: a sketch half is decoded only with the parameters
// it was written with). Two agents adopt each other's pins exactly when
// their layout names are equal.
func layoutName(spec *ebpf.CollectionSpec, tables TableKind, budget int, sk *sketch.Params) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d\n", layoutVersion)
	for _, name := range layoutTypes {
		var t btf.Type
		if spec.Types == nil {
			return "", fmt.Errorf("flow program has no BTF")
		}
		t, err := spec.Types.AnyTypeByName(name)
		if err != nil {
			return "", fmt.Errorf("layout: type %s: %w", name, err)
		}
		describeType(&b, t, 0)
		b.WriteByte('\n')
	}
	for _, name := range pinnedMaps {
		m := spec.Maps[name]
		fmt.Fprintf(&b, "%s %v %d %d %d %#x\n", name, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags)
	}
	fmt.Fprintf(&b, "counters %d slots %d hash %d\n", loupeCounterCOUNTER_MAX, slotsFor(budget), slotHashVersion)
	if sk != nil {
		fmt.Fprintf(&b, "sketch %+v spill %d hash %d\n", *sk, SketchSpillSlots, sketch.HashVersion)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return fmt.Sprintf("%s-%d-%d-%s", tables, budget,
		spec.Maps[loupeMapFlowEvents].MaxEntries, hex.EncodeToString(sum[:4])), nil
}

// describeType writes a canonical description of t: names, kinds, sizes
// and member offsets, recursively.
func describeType(b *strings.Builder, t btf.Type, depth int) {
	if depth > 8 {
		b.WriteString("...")
		return
	}
	switch v := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		fmt.Fprintf(b, "struct %s %d {", v.Name, v.Size)
		for _, m := range v.Members {
			fmt.Fprintf(b, "%s@%d:%d ", m.Name, m.Offset, m.BitfieldSize)
			describeType(b, m.Type, depth+1)
			b.WriteString("; ")
		}
		b.WriteString("}")
	case *btf.Int:
		fmt.Fprintf(b, "int%d/%v", v.Size*8, v.Encoding)
	case *btf.Enum:
		fmt.Fprintf(b, "enum%d", v.Size*8)
	case *btf.Array:
		fmt.Fprintf(b, "[%d]", v.Nelems)
		describeType(b, v.Type, depth+1)
	case *btf.Pointer:
		b.WriteString("*")
	default:
		fmt.Fprintf(b, "%T", v)
	}
}
