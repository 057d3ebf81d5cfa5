package datapath

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xa}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xb}
	v4A  = netip.MustParseAddr("10.1.2.3")
	v4B  = netip.MustParseAddr("192.0.2.200")
	v6A  = netip.MustParseAddr("2001:db8::1")
	v6B  = netip.MustParseAddr("2001:db8:ffff::2")
)

// frame serialises layers with lengths and checksums computed. Ethernet
// pads frames to 60 bytes: tests of truncated headers slice the result.
func frame(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	for _, l := range ls {
		if nl, ok := l.(interface {
			SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
		}); ok {
			for _, n := range ls {
				if ip, ok := n.(gopacket.NetworkLayer); ok {
					_ = nl.SetNetworkLayerForChecksum(ip)
				}
			}
		}
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatalf("serialise: %v", err)
	}
	return buf.Bytes()
}

func eth(typ layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: typ}
}

func ip4(proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, TOS: 46 << 2, Protocol: proto,
		SrcIP: v4A.AsSlice(), DstIP: v4B.AsSlice()}
}

func ip6(next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, TrafficClass: 10 << 2, NextHeader: next,
		SrcIP: v6A.AsSlice(), DstIP: v6B.AsSlice()}
}

// ext builds a raw IPv6 extension header of the given type and total length
// (a multiple of 8; AH uses 4-octet units).
func ext(next layers.IPProtocol, total int, ah bool) gopacket.Payload {
	b := make([]byte, total)
	b[0] = byte(next)
	if ah {
		b[1] = byte(total/4 - 2)
	} else {
		b[1] = byte(total/8 - 1)
	}
	return b
}

func frag6(next layers.IPProtocol, offset8 uint16, more bool) gopacket.Payload {
	b := make([]byte, 8)
	b[0] = byte(next)
	v := offset8 << 3
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(b[2:], v)
	binary.BigEndian.PutUint32(b[4:], 0xabcd)
	return b
}

type want struct {
	ethType          uint16
	src, dst         netip.Addr
	proto            uint8
	srcPort, dstPort uint16
	tcpFlags         uint16
	dscp             uint8
	vlanID           uint16
	counters         map[string]uint64
}

