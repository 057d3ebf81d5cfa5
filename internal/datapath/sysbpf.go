package datapath

import (
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Two bpf(2) commands cilium/ebpf does not offer in the form a table of
// another layout needs: the BTF type ids of a map's key and value (MapInfo
// hides them), and a batch lookup into plain byte buffers (its BatchLookup
// wants slices of fixed-size Go types, and such a table's types are only
// known at run time).

const (
	bpfMapLookupBatch = 24 // BPF_MAP_LOOKUP_BATCH
	bpfObjGetInfoByFD = 15 // BPF_OBJ_GET_INFO_BY_FD
)

// bpfMapInfo is the head of struct bpf_map_info (include/uapi/linux/bpf.h)
// up to the fields read here; the kernel fills what fits in info_len.
type bpfMapInfo struct {
	Type, ID, KeySize, ValueSize, MaxEntries, MapFlags uint32
	Name                                               [16]byte
	Ifindex, BtfVmlinuxValueTypeID                     uint32
	NetnsDev, NetnsIno                                 uint64
	BtfID, BtfKeyTypeID, BtfValueTypeID, BtfVmlinuxID  uint32
	MapExtra                                           uint64
}

type objInfoAttr struct {
	Fd, InfoLen uint32
	Info        uint64
}

// mapTypeIDs returns the BTF type ids of m's key and value (0 for a map
// created without them).
func mapTypeIDs(m *ebpf.Map) (key, value uint32, err error) {
	var info bpfMapInfo
	attr := objInfoAttr{Fd: uint32(m.FD()), InfoLen: uint32(unsafe.Sizeof(info)), Info: uint64(uintptr(unsafe.Pointer(&info)))}
	if _, _, errno := unix.Syscall(unix.SYS_BPF, bpfObjGetInfoByFD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)); errno != 0 {
		return 0, 0, fmt.Errorf("map info: %w", errno)
	}
	return info.BtfKeyTypeID, info.BtfValueTypeID, nil
}

type batchAttr struct {
	InBatch, OutBatch, Keys, Values uint64
	Count, MapFd                    uint32
	ElemFlags, Flags                uint64
}

// rawBatch reads a hash map without deleting anything, n entries at a
// time, into byte buffers: keys of keySize bytes, values of valueSize
// bytes (for a per-CPU map, one value per possible CPU, each padded to 8
// bytes: valueSize is then that whole stride).
type rawBatch struct {
	m                  *ebpf.Map
	keySize, valueSize int
	keys, values       []byte
	in, out            [8]byte // cursors: hash maps take a u32
	started, done      bool
}

func newRawBatch(m *ebpf.Map, keySize, valueSize, n int) *rawBatch {
	return &rawBatch{m: m, keySize: keySize, valueSize: valueSize,
		keys: make([]byte, n*keySize), values: make([]byte, n*valueSize)}
}

// next reads the next batch and returns its entry count; 0 at the end.
func (b *rawBatch) next() (int, error) {
	if b.done {
		return 0, nil
	}
	attr := batchAttr{
		OutBatch: uint64(uintptr(unsafe.Pointer(&b.out[0]))),
		Keys:     uint64(uintptr(unsafe.Pointer(&b.keys[0]))),
		Values:   uint64(uintptr(unsafe.Pointer(&b.values[0]))),
		Count:    uint32(len(b.keys) / b.keySize),
		MapFd:    uint32(b.m.FD()),
	}
	if b.started {
		attr.InBatch = uint64(uintptr(unsafe.Pointer(&b.in[0])))
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfMapLookupBatch, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	b.started = true
	b.in = b.out
	switch {
	case errno == unix.ENOENT:
		b.done = true
	case errno != 0:
		return 0, fmt.Errorf("batch lookup: %w", errno)
	}
	return int(attr.Count), nil
}

func (b *rawBatch) key(i int) []byte   { return b.keys[i*b.keySize : (i+1)*b.keySize] }
func (b *rawBatch) value(i int) []byte { return b.values[i*b.valueSize : (i+1)*b.valueSize] }

const bpfMapUpdateBatch = 26 // BPF_MAP_UPDATE_BATCH

// arrayLookupBatch reads len(keys)/4 consecutive entries of an array map
// from index start into vals (for a per-CPU array, each entry's values for
// every possible CPU, each padded to 8 bytes), and returns how many it read.
// The kernel's batch walks an array from the key after in_batch: start-1.
func arrayLookupBatch(m *ebpf.Map, start uint32, keys, vals []byte) (int, error) {
	var in, out [4]byte
	attr := batchAttr{
		OutBatch: uint64(uintptr(unsafe.Pointer(&out[0]))),
		Keys:     uint64(uintptr(unsafe.Pointer(&keys[0]))),
		Values:   uint64(uintptr(unsafe.Pointer(&vals[0]))),
		Count:    uint32(len(keys) / 4),
		MapFd:    uint32(m.FD()),
	}
	if start > 0 {
		*(*uint32)(unsafe.Pointer(&in[0])) = start - 1
		attr.InBatch = uint64(uintptr(unsafe.Pointer(&in[0])))
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfMapLookupBatch, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 && errno != unix.ENOENT {
		return 0, fmt.Errorf("batch lookup: %w", errno)
	}
	return int(attr.Count), nil
}

// arrayUpdateBatch writes n entries of an array map: keys holds n 32-bit
// indexes, vals their values (per-CPU: every possible CPU's, as above).
func arrayUpdateBatch(m *ebpf.Map, keys, vals []byte, n int) error {
	attr := batchAttr{
		Keys:   uint64(uintptr(unsafe.Pointer(&keys[0]))),
		Values: uint64(uintptr(unsafe.Pointer(&vals[0]))),
		Count:  uint32(n),
		MapFd:  uint32(m.FD()),
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfMapUpdateBatch, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return fmt.Errorf("batch update: %w", errno)
	}
	if int(attr.Count) != n {
		return fmt.Errorf("batch update wrote %d of %d entries", attr.Count, n)
	}
	return nil
}
