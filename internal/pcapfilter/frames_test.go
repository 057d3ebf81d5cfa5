package pcapfilter

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// The frames every expression is tried on: a deterministic mix chosen to
// tell the primitives apart (directions, IPv4 options and fragments, IPv6
// extension and fragment headers, ARP and RARP, multicast and broadcast,
// sizes either side of the length tests).

var (
	macA  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	macB  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	macC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0c}
	bcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	mc4   = net.HardwareAddr{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}
	mc6   = net.HardwareAddr{0x33, 0x33, 0x00, 0x00, 0x00, 0xfb}
	lldp  = net.HardwareAddr{0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e}
)

func ip(s string) net.IP { return netip.MustParseAddr(s).AsSlice() }

type frameBuilder struct {
	t      testing.TB
	frames [][]byte
	names  []string
}

// add serialises layers with lengths and checksums computed.
func (fb *frameBuilder) add(name string, ls ...gopacket.SerializableLayer) {
	fb.t.Helper()
	for _, l := range ls {
		if nl, ok := l.(interface {
			SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
		}); ok {
			for _, n := range ls {
				if nw, ok := n.(gopacket.NetworkLayer); ok {
					_ = nl.SetNetworkLayerForChecksum(nw)
				}
			}
		}
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		fb.t.Fatalf("frame %q: %v", name, err)
	}
	f := append([]byte(nil), buf.Bytes()...)
	for len(f) < 60 { // the minimum Ethernet frame, as a NIC pads it
		f = append(f, 0)
	}
	fb.frames = append(fb.frames, f)
	fb.names = append(fb.names, name)
}

func eth(src, dst net.HardwareAddr, t layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: t}
}

func v4(src, dst string, p layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: p, SrcIP: ip(src), DstIP: ip(dst), Id: 1}
}

func v6(src, dst string, next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: ip(src), DstIP: ip(dst)}
}

func tcp(sp, dp uint16, flags string) *layers.TCP {
	t := &layers.TCP{SrcPort: layers.TCPPort(sp), DstPort: layers.TCPPort(dp), Seq: 1000, Window: 65535, DataOffset: 5}
	for _, c := range flags {
		switch c {
		case 'S':
			t.SYN = true
		case 'A':
			t.ACK = true
		case 'F':
			t.FIN = true
		case 'R':
			t.RST = true
		case 'P':
			t.PSH = true
		case 'U':
			t.URG = true
		case 'E':
			t.ECE = true
		case 'C':
			t.CWR = true
		}
	}
	return t
}

func udp(sp, dp uint16) *layers.UDP {
	return &layers.UDP{SrcPort: layers.UDPPort(sp), DstPort: layers.UDPPort(dp)}
}

func payload(n int, fill byte) gopacket.Payload { return bytes.Repeat([]byte{fill}, n) }

// sctpHdr is an SCTP common header and a DATA chunk stub.
func sctpHdr(sp, dp uint16) gopacket.Payload {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:], sp)
	binary.BigEndian.PutUint16(b[2:], dp)
	return b
}