func TestParser(t *testing.T) {
	testutil.RequirePrivileged(t)
	udp := &layers.UDP{SrcPort: 5353, DstPort: 53}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 443, SYN: true, ECE: true, Window: 1000}
	payload := gopacket.Payload("hello, flows")

	cases := []struct {
		name  string
		frame []byte
		want  want
	}{
		{
			name:  "ipv4 udp",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolUDP), udp, payload),
			want:  want{ethType: 0x0800, src: v4A, dst: v4B, proto: 17, srcPort: 5353, dstPort: 53, dscp: 46},
		},
		{
			name:  "ipv4 tcp flags",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP), tcp),
			want:  want{ethType: 0x0800, src: v4A, dst: v4B, proto: 6, srcPort: 40000, dstPort: 443, tcpFlags: flow.TCPSyn | flow.TCPEce, dscp: 46},
		},
		{
			name: "ipv4 options",
			frame: frame(t, eth(layers.EthernetTypeIPv4), func() *layers.IPv4 {
				ip := ip4(layers.IPProtocolUDP)
				ip.Options = []layers.IPv4Option{{OptionType: 0x94, OptionLength: 4, OptionData: []byte{0, 0}}, {OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
				return ip
			}(), udp, payload),
			want: want{ethType: 0x0800, src: v4A, dst: v4B, proto: 17, srcPort: 5353, dstPort: 53, dscp: 46},
		},
		{
			name:  "802.1q",
			frame: frame(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 42, Type: layers.EthernetTypeIPv4}, ip4(layers.IPProtocolUDP), udp, payload),
			want:  want{ethType: 0x0800, src: v4A, dst: v4B, proto: 17, srcPort: 5353, dstPort: 53, dscp: 46, vlanID: 42},
		},
		{
			name: "qinq",
			frame: frame(t, eth(layers.EthernetTypeQinQ), &layers.Dot1Q{VLANIdentifier: 100, Type: layers.EthernetTypeDot1Q},
				&layers.Dot1Q{VLANIdentifier: 42, Type: layers.EthernetTypeIPv6}, ip6(layers.IPProtocolUDP), udp, payload),
			want: want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 17, srcPort: 5353, dstPort: 53, dscp: 10, vlanID: 100},
		},
		{
			name: "three vlan tags",
			frame: frame(t, eth(layers.EthernetTypeQinQ), &layers.Dot1Q{VLANIdentifier: 4094, Type: layers.EthernetTypeDot1Q},
				&layers.Dot1Q{VLANIdentifier: 5, Type: layers.EthernetTypeDot1Q}, &layers.Dot1Q{VLANIdentifier: 6, Type: layers.EthernetTypeIPv4}, ip4(layers.IPProtocolUDP), udp),
			want: want{ethType: 0x8100, vlanID: 4094, counters: map[string]uint64{"vlan_depth": 1}},
		},
		{
			name:  "ipv6 tcp",
			frame: frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolTCP), tcp),
			want:  want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 6, srcPort: 40000, dstPort: 443, tcpFlags: flow.TCPSyn | flow.TCPEce, dscp: 10},
		},
		{
			name: "ipv6 hop-by-hop, routing, dstopts, ah then udp",
			frame: frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolIPv6HopByHop),
				ext(layers.IPProtocolIPv6Routing, 8, false), ext(layers.IPProtocolIPv6Destination, 24, false),
				ext(layers.IPProtocolAH, 16, false), ext(layers.IPProtocolUDP, 24, true),
				gopacket.Payload{0x14, 0xe9, 0x00, 0x35, 0, 8, 0, 0}),
			want: want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 17, srcPort: 5353, dstPort: 53, dscp: 10},
		},
		{
			name: "ipv6 extension chain too long",
			frame: frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolIPv6Destination),
				ext(60, 8, false), ext(60, 8, false), ext(60, 8, false), ext(60, 8, false),
				ext(60, 8, false), ext(60, 8, false), ext(60, 8, false), ext(60, 8, false), ext(17, 8, false),
				gopacket.Payload{0x14, 0xe9, 0x00, 0x35, 0, 8, 0, 0}),
			want: want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 60, dscp: 10, counters: map[string]uint64{"ipv6_ext_depth": 1}},
		},
		{
			name:  "ipv6 first fragment keeps ports",
			frame: frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolIPv6Fragment), frag6(layers.IPProtocolUDP, 0, true), udp, payload),
			want:  want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 17, srcPort: 5353, dstPort: 53, dscp: 10},
		},
		{
			name: "ipv6 later fragment counted under L3 flow",
			frame: frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolIPv6Fragment), frag6(layers.IPProtocolUDP, 185, false),
				gopacket.Payload{0x11, 0x22, 0x33, 0x44, 0x55, 0x66}),
			want: want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 17, dscp: 10, counters: map[string]uint64{"fragments": 1}},
		},
		{
			name: "ipv4 first fragment keeps ports",
			frame: frame(t, eth(layers.EthernetTypeIPv4), func() *layers.IPv4 {
				ip := ip4(layers.IPProtocolUDP)
				ip.Flags = layers.IPv4MoreFragments
				return ip
			}(), udp, payload),
			want: want{ethType: 0x0800, src: v4A, dst: v4B, proto: 17, srcPort: 5353, dstPort: 53, dscp: 46},
		},
		{
			name: "ipv4 later fragment counted under L3 flow",
			frame: frame(t, eth(layers.EthernetTypeIPv4), func() *layers.IPv4 {
				ip := ip4(layers.IPProtocolUDP)
				ip.FragOffset = 185
				return ip
			}(), gopacket.Payload{0x14, 0xe9, 0x00, 0x35, 0, 8, 0, 0}),
			want: want{ethType: 0x0800, src: v4A, dst: v4B, proto: 17, dscp: 46, counters: map[string]uint64{"fragments": 1}},
		},
		{
			name:  "icmp echo",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolICMPv4), &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 1, Seq: 1}),
			want:  want{ethType: 0x0800, src: v4A, dst: v4B, proto: 1, srcPort: 8, dstPort: 0, dscp: 46},
		},
		{
			name:  "icmp unreachable code",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolICMPv4), &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)}),
			want:  want{ethType: 0x0800, src: v4A, dst: v4B, proto: 1, srcPort: 3, dstPort: 3, dscp: 46},
		},
		{
			name:  "icmpv6 echo",
			frame: frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolICMPv6), &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}, gopacket.Payload{0, 1, 0, 1}),
			want:  want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 58, srcPort: 128, dscp: 10},
		},
		{
			name:  "sctp",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolSCTP), &layers.SCTP{SrcPort: 36412, DstPort: 38412}),
			want:  want{ethType: 0x0800, src: v4A, dst: v4B, proto: 132, srcPort: 36412, dstPort: 38412, dscp: 46},
		},
		{
			name:  "arp is counted under its ethertype",
			frame: frame(t, eth(layers.EthernetTypeARP), &layers.ARP{AddrType: 1, Protocol: 0x0800, HwAddressSize: 6, ProtAddressSize: 4, Operation: 1, SourceHwAddress: macA, SourceProtAddress: v4A.AsSlice(), DstHwAddress: make([]byte, 6), DstProtAddress: v4B.AsSlice()}),
			want:  want{ethType: 0x0806},
		},
		{
			// BPF_PROG_TEST_RUN refuses an untagged IPv4 frame shorter than
			// an IP header; behind a VLAN tag the kernel does not look.
			name: "truncated ipv4 header",
			frame: frame(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeIPv4},
				ip4(layers.IPProtocolUDP), udp, payload)[:14+4+10],
			want: want{ethType: 0x0800, vlanID: 7, counters: map[string]uint64{"truncated_l3": 1}},
		},
		{
			name:  "truncated tcp header keeps addresses",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP), tcp)[:14+20+6],
			want:  want{ethType: 0x0800, src: v4A, dst: v4B, proto: 6, dscp: 46, counters: map[string]uint64{"truncated_l4": 1}},
		},
		{
			name:  "truncated ipv6 extension header",
			frame: frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolIPv6HopByHop), ext(layers.IPProtocolUDP, 8, false))[:14+40+1],
			want:  want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 0, dscp: 10, counters: map[string]uint64{"truncated_l3": 1}},
		},
		{
			name:  "ipv4 ihl below five",
			frame: frame(t, eth(layers.EthernetTypeIPv4), gopacket.Payload{0x43, 0xb8, 0, 40, 0, 0, 0, 0, 64, 17, 0, 0, 10, 1, 2, 3, 192, 0, 2, 200, 0x14, 0xe9, 0, 0x35}),
			want:  want{ethType: 0x0800, src: v4A, dst: v4B, proto: 17, dscp: 46, counters: map[string]uint64{"bad_ipv4_ihl": 1}},
		},
		{
			name:  "icmpv6 number inside ipv4 is not read as icmp",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolICMPv6), gopacket.Payload{128, 0, 0, 0}),
			want:  want{ethType: 0x0800, src: v4A, dst: v4B, proto: 58, dscp: 46},
		},
		{
			name:  "garbage ethertype",
			frame: []byte{2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef},
			want:  want{ethType: 0x1234},
		},
	}

	for _, tables := range []TableKind{PerCPU, Shared} {
		dp := loadForTest(t, Options{FlowBudget: 64, Tables: tables, RingBufSize: 1 << 16})
		for _, tc := range cases {
			t.Run(tables.String()+"/"+tc.name, func(t *testing.T) {
				before := counterMap(t, dp)
				for _, dir := range []flow.Direction{flow.Ingress, flow.Egress} {
					ret := runProg(t, dp, dir, tc.frame)
					if int32(ret) != -1 {
						t.Fatalf("%s returned %d, want -1 (TCX_NEXT)", dir, int32(ret))
					}
				}
				recs := drainAll(t, dp)
				if len(recs) != 2 {
					t.Fatalf("got %d flows, want one per direction: %+v", len(recs), recs)
				}
				for _, r := range recs {
					checkKey(t, r, tc.want, uint64(len(tc.frame)))
				}
				after := counterMap(t, dp)
				for name, v := range after {
					if d := v - before[name]; d != 2*tc.want.counters[name] && name != "pulled" {
						t.Errorf("counter %s moved by %d, want %d", name, d, 2*tc.want.counters[name])
					}
				}
			})
		}
	}
}

