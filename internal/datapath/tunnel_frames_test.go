package datapath

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Crafted encapsulations for the parser's tunnel step. This kernel has no
// Geneve, GRE or IPIP devices, so these frames are the only way those
// tunnels reach the program; the layouts follow RFC 7348 (VXLAN), RFC 8926
// (Geneve), RFC 2784 and 2890 (GRE) and RFC 2003 / 2473 (IP in IP).

// The outer side: the underlay's MACs and addresses, apart from the inner
// packet's (macA, macB, v4A, v4B, v6A, v6B).
var (
	macOuterA = net.HardwareAddr{0x02, 0, 0, 0, 0x0e, 0xa}
	macOuterB = net.HardwareAddr{0x02, 0, 0, 0, 0x0e, 0xb}
	outer4A   = netip.MustParseAddr("172.16.0.1")
	outer4B   = netip.MustParseAddr("172.16.0.2")
	outer6A   = netip.MustParseAddr("fd00:ec::1")
	outer6B   = netip.MustParseAddr("fd00:ec::2")
)

const (
	portVXLAN      = 4789
	portVXLANLinux = 8472
	portGeneve     = 6081
	etherTypeTEB   = 0x6558
)

// vxlanHeader is VXLAN's 8 bytes: flags (I = 0x08: the VNI is valid),
// 3 reserved, the 24-bit VNI, 1 reserved.
func vxlanHeader(flags byte, vni uint32) []byte {
	b := make([]byte, 8)
	b[0] = flags
	b[4], b[5], b[6] = byte(vni>>16), byte(vni>>8), byte(vni)
	return b
}

// geneveHeader is Geneve's 8 bytes, version ver, then opts (a multiple of
// 4 bytes, counted in the header's option length).
func geneveHeader(ver byte, proto uint16, vni uint32, opts []byte) []byte {
	b := make([]byte, 8, 8+len(opts))
	b[0] = ver<<6 | byte(len(opts)/4)&0x3f
	binary.BigEndian.PutUint16(b[2:], proto)
	b[4], b[5], b[6] = byte(vni>>16), byte(vni>>8), byte(vni)
	return append(b, opts...)
}

// greOpts are the optional fields of a GRE header (RFC 2890).
type greOpts struct {
	csum, key, seq bool
	keyVal         uint32
	version        uint16
	routing        bool
}

func greHeader(proto uint16, o greOpts) []byte {
	var flags uint16
	b := make([]byte, 4)
	if o.csum {
		flags |= 0x8000
		b = append(b, 0xca, 0xfe, 0, 0) // checksum (not checked) and reserved1
	}
	if o.routing {
		flags |= 0x4000
	}
	if o.key {
		flags |= 0x2000
		b = binary.BigEndian.AppendUint32(b, o.keyVal)
	}
	if o.seq {
		flags |= 0x1000
		b = binary.BigEndian.AppendUint32(b, 7)
	}
	flags |= o.version & 7
	binary.BigEndian.PutUint16(b, flags)
	binary.BigEndian.PutUint16(b[2:], proto)
	return b
}

// outerIP is the underlay's IP header of the given family and protocol.
func outerIP(v6 bool, proto layers.IPProtocol) gopacket.SerializableLayer {
	if v6 {
		return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: outer6A.AsSlice(), DstIP: outer6B.AsSlice()}
	}
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, Flags: layers.IPv4DontFragment,
		SrcIP: outer4A.AsSlice(), DstIP: outer4B.AsSlice()}
}

func outerEth(v6 bool) *layers.Ethernet {
	typ := layers.EthernetTypeIPv4
	if v6 {
		typ = layers.EthernetTypeIPv6
	}
	return &layers.Ethernet{SrcMAC: macOuterA, DstMAC: macOuterB, EthernetType: typ}
}

// udpTunnel wraps inner (a tunnel header and the packet it carries) in
// Ethernet, IP and UDP to port dport, from source port sport.
func udpTunnel(t testing.TB, v6 bool, sport, dport uint16, inner ...[]byte) []byte {
	t.Helper()
	var payload []byte
	for _, b := range inner {
		payload = append(payload, b...)
	}
	return frame(t, outerEth(v6), outerIP(v6, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}, gopacket.Payload(payload))
}

// ipTunnel wraps inner in Ethernet and IP of protocol proto (GRE, 4, 41).
func ipTunnel(t testing.TB, v6 bool, proto layers.IPProtocol, inner ...[]byte) []byte {
	t.Helper()
	var payload []byte
	for _, b := range inner {
		payload = append(payload, b...)
	}
	return frame(t, outerEth(v6), outerIP(v6, proto), gopacket.Payload(payload))
}

// innerFrame is the packet a tunnel carries: with its own Ethernet header
// (inner MACs macA > macB) when withEth, else from its IP header on. v6
// picks the inner family; the transport is UDP 5353 > 53 with payload, or
// TCP 40000 > 443 (SYN) when tcp.
func innerFrame(t testing.TB, withEth, v6, tcp bool, payload []byte) []byte {
	t.Helper()
	var ls []gopacket.SerializableLayer
	proto := layers.IPProtocolUDP
	if tcp {
		proto = layers.IPProtocolTCP
	}
	if withEth {
		typ := layers.EthernetTypeIPv4
		if v6 {
			typ = layers.EthernetTypeIPv6
		}
		ls = append(ls, eth(typ))
	}
	if v6 {
		ls = append(ls, ip6(proto))
	} else {
		ls = append(ls, ip4(proto))
	}
	if tcp {
		ls = append(ls, &layers.TCP{SrcPort: 40000, DstPort: 443, SYN: true, Window: 1000})
	} else {
		ls = append(ls, &layers.UDP{SrcPort: 5353, DstPort: 53})
	}
	ls = append(ls, gopacket.Payload(payload))
	b := frame(t, ls...)
	if withEth {
		// An inner Ethernet frame is not padded: the outer one is.
		n := 14
		if v6 {
			n += 40 + int(binary.BigEndian.Uint16(b[14+4:]))
		} else {
			n += int(binary.BigEndian.Uint16(b[14+2:]))
		}
		b = b[:n]
	}
	return b
}
