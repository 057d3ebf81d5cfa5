package datapath

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ring reads a BPF ring buffer without giving its space back until told:
// the consumer position the kernel sees moves only when Release is called,
// while the reader's own cursor runs ahead of it.
//
// This is what makes diverted packets survive a crash of the agent. The
// kernel keeps everything between the consumer position and the producer's
// in the (pinned) ring buffer, so the agent releases a stretch only once the
// records those events went into are stored; the store records the position
// with the records (flow.Mark.RingPos), so that an agent that restarts after
// the store took them but before the release skips them instead of counting
// them twice.
//
// cilium/ebpf's ringbuf.Reader cannot do this: it gives every record's
// space back as it returns it. The layout and the memory ordering below
// follow it (and kernel/bpf/ringbuf.c): a consumer page mapped read-write,
// then the producer page and the data mapped read-only, the data twice in a
// row so that a record that wraps reads as one piece.
type ring struct {
	mu   sync.RWMutex // Read and Release hold it shared, Close exclusively
	cons []byte       // consumer page
	prod []byte       // producer page, then the data twice
	data []byte
	mask uint64

	consPos, prodPos *uint64 // in the mapped pages: atomic access only
	cursor           uint64  // the next record to read (Read's goroutine)

	epfd, evfd int
	events     []unix.EpollEvent
	drainAt    atomic.Uint64 // Drain: the producer position to read up to, +1 (0: not draining)
	closed     atomic.Bool
	stop       chan struct{} // closed by Close: interrupts a timed wait
}

const (
	ringHdrSize    = 8
	ringBusyBit    = 1 << 31
	ringDiscardBit = 1 << 30
	// ringPoll is how often Read looks for new records while it holds
	// some unreleased: the kernel only wakes a reader whose consumer
	// position equals the record it commits, and level-triggered epoll
	// reports data as long as anything is unreleased, so it cannot tell
	// new records from held ones then.
	ringPoll = 10 * time.Millisecond
)

// errRingEmpty is returned by next when no record is ready.
var errRingEmpty = errors.New("ring buffer empty")

func openRing(m *ebpf.Map) (*ring, error) {
	size := int(m.MaxEntries())
	if size == 0 || size&(size-1) != 0 {
		return nil, fmt.Errorf("ring buffer size %d is not a power of two", size)
	}
	page := os.Getpagesize()
	cons, err := unix.Mmap(m.FD(), 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map ring buffer consumer page: %w", err)
	}
	prod, err := unix.Mmap(m.FD(), int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(cons)
		return nil, fmt.Errorf("map ring buffer data: %w", err)
	}
	r := &ring{
		cons: cons, prod: prod, data: prod[page:], mask: uint64(size - 1),
		consPos: (*uint64)(unsafe.Pointer(&cons[0])),
		prodPos: (*uint64)(unsafe.Pointer(&prod[0])),
		epfd:    -1, evfd: -1,
		events: make([]unix.EpollEvent, 2),
		stop:   make(chan struct{}),
	}
	r.cursor = atomic.LoadUint64(r.consPos)
	if err := r.initPoll(m.FD()); err != nil {
		r.unmap()
		return nil, err
	}
	return r, nil
}

func (r *ring) initPoll(mapFD int) error {
	var err error
	if r.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	if r.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		unix.Close(r.epfd)
		return fmt.Errorf("eventfd: %w", err)
	}
	for _, fd := range []int{mapFD, r.evfd} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(r.epfd)
			unix.Close(r.evfd)
			return fmt.Errorf("epoll add: %w", err)
		}
	}
	return nil
}

func (r *ring) unmap() {
	unix.Munmap(r.prod)
	unix.Munmap(r.cons)
	r.prod, r.cons, r.data = nil, nil, nil
}

