package sketch

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// TestCellLayout checks that Cell is struct sketch_cell: 88 bytes, the fields
// at the C offsets, so the table can also be read by casting, and that
// ParseCell reads bytes written field by field in little-endian order.
func TestCellLayout(t *testing.T) {
	var c Cell
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"size", unsafe.Sizeof(c), CellSize},
		{"key_xor", unsafe.Offsetof(c.KeyXor), offKeyXor},
		{"flow_count", unsafe.Offsetof(c.FlowCount), offFlowCount},
		{"check", unsafe.Offsetof(c.Check), offCheck},
		{"packets", unsafe.Offsetof(c.Packets), offPackets},
		{"bytes", unsafe.Offsetof(c.Bytes), offBytes},
		{"C offset of flow_count", offFlowCount, 64},
		{"C offset of check", offCheck, 68},
		{"C offset of packets", offPackets, 72},
		{"C offset of bytes", offBytes, 80},
	} {
		if f.got != f.want {
			t.Errorf("%s: %d, want %d", f.name, f.got, f.want)
		}
	}
	if byteOrder.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the byte-level check is for little-endian hosts, the only ones the bpfel datapath loads on")
	}
	b := make([]byte, CellSize)
	for i := range KeySize {
		b[i] = byte(i + 1)
	}
	binary.LittleEndian.PutUint32(b[64:], 0x01020304)
	binary.LittleEndian.PutUint32(b[68:], 0xA0B0C0D0)
	binary.LittleEndian.PutUint64(b[72:], 0x1122334455667788)
	binary.LittleEndian.PutUint64(b[80:], 0x99AABBCCDDEEFF00)
	c = ParseCell(b)
	if c.KeyXor[0] != 1 || c.KeyXor[63] != 64 || c.FlowCount != 0x01020304 || c.Check != 0xA0B0C0D0 ||
		c.Packets != 0x1122334455667788 || c.Bytes != 0x99AABBCCDDEEFF00 {
		t.Errorf("ParseCell = %+v", c)
	}
	out := make([]byte, CellSize)
	c.Put(out)
	if string(out) != string(b) {
		t.Errorf("Put wrote %x, want %x", out, b)
	}
	// The Go struct's own memory is the C struct's.
	if raw := unsafe.Slice((*byte)(unsafe.Pointer(&c)), CellSize); string(raw) != string(b) {
		t.Errorf("Cell memory %x, want %x", raw, b)
	}
}

// TestEncoderCells checks the encoder's insert through the Cell view: a new
// flow XORs its key and counts one flow in each of its K cells, every packet
// adds to them, a known flow adds no key.
func TestEncoderCells(t *testing.T) {
	p := params(t, 1000, 1009, 10)
	e := newEncoder(t, p)
	k := goldenKeys()[2]
	if !e.Add(&k, 100) {
		t.Fatal("first packet: not inserted")
	}
	if e.Add(&k, 50) {
		t.Fatal("second packet: inserted again")
	}
	h := hashKey(&k)
	idx := h.cells(1000)
	for c := range p.FlowSet.Cells {
		got := ParseCell(e.FlowSet[c*CellSize:])
		want := Cell{}
		for j := range K {
			if idx[j] == c {
				want = Cell{KeyXor: k, FlowCount: 1, Check: 2 * h.check(), Packets: 2, Bytes: 150}
			}
		}
		if got != want {
			t.Errorf("cell %d: %+v, want %+v", c, got, want)
		}
	}
}
