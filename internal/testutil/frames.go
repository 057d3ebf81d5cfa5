package testutil

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// VLANTag is one tag of a frame: TPID 0x8100 (802.1Q) or 0x88a8 (802.1ad).
type VLANTag struct {
	TPID uint16
	VID  uint16
}

// UDPFrame returns an Ethernet frame of exactly size bytes from src to dst:
// the tags, then IPv4/UDP from 10.99.0.1:srcPort to 10.99.0.2:9 with a zero
// payload. The machine has no 802.1Q devices: tagged frames come from here.
func UDPFrame(src, dst net.HardwareAddr, tags []VLANTag, srcPort uint16, size int) []byte {
	hdr := 14 + 4*len(tags) + 20 + 8
	if size < hdr {
		panic(fmt.Sprintf("UDPFrame: %d bytes cannot hold %d bytes of headers", size, hdr))
	}
	f := make([]byte, size)
	copy(f[0:6], dst)
	copy(f[6:12], src)
	off := 12
	for _, tag := range tags {
		binary.BigEndian.PutUint16(f[off:], tag.TPID)
		binary.BigEndian.PutUint16(f[off+2:], tag.VID&0x0fff)
		off += 4
	}
	binary.BigEndian.PutUint16(f[off:], 0x0800)
	off += 2
	ip := f[off : off+20]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(size-off))
	copy(ip[12:16], []byte{10, 99, 0, 1})
	copy(ip[16:20], []byte{10, 99, 0, 2})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := f[off+20 : off+28]
	binary.BigEndian.PutUint16(udp[0:], srcPort)
	binary.BigEndian.PutUint16(udp[2:], 9)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-off-20))
	return f
}

// SendOptions change how SendFrames sends.
type SendOptions struct {
	// Bypass sets PACKET_QDISC_BYPASS on the socket: its frames go
	// straight to the driver, past the qdisc and the TC egress hook, as
	// any process with CAP_NET_RAW may have them do.
	Bypass bool
	// AcceptDrops takes a frame the device refused (ENOBUFS: the driver
	// dropped it, e.g. a veth whose peer is down) as sent, and counts it,
	// instead of failing the test.
	AcceptDrops bool
}

// SendFrames writes each frame once, as it is, from an AF_PACKET socket
// bound to ifname in ns, and returns how many the device refused (only ever
// non-zero with AcceptDrops).
func (ns *NS) SendFrames(t testing.TB, ifname string, frames [][]byte, opts SendOptions) (dropped int) {
	t.Helper()
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		// Protocol 0: the socket receives nothing.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		defer unix.Close(fd)
		if opts.Bypass {
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
				return fmt.Errorf("PACKET_QDISC_BYPASS: %w", err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index}); err != nil {
			return fmt.Errorf("bind to %s: %w", ifname, err)
		}
		for i, f := range frames {
			n, err := unix.Write(fd, f)
			if errors.Is(err, unix.ENOBUFS) && opts.AcceptDrops {
				dropped++
				continue
			}
			if err != nil {
				return fmt.Errorf("frame %d of %d: %w", i, len(frames), err)
			}
			if n != len(f) {
				return fmt.Errorf("frame %d: wrote %d of %d bytes", i, n, len(f))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("in %s: send frames on %s: %v", ns.Name, ifname, err)
	}
	return dropped
}
