// Command flood sends 64-byte UDP frames out of one interface as fast as one
// CPU can, through an AF_PACKET socket that bypasses the qdisc, with
// sendmmsg batches. On a veth the peer's receive path (and its TC hook) runs
// on the sending CPU, so the packets per second it reaches measure the
// per-packet cost of everything on that path.
//
// It stops after -duration or -count packets, whichever comes first, and
// prints one line: "sent N packets in S s: R pps".
//
// The frames carry locally administered MACs no interface has and addresses
// in 198.18.0.0/15 (RFC 2544's benchmark range): the receiving veth drops
// them after its TC hook. Flow i of -flows has source port 10000+i%50000
// and source address 198.18.0.0 + i/50000.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	iface := flag.String("iface", "", "interface to send on")
	flows := flag.Int("flows", 1, "distinct flows (source ports), cycled")
	size := flag.Int("size", 64, "frame size in bytes, without FCS")
	duration := flag.Duration("duration", 5*time.Second, "stop after this long")
	count := flag.Uint64("count", 1<<40, "stop after this many packets")
	batch := flag.Int("batch", 64, "frames per sendmmsg")
	flag.Parse()
	log.SetFlags(0)
	if *iface == "" || *flows < 1 || *flows > 1<<20 || *size < 60 || *size > 1514 || *batch < 1 || *batch > 1024 {
		log.Fatal("flood: need -iface, 1 <= -flows <= 1048576, 60 <= -size <= 1514, 1 <= -batch <= 1024")
	}
	ifi, err := net.InterfaceByName(*iface)
	if err != nil {
		log.Fatal(err)
	}

	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0) // protocol 0: send only
	if err != nil {
		log.Fatal("socket: ", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		log.Fatal("PACKET_QDISC_BYPASS: ", err)
	}
	sa := &unix.RawSockaddrLinklayer{Family: unix.AF_PACKET, Ifindex: int32(ifi.Index), Halen: 6}
	if err := bind(fd, sa); err != nil {
		log.Fatal("bind: ", err)
	}

	frames := make([][]byte, *flows)
	for i := range frames {
		frames[i] = frame(i, *size)
	}
	iovs := make([]unix.Iovec, *batch)
	msgs := make([]unix.Mmsghdr, *batch)
	for i := range msgs {
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}

	var stop atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; stop.Store(true) }()
	timer := time.AfterFunc(*duration, func() { stop.Store(true) })
	defer timer.Stop()

	var sent uint64
	next := 0
	start := time.Now()
	for !stop.Load() && sent < *count {
		n := *batch
		if left := *count - sent; left < uint64(n) {
			n = int(left)
		}
		for i := range n {
			iovs[i].Base = &frames[next][0]
			iovs[i].SetLen(len(frames[next]))
			if next++; next == len(frames) {
				next = 0
			}
		}
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(n), 0, 0, 0)
		if errno != 0 {
			if errno == unix.ENOBUFS || errno == unix.EAGAIN || errno == unix.EINTR {
				continue
			}
			log.Fatal("sendmmsg: ", errno)
		}
		sent += uint64(r)
		// Frames the call did not take are sent again next time round:
		// rewind so that each flow still gets its share.
		next = (next - n + int(r)) % len(frames)
		if next < 0 {
			next += len(frames)
		}
	}
	elapsed := time.Since(start).Seconds()
	fmt.Printf("sent %d packets in %.3f s: %.0f pps\n", sent, elapsed, float64(sent)/elapsed)
}

func bind(fd int, sa *unix.RawSockaddrLinklayer) error {
	_, _, errno := unix.Syscall(unix.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(sa)), unsafe.Sizeof(*sa))
	if errno != 0 {
		return errno
	}
	return nil
}

// frame builds a UDP/IPv4 frame of flow i, size bytes long.
func frame(i, size int) []byte {
	b := make([]byte, size)
	copy(b[0:6], []byte{0x02, 0x4c, 0x42, 0x00, 0x00, 0x02})  // dst MAC
	copy(b[6:12], []byte{0x02, 0x4c, 0x42, 0x00, 0x00, 0x01}) // src MAC
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_IP)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	ip[8] = 64
	ip[9] = unix.IPPROTO_UDP
	copy(ip[12:16], []byte{198, 18, byte(i / 50000 >> 8), byte(i / 50000)})
	copy(ip[16:20], []byte{198, 19, 0, 1})
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], uint16(10000+i%50000))
	binary.BigEndian.PutUint16(udp[2:], 9) // discard
	binary.BigEndian.PutUint16(udp[4:], uint16(size-34))
	// UDP checksum 0: none, which IPv4 allows.
	return b
}

func checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
