package sketch

import (
	"encoding/binary"
	"fmt"
)

// Sizes of the records the datapath writes, in bytes.
const (
	// CellSize is the size of one flow-set cell (struct sketch_cell).
	CellSize = 88
	// CounterSize is the size of one count-min counter pair.
	CounterSize = 16
)

// Byte offsets of a cell's fields: those of the C struct
//
//	struct sketch_cell {
//		__u8  key_xor[64];
//		__u32 flow_count;
//		__u32 check;
//		__u64 packets;
//		__u64 bytes;
//	};
//
// which has no implicit padding on any ABI (each field is at a multiple of
// its alignment and the size is a multiple of 8).
const (
	offKeyXor    = 0
	offFlowCount = 64
	offCheck     = 68
	offPackets   = 72
	offBytes     = 80
)

// byteOrder is the order the kernel writes the maps in. The datapath is built
// for bpfel only (internal/datapath/gen.go), so this is little-endian on every
// host the objects load on; the native order says where the bytes come from.
var byteOrder = binary.NativeEndian

// Cell is one cell of a flow set, with the layout of struct sketch_cell.
//
// Check is where the C struct's padding would be. The design asked for a
// zero pad there; it holds instead a checksum of the cell's packets (see the
// package documentation) that lets Decode tell a cell whose packets all
// belong to its flows from one that also holds traffic the flow filter let
// in without a key. It costs no memory and one 32-bit add per cell.
type Cell struct {
	KeyXor    Key    // XOR of the keys of the flows inserted in the cell
	FlowCount uint32 // number of flows inserted in the cell
	Check     uint32 // sum over packets of the packet's flow's check term, mod 2^32
	Packets   uint64 // packets of all the cell's flows (and of flow-filter false positives)
	Bytes     uint64 // bytes of the same packets
}

// ParseCell decodes a cell from the first CellSize bytes of b.
func ParseCell(b []byte) Cell {
	_ = b[CellSize-1]
	var c Cell
	copy(c.KeyXor[:], b[offKeyXor:offKeyXor+KeySize])
	c.FlowCount = byteOrder.Uint32(b[offFlowCount:])
	c.Check = byteOrder.Uint32(b[offCheck:])
	c.Packets = byteOrder.Uint64(b[offPackets:])
	c.Bytes = byteOrder.Uint64(b[offBytes:])
	return c
}

// Put encodes the cell into the first CellSize bytes of b.
func (c *Cell) Put(b []byte) {
	_ = b[CellSize-1]
	copy(b[offKeyXor:], c.KeyXor[:])
	byteOrder.PutUint32(b[offFlowCount:], c.FlowCount)
	byteOrder.PutUint32(b[offCheck:], c.Check)
	byteOrder.PutUint64(b[offPackets:], c.Packets)
	byteOrder.PutUint64(b[offBytes:], c.Bytes)
}

// checkLen returns an error unless b holds exactly n records of size each.
func checkLen(what string, b []byte, n, size int) error {
	if len(b) != n*size {
		return fmt.Errorf("%s: %d bytes, want %d (%d × %d)", what, len(b), n*size, n, size)
	}
	return nil
}
