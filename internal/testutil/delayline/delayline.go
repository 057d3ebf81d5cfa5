// Package delayline is a wire with a known delay, for tests on a kernel
// without netem: a userspace forwarder between two interfaces that holds
// every frame for a fixed time, then sends it out of the other interface.
//
// It reads each interface with an AF_PACKET socket that ignores the frames
// sent on it (PACKET_IGNORE_OUTGOING), so that what it forwards is not read
// back. Both sockets carry a virtio-net header with each frame
// (PACKET_VNET_HDR), passed on as it came: a veth hands its peer frames
// whose checksum is left to the device (a VXLAN packet's UDP checksum,
// with checksum offload on) and TCP super-packets (TSO on), and the
// header tells the sending socket to finish the checksum and to keep the
// super-packet one, as a wire would have carried the segments.
package delayline

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// queueLen bounds the frames in flight per direction: at 20 ms of
	// delay it holds 200 kpps; a frame that finds it full is dropped and
	// counted.
	queueLen = 4096
	// pollEvery is how often a blocked read checks for Close.
	pollEvery = 50 * time.Millisecond
	// maxFrame holds a super-packet and its virtio-net header.
	maxFrame = 65536 + 64
)

// Line forwards frames both ways between two interfaces.
type Line struct {
	delay   time.Duration
	fds     [2]int
	stop    chan struct{}
	wg      sync.WaitGroup
	fwd     [2]atomic.Uint64
	dropped atomic.Uint64
	closed  sync.Once
}

type frame struct {
	due  time.Time
	data []byte
}

// Start opens the line between the interfaces named a and b of the
// calling thread's network namespace (run it inside the namespace, e.g.
// with testutil.NS.Do: the sockets stay there) and starts forwarding.
func Start(a, b string, delay time.Duration) (*Line, error) {
	l := &Line{delay: delay, fds: [2]int{-1, -1}, stop: make(chan struct{})}
	for i, name := range []string{a, b} {
		fd, err := open(name)
		if err != nil {
			l.closeFDs()
			return nil, err
		}
		l.fds[i] = fd
	}
	for i := range 2 {
		q := make(chan frame, queueLen)
		l.wg.Add(2)
		go l.read(l.fds[i], q)
		go l.write(l.fds[1-i], q, &l.fwd[i])
	}
	return l, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func open(name string) (int, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return -1, fmt.Errorf("delay line: %w", err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return -1, fmt.Errorf("delay line: packet socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("delay line: %s on %s: %w", what, name, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("ignore outgoing", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return fail("virtio-net header", err)
	}
	tv := unix.NsecToTimeval(pollEvery.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("receive timeout", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index}); err != nil {
		return fail("bind", err)
	}
	return fd, nil
}

// read takes frames in as they arrive, each due delay later.
func (l *Line) read(fd int, q chan<- frame) {
	defer l.wg.Done()
	defer close(q)
	buf := make([]byte, maxFrame)
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return
		}
		f := frame{due: time.Now().Add(l.delay), data: append([]byte(nil), buf[:n]...)}
		select {
		case q <- f:
		default:
			l.dropped.Add(1)
		}
	}
}

// write sends each frame out when it is due, in arrival order (every frame
// is held the same time, so that is due order).
func (l *Line) write(fd int, q <-chan frame, fwd *atomic.Uint64) {
	defer l.wg.Done()
	for f := range q {
		if d := time.Until(f.due); d > 0 {
			select {
			case <-time.After(d):
			case <-l.stop:
				return
			}
		}
		if _, err := unix.Write(fd, f.data); err != nil {
			l.dropped.Add(1)
			continue
		}
		fwd.Add(1)
	}
}

// Forwarded are the frames sent on from a to b, and from b to a.
func (l *Line) Forwarded() (aToB, bToA uint64) { return l.fwd[0].Load(), l.fwd[1].Load() }

// Dropped are frames lost: a full queue, or a send the kernel refused.
func (l *Line) Dropped() uint64 { return l.dropped.Load() }

// Close stops forwarding (frames still held are lost) and closes the
// sockets.
func (l *Line) Close() error {
	l.closed.Do(func() {
		close(l.stop)
		l.wg.Wait()
		l.closeFDs()
	})
	return nil
}

func (l *Line) closeFDs() {
	for _, fd := range l.fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
