package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf/btf"

	"loupe/internal/flow"
)

// Reading a table of another layout through its own BTF.
//
// Pinned tables outlive the agent that made them, so the next agent may be
// a newer build whose struct flow_key or flow_stats differ (a field added,
// moved or widened). It cannot use its generated types on such a table:
// it reads each field by name, at the offset and width the table's own BTF
// gives. A field the old layout lacks reads as zero (or, for the segment
// and wire-byte counters, as what a layout without GSO counters meant: one
// segment a packet, wire bytes equal to bytes); a field the reader does not
// know is ignored. This is what lets a later layout drain an earlier one.

// field is where one named integer or byte array lies in a struct.
type field struct {
	off, size int
	bytes     bool // a byte array (addresses, MACs), copied as is
}

// structDec decodes the fields of one struct by name.
type structDec struct {
	name   string
	size   int
	fields map[string]field
	nested map[string]*structDec // struct members (flow_event's key, stats), with their offsets
	offs   map[string]int
}

func newStructDec(t btf.Type) (*structDec, error) {
	s, ok := btf.UnderlyingType(t).(*btf.Struct)
	if !ok {
		return nil, fmt.Errorf("BTF type %v is not a struct", t)
	}
	d := &structDec{name: s.Name, size: int(s.Size), fields: map[string]field{},
		nested: map[string]*structDec{}, offs: map[string]int{}}
	for _, m := range s.Members {
		if m.BitfieldSize != 0 || m.Offset%8 != 0 {
			continue // no Loupe struct has bit fields; never guess at one
		}
		off := int(m.Offset.Bytes())
		switch mt := btf.UnderlyingType(m.Type).(type) {
		case *btf.Int:
			switch mt.Size {
			case 1, 2, 4, 8:
				d.fields[m.Name] = field{off: off, size: int(mt.Size)}
			}
		case *btf.Enum:
			if mt.Size == 4 {
				d.fields[m.Name] = field{off: off, size: 4}
			}
		case *btf.Array:
			n, err := btf.Sizeof(mt)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", s.Name, m.Name, err)
			}
			if el, ok := btf.UnderlyingType(mt.Type).(*btf.Int); ok && el.Size == 1 {
				d.fields[m.Name] = field{off: off, size: n, bytes: true}
			}
		case *btf.Struct:
			sub, err := newStructDec(mt)
			if err != nil {
				return nil, err
			}
			d.nested[m.Name], d.offs[m.Name] = sub, off
		}
	}
	return d, nil
}

// uint reads an integer field; 0 if the struct has no such field.
func (d *structDec) uint(b []byte, name string) uint64 {
	f, ok := d.fields[name]
	if !ok || f.bytes || f.off+f.size > len(b) {
		return 0
	}
	ne := binary.NativeEndian
	switch f.size {
	case 1:
		return uint64(b[f.off])
	case 2:
		return uint64(ne.Uint16(b[f.off:]))
	case 4:
		return uint64(ne.Uint32(b[f.off:]))
	}
	return ne.Uint64(b[f.off:])
}

// has reports whether the struct has an integer field of that name.
func (d *structDec) has(name string) bool {
	f, ok := d.fields[name]
	return ok && !f.bytes
}

// copyBytes copies a byte-array field into dst (as much as both hold).
func (d *structDec) copyBytes(b []byte, name string, dst []byte) {
	f, ok := d.fields[name]
	if !ok || !f.bytes || f.off+f.size > len(b) {
		return
	}
	copy(dst, b[f.off:f.off+f.size])
}

// sub returns a nested struct's decoder and its bytes within b.
func (d *structDec) sub(b []byte, name string) (*structDec, []byte, bool) {
	s, ok := d.nested[name]
	if !ok || d.offs[name]+s.size > len(b) {
		return nil, nil, false
	}
	off := d.offs[name]
	return s, b[off : off+s.size], true
}

// requireAll fails unless every one of names is an integer or byte field:
// what no layout of a flow table can be read without.
func (d *structDec) requireAll(names ...string) error {
	var missing []error
	for _, n := range names {
		if _, ok := d.fields[n]; !ok {
			missing = append(missing, fmt.Errorf("no field %s", n))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("struct %s: %w", d.name, errors.Join(missing...))
	}
	return nil
}

// keyOf decodes a struct flow_key of any layout.
func (d *structDec) keyOf(b []byte, k *flow.Key) {
	*k = flow.Key{}
	d.copyBytes(b, "src_addr", k.SrcAddr[:])
	d.copyBytes(b, "dst_addr", k.DstAddr[:])
	d.copyBytes(b, "src_mac", k.SrcMAC[:])
	d.copyBytes(b, "dst_mac", k.DstMAC[:])
	k.IfIndex = uint32(d.uint(b, "ifindex"))
	k.EtherType = uint16(d.uint(b, "eth_type"))
	k.SrcPort = uint16(d.uint(b, "src_port"))
	k.DstPort = uint16(d.uint(b, "dst_port"))
	k.VlanID = uint16(d.uint(b, "vlan_id"))
	k.Proto = uint8(d.uint(b, "proto"))
	k.Direction = flow.Direction(d.uint(b, "direction"))
	k.AggPrefix = uint8(d.uint(b, "agg_prefix"))
}

// statsOf decodes a struct flow_stats of any layout. Segments and wire
// bytes come from extra_* counters (this layout), from segments and
// wire_bytes fields (a layout that keeps totals), or default to one
// segment a packet (a layout from before GSO was counted).
func (d *structDec) statsOf(b []byte, s *flow.Stats) {
	*s = flow.Stats{
		Packets:   d.uint(b, "packets"),
		Bytes:     d.uint(b, "bytes"),
		FirstSeen: d.uint(b, "first_seen"),
		LastSeen:  d.uint(b, "last_seen"),
		Sampling:  uint32(d.uint(b, "sampling")),
		TCPFlags:  uint16(d.uint(b, "tcp_flags")),
		DSCP:      uint8(d.uint(b, "dscp")),
	}
	switch {
	case d.has("segments"):
		s.Segments = d.uint(b, "segments")
	default:
		s.Segments = s.Packets + d.uint(b, "extra_segments")
	}
	switch {
	case d.has("wire_bytes"):
		s.WireBytes = d.uint(b, "wire_bytes")
	default:
		s.WireBytes = s.Bytes + d.uint(b, "extra_wire_bytes")
	}
}

// keyFields and statsFields are what a flow table must have to be drained
// at all: a flow needs its identity and its counts.
var (
	keyFields   = []string{"src_addr", "dst_addr", "ifindex", "proto", "direction"}
	statsFields = []string{"packets", "bytes"}
)

// eventOf decodes a struct flow_event (key, stats, reason, err) of any
// layout.
func (d *structDec) eventOf(b []byte, ev *flow.Event) error {
	kd, kb, ok := d.sub(b, "key")
	if !ok {
		return errors.New("flow event without a key")
	}
	sd, sb, ok := d.sub(b, "stats")
	if !ok {
		return errors.New("flow event without stats")
	}
	kd.keyOf(kb, &ev.Key)
	sd.statsOf(sb, &ev.Stats)
	ev.Reason = flow.EventReason(d.uint(b, "reason"))
	ev.Errno = -int32(uint32(d.uint(b, "err")))
	return nil
}