// buildFrames returns the test frames and their names.
func buildFrames(t testing.TB) ([][]byte, []string) {
	fb := &frameBuilder{t: t}
	E4, E6 := layers.EthernetTypeIPv4, layers.EthernetTypeIPv6
	T, U := layers.IPProtocolTCP, layers.IPProtocolUDP

	fb.add("v4 tcp syn 10.0.0.1:40000>10.0.0.2:80", eth(macA, macB, E4), v4("10.0.0.1", "10.0.0.2", T), tcp(40000, 80, "S"))
	fb.add("v4 tcp syn-ack 10.0.0.2:80>10.0.0.1:40000", eth(macB, macA, E4), v4("10.0.0.2", "10.0.0.1", T), tcp(80, 40000, "SA"))
	fb.add("v4 tcp ack+100B", eth(macA, macB, E4), v4("10.0.0.1", "10.0.0.2", T), tcp(40000, 80, "A"), payload(100, 'x'))
	fb.add("v4 tcp fin-ack", eth(macA, macB, E4), v4("10.0.0.1", "10.0.0.2", T), tcp(40000, 80, "FA"))
	fb.add("v4 tcp rst-ack 10.0.0.2:80>10.0.0.1", eth(macB, macA, E4), v4("10.0.0.2", "10.0.0.1", T), tcp(80, 40000, "RA"))
	fb.add("v4 tcp psh-ack 192.168.1.5:51000>10.0.0.2:443 300B", eth(macC, macB, E4), v4("192.168.1.5", "10.0.0.2", T), tcp(51000, 443, "PA"), payload(300, 'y'))
	fb.add("v4 tcp ssh 10.0.0.1:22>192.168.1.5", eth(macA, macC, E4), v4("10.0.0.1", "192.168.1.5", T), tcp(22, 60000, "A"))
	fb.add("v4 tcp syn ece cwr 10.1.2.3:8080>172.16.5.4:5555", eth(macA, macB, E4), v4("10.1.2.3", "172.16.5.4", T), tcp(8080, 5555, "SEC"))
	opts := v4("10.0.0.1", "10.0.0.2", T)
	opts.Options = []layers.IPv4Option{{OptionType: 0x94, OptionLength: 4, OptionData: []byte{0, 0}}, {OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	fb.add("v4 options tcp 8000>8081", eth(macA, macB, E4), opts, tcp(8000, 8081, "S"))
	fb.add("v4 tcp urg 10.0.0.3:7999>8001", eth(macA, macB, E4), v4("10.0.0.3", "10.0.0.2", T), tcp(7999, 8001, "UA"))
	fb.add("v4 udp mdns multicast", eth(macA, mc4, E4), v4("10.0.0.1", "224.0.0.251", U), udp(5353, 5353), payload(20, 0))
	fb.add("v4 udp dns query", eth(macA, macB, E4), v4("10.0.0.1", "10.0.0.2", U), udp(40001, 53), payload(30, 1))
	fb.add("v4 udp dns answer", eth(macB, macA, E4), v4("10.0.0.2", "10.0.0.1", U), udp(53, 40001), payload(80, 2))
	fb.add("v4 udp dhcp broadcast", eth(macC, bcast, E4), v4("192.168.1.5", "255.255.255.255", U), udp(68, 67), payload(240, 0))
	fb.add("v4 udp src port 80", eth(macA, macB, E4), v4("10.0.0.1", "10.0.0.2", U), udp(80, 9999), gopacket.Payload{0x12, 0x34, 0, 0})
	fb.add("v4 icmp echo", eth(macA, macB, E4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 7, Seq: 1}, payload(56, 'p'))
	fb.add("v4 icmp echo reply", eth(macB, macA, E4), v4("10.0.0.2", "10.0.0.1", layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(0, 0), Id: 7, Seq: 1}, payload(56, 'p'))
	fb.add("v4 icmp unreachable", eth(macC, macA, E4), v4("192.168.1.1", "10.0.0.1", layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)}, payload(28, 0))
	first := v4("10.0.0.1", "10.0.0.2", U)
	first.Flags = layers.IPv4MoreFragments
	fb.add("v4 udp first fragment :53", eth(macA, macB, E4), first, udp(40002, 53), payload(64, 3))
	later := v4("10.0.0.1", "10.0.0.2", U)
	later.FragOffset = 185
	fb.add("v4 udp later fragment", eth(macA, macB, E4), later, gopacket.Payload{0x00, 0x35, 0x00, 0x35, 0, 8, 0, 0})
	laterTCP := v4("10.0.0.1", "10.0.0.2", T)
	laterTCP.FragOffset = 100
	fb.add("v4 tcp later fragment", eth(macA, macB, E4), laterTCP, gopacket.Payload{0x00, 0x50, 0x00, 0x50, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x12, 0, 0})
	fb.add("v4 igmp", eth(macA, mc4, E4), v4("10.0.0.1", "224.0.0.22", layers.IPProtocolIGMP), gopacket.Payload{0x22, 0, 0, 0, 0, 0, 0, 1})
	fb.add("v4 sctp 80>80", eth(macA, macB, E4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocolSCTP), sctpHdr(80, 80))
	fb.add("v6 tcp syn [2001:db8::1]:40000>[2001:db8::2]:80", eth(macA, macB, E6), v6("2001:db8::1", "2001:db8::2", T), tcp(40000, 80, "S"))
	fb.add("v6 tcp ack 1000B", eth(macB, macA, E6), v6("2001:db8::2", "2001:db8::1", T), tcp(80, 40000, "A"), payload(1000, 'z'))
	fb.add("v6 udp mdns multicast", eth(macA, mc6, E6), v6("2001:db8::1", "ff02::fb", U), udp(5353, 5353), payload(20, 0))
	fb.add("v6 udp 2001:db8:1::5>:53", eth(macC, macB, E6), v6("2001:db8:1::5", "2001:db8::2", U), udp(40000, 53), payload(30, 1))
	fb.add("v6 icmp6 echo", eth(macA, macB, E6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocolICMPv6),
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}, &layers.ICMPv6Echo{Identifier: 9, SeqNumber: 1})
	fb.add("v6 icmp6 echo reply", eth(macB, macA, E6), v6("2001:db8::2", "2001:db8::1", layers.IPProtocolICMPv6),
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(129, 0)}, &layers.ICMPv6Echo{Identifier: 9, SeqNumber: 1})
	fb.add("v6 icmp6 neighbor solicitation", eth(macA, net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 2}, E6), v6("fe80::1", "ff02::1:ff00:2", layers.IPProtocolICMPv6),
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(135, 0)}, &layers.ICMPv6NeighborSolicitation{TargetAddress: ip("2001:db8::2")})
	// Hop-by-hop options (PadN) then TCP: libpcap's `tcp` and `port` only
	// look at the fixed header's next header, so neither matches this.
	fb.add("v6 hop-by-hop then tcp :80", eth(macA, macB, E6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocolIPv6HopByHop),
		gopacket.Payload{byte(T), 0, 1, 4, 0, 0, 0, 0}, tcp(40000, 80, "S"))
	// A fragment header: `udp` looks behind one, `port` does not.
	fb.add("v6 fragment then udp :53", eth(macA, macB, E6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocolIPv6Fragment),
		gopacket.Payload{byte(U), 0, 0, 1, 0, 0, 0xab, 0xcd}, udp(40000, 53), payload(40, 4))
	fb.add("v6 fragment then icmp6 echo", eth(macA, macB, E6), v6("2001:db8::1", "2001:db8::2", layers.IPProtocolIPv6Fragment),
		gopacket.Payload{byte(layers.IPProtocolICMPv6), 0, 0, 1, 0, 0, 0xab, 0xce}, gopacket.Payload{128, 0, 0, 0, 0, 9, 0, 1})
	fb.add("v6 tcp rst-ack 8080>33000", eth(macC, macA, E6), v6("2001:db8:1::5", "2001:db8::1", T), tcp(8080, 33000, "RA"))
	arp := func(op uint16, sha net.HardwareAddr, spa string, tha net.HardwareAddr, tpa string) *layers.ARP {
		return &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: E4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: op, SourceHwAddress: sha, SourceProtAddress: ip(spa).To4(), DstHwAddress: tha, DstProtAddress: ip(tpa).To4()}
	}
	fb.add("arp who-has 10.0.0.2", eth(macA, bcast, layers.EthernetTypeARP), arp(1, macA, "10.0.0.1", make(net.HardwareAddr, 6), "10.0.0.2"))
	fb.add("arp reply 10.0.0.2", eth(macB, macA, layers.EthernetTypeARP), arp(2, macB, "10.0.0.2", macA, "10.0.0.1"))
	fb.add("rarp request", eth(macC, bcast, layers.EthernetType(0x8035)), arp(3, macC, "0.0.0.0", macC, "10.0.0.9"))
	fb.add("lldp", eth(macA, lldp, layers.EthernetType(0x88cc)), payload(46, 0x11))
	fb.add("v4 tcp nfs 1400B from macC", eth(macC, macB, E4), v4("10.0.0.5", "10.0.0.6", T), tcp(1024, 2049, "PA"), payload(1400, 'n'))
	fb.add("v4 udp tiny", eth(macA, macB, E4), v4("10.0.0.9", "10.0.0.10", U), udp(1, 2))
	fb.add("v4 gre", eth(macA, macB, E4), v4("10.0.0.1", "10.0.0.2", layers.IPProtocolGRE), gopacket.Payload{0, 0, 0x08, 0, 0x45, 0, 0, 20})
	fb.add("v4 tcp syn+fin :8080", eth(macA, macB, E4), v4("10.0.0.1", "10.0.0.2", T), tcp(1234, 8080, "SF"))
	// A tag still in the frame (QinQ's inner one, or a device without
	// VLAN offload): like tcpdump on Linux, `udp` does not see through it.
	fb.add("802.1q-tagged v4 udp in frame", eth(macA, macB, layers.EthernetTypeDot1Q),
		&layers.Dot1Q{VLANIdentifier: 7, Type: E4}, v4("10.0.0.1", "10.0.0.2", U), udp(40000, 53), payload(10, 0))
	return fb.frames, fb.names
}

// writePcap writes frames to a pcap file, frame i stamped at second i, so
// the frames tcpdump keeps can be told apart by their time stamps.
func writePcap(t testing.TB, path string, frames [][]byte) {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(int64(1_700_000_000+i), 0), CaptureLength: len(f), Length: len(f)}
		if err := w.WritePacket(ci, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeFile(path, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}