func checkKey(t *testing.T, r drained, w want, length uint64) {
	t.Helper()
	checkKeyMACs(t, r, w, length, macA, macB)
}

// checkKeyMACs is checkKey for a packet whose key has the MACs src > dst.
func checkKeyMACs(t *testing.T, r drained, w want, length uint64, src, dst net.HardwareAddr) {
	t.Helper()
	k := r.key
	if k.EtherType != w.ethType || k.Proto != w.proto || k.SrcPort != w.srcPort || k.DstPort != w.dstPort {
		t.Errorf("%s key: eth %#x proto %d ports %d>%d; want eth %#x proto %d ports %d>%d",
			k.Direction, k.EtherType, k.Proto, k.SrcPort, k.DstPort, w.ethType, w.proto, w.srcPort, w.dstPort)
	}
	if k.SrcIP() != w.src || k.DstIP() != w.dst {
		t.Errorf("%s addresses %v > %v, want %v > %v", k.Direction, k.SrcIP(), k.DstIP(), w.src, w.dst)
	}
	if w.ethType != 0x0800 && w.ethType != 0x86dd && (k.SrcAddr != [16]byte{} || k.DstAddr != [16]byte{}) {
		t.Errorf("non-IP flow has addresses %x %x", k.SrcAddr, k.DstAddr)
	}
	if net.HardwareAddr(k.SrcMAC[:]).String() != src.String() || net.HardwareAddr(k.DstMAC[:]).String() != dst.String() {
		t.Errorf("macs %x > %x, want %v > %v", k.SrcMAC, k.DstMAC, src, dst)
	}
	if k.IfIndex != 1 {
		t.Errorf("ifindex %d, want 1 (test runs use loopback)", k.IfIndex)
	}
	if k.VlanID != w.vlanID {
		t.Errorf("%s vlan id %d, want %d", k.Direction, k.VlanID, w.vlanID)
	}
	s := r.stats
	// Not a GSO packet: one segment, and the wire carried what the hook saw.
	if s.Packets != 1 || s.Bytes != length || s.Segments != 1 || s.WireBytes != length {
		t.Errorf("%s counted %d packets %d bytes %d segments %d wire bytes, want 1, %d, 1, %d",
			k.Direction, s.Packets, s.Bytes, s.Segments, s.WireBytes, length, length)
	}
	if s.TCPFlags != w.tcpFlags || s.DSCP != w.dscp || s.Sampling != 1 {
		t.Errorf("%s flags %#x dscp %d sampling %d, want %#x %d 1", k.Direction, s.TCPFlags, s.DSCP, s.Sampling, w.tcpFlags, w.dscp)
	}
	if s.FirstSeen == 0 || s.LastSeen < s.FirstSeen {
		t.Errorf("timestamps first %d last %d", s.FirstSeen, s.LastSeen)
	}
}
