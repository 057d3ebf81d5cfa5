package store

import (
	"syscall"
	"unsafe"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault a range in,
// writable, in one call.
const madvPopulateWrite = 23

// populate faults in the memory of a fresh slice that its first use reads
// before it writes (a table's probes), in one system call. Left to the
// faults, each page of it would fault twice: the read maps the shared zero
// page, the write then copies it; and a fault costs far more than the page
// it maps, most of all in a virtual machine. Only the whole pages inside
// the slice are populated (a large allocation starts on a page); on a
// kernel without the advice, or for a small slice, nothing is done.
func populate[T any](s []T) []T {
	const page = 4096
	size := uintptr(len(s)) * unsafe.Sizeof(*new(T))
	if size < 16*page {
		return s
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	from, to := (start+page-1)&^(page-1), (start+size)&^(page-1)
	if to > from {
		// The slice keeps the memory alive across the call.
		syscall.Syscall(syscall.SYS_MADVISE, from, to-from, madvPopulateWrite)
	}
	return s
}