// skipTo moves the cursor, and the consumer position, forward to pos (a
// record boundary the store says it holds), never backward.
func (r *ring) skipTo(pos uint64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed.Load() {
		return
	}
	if prod := atomic.LoadUint64(r.prodPos); pos > prod {
		pos = prod // a position from another ring buffer of the same set id: never past the data
	}
	if pos > r.cursor {
		r.cursor = pos
	}
	if pos > atomic.LoadUint64(r.consPos) {
		atomic.StoreUint64(r.consPos, pos)
	}
}

// position is the cursor: the end of the last record read.
func (r *ring) position() uint64 { return r.cursor }

// next returns the next record's data (valid until the space is released)
// and the position after it, or errRingEmpty.
func (r *ring) next() ([]byte, uint64, error) {
	for {
		prod := atomic.LoadUint64(r.prodPos)
		if r.cursor >= prod {
			return nil, 0, errRingEmpty
		}
		if prod-r.cursor < ringHdrSize {
			return nil, 0, fmt.Errorf("ring buffer: %d bytes, short of a record header", prod-r.cursor)
		}
		// An atomic load of the length orders it before the data, as the
		// kernel's xchg that clears the busy bit orders the data before it.
		n := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[r.cursor&r.mask])))
		if n&ringBusyBit != 0 {
			return nil, 0, errRingEmpty // reserved, not yet committed
		}
		size := uint64(n &^ (ringBusyBit | ringDiscardBit))
		start := r.cursor + ringHdrSize
		end := start + (size+7)&^7
		if end > prod {
			return nil, 0, fmt.Errorf("ring buffer: record of %d bytes runs past the producer", size)
		}
		r.cursor = end
		if n&ringDiscardBit != 0 {
			continue
		}
		off := start & r.mask
		return r.data[off : off+size], end, nil
	}
}

// read blocks until a record is ready and returns it; after drain, it
// returns ErrDrained once the cursor reached the producer position of the
// moment drain was called; after close, os.ErrClosed.
func (r *ring) read() ([]byte, uint64, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for {
		if r.closed.Load() {
			return nil, 0, os.ErrClosed
		}
		// The consumer position first: once it equals the cursor it
		// stays there (Release never passes the cursor), and then the
		// kernel wakes us for the next record.
		caughtUp := atomic.LoadUint64(r.consPos) >= r.cursor
		b, pos, err := r.next()
		if err == nil || !errors.Is(err, errRingEmpty) {
			return b, pos, err
		}
		if at := r.drainAt.Load(); at != 0 && r.cursor >= at-1 {
			return nil, 0, ErrDrained
		}
		if caughtUp {
			if err := r.waitEpoll(); err != nil {
				return nil, 0, err
			}
			continue
		}
		select {
		case <-r.stop:
		case <-time.After(ringPoll):
		}
	}
}

func (r *ring) waitEpoll() error {
	_, err := unix.EpollWait(r.epfd, r.events, -1)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return fmt.Errorf("wait for ring buffer: %w", err)
	}
	return nil
}

// release gives the space up to pos back to the kernel.
func (r *ring) release(pos uint64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed.Load() {
		return
	}
	if pos > atomic.LoadUint64(r.consPos) {
		atomic.StoreUint64(r.consPos, pos)
	}
}

// drain makes read return what the ring buffer holds now, then ErrDrained.
func (r *ring) drain() error {
	r.drainAt.Store(atomic.LoadUint64(r.prodPos) + 1)
	return r.kick()
}

func (r *ring) kick() error {
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	if _, err := unix.Write(r.evfd, one); err != nil && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("wake ring buffer reader: %w", err)
	}
	return nil
}

// close interrupts read and unmaps the ring buffer. Unreleased space stays
// unreleased: the next reader of a pinned ring buffer reads it again.
func (r *ring) close() error {
	if r.closed.Swap(true) {
		return nil
	}
	close(r.stop)
	err := r.kick()
	r.mu.Lock()
	defer r.mu.Unlock()
	unix.Close(r.epfd)
	unix.Close(r.evfd)
	r.unmap()
	return err
}
