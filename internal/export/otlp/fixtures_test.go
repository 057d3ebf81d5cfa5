package otlp

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"loupe/internal/flow"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var (
	t0   = time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	mac1 = [6]byte{0x02, 0x42, 0xac, 0x11, 0x00, 0x02}
	mac2 = [6]byte{0xfe, 0xed, 0xfa, 0xce, 0xbe, 0xef}
)

func addr(s string) [16]byte { return netip.MustParseAddr(s).As16() }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testCase is a record and the attributes the collector must decode from
// it, written out by hand: the expectations do not reuse the encoder.
type testCase struct {
	name  string
	rec   flow.Record
	attrs map[string]any
}

func testCases() []testCase {
	return []testCase{
		{
			name: "ipv4 tcp ingress",
			rec: flow.Record{
				Key: flow.Key{SrcAddr: addr("10.0.0.1"), DstAddr: addr("10.0.0.2"), SrcMAC: mac1, DstMAC: mac2,
					IfIndex: 7, EtherType: 0x0800, SrcPort: 40000, DstPort: 443, Proto: 6, Direction: flow.Ingress, VlanID: 100},
				Iface: "eth0", Packets: 10, Bytes: 1500, Segments: 20, WireBytes: 1600, FirstSeen: t0, LastSeen: t0.Add(3*time.Second + 17),
				Sampling: 1, TCPFlags: 0x11b, DSCP: 46,
			},
			attrs: map[string]any{
				"network.interface.name": "eth0", "network.io.direction": "receive",
				"network.type": "ipv4", "network.transport": "tcp",
				"source.address": "10.0.0.1", "source.port": int64(40000),
				"destination.address": "10.0.0.2", "destination.port": int64(443),
				"loupe.ip.protocol": int64(6), "loupe.flow.packets": int64(10), "loupe.flow.bytes": int64(1500),
				"loupe.flow.segments": int64(20), "loupe.flow.wire_bytes": int64(1600),
				"loupe.flow.start": t0.UnixNano(), "loupe.tcp.flags": int64(0x11b), "loupe.dscp": int64(46),
				"loupe.sampling_rate": int64(1), "loupe.ifindex": int64(7),
				"loupe.source.mac": "02-42-AC-11-00-02", "loupe.destination.mac": "FE-ED-FA-CE-BE-EF",
				"loupe.eth_type": int64(2048), "loupe.vlan.id": int64(100), "loupe.accuracy": "exact",
			},
		},
		{
			name: "ipv6 udp egress",
			rec: flow.Record{
				Key: flow.Key{SrcAddr: addr("2001:db8::1"), DstAddr: addr("2001:db8:0:ffff::53"), SrcMAC: mac2, DstMAC: mac1,
					IfIndex: 12, EtherType: 0x86DD, SrcPort: 5353, DstPort: 53, Proto: 17, Direction: flow.Egress},
				Iface: "veth1a2b", Packets: 3, Bytes: 276, Segments: 6, WireBytes: 306, FirstSeen: t0.Add(time.Millisecond), LastSeen: t0.Add(2 * time.Millisecond),
				Sampling: 4, DSCP: 0,
			},
			attrs: map[string]any{
				"network.interface.name": "veth1a2b", "network.io.direction": "transmit",
				"network.type": "ipv6", "network.transport": "udp",
				"source.address": "2001:db8::1", "source.port": int64(5353),
				"destination.address": "2001:db8:0:ffff::53", "destination.port": int64(53),
				"loupe.ip.protocol": int64(17), "loupe.flow.packets": int64(3), "loupe.flow.bytes": int64(276),
				"loupe.flow.segments": int64(6), "loupe.flow.wire_bytes": int64(306),
				"loupe.flow.start": t0.Add(time.Millisecond).UnixNano(), "loupe.dscp": int64(0),
				"loupe.sampling_rate": int64(4), "loupe.ifindex": int64(12),
				"loupe.source.mac": "FE-ED-FA-CE-BE-EF", "loupe.destination.mac": "02-42-AC-11-00-02",
				"loupe.eth_type": int64(34525), "loupe.vlan.id": int64(0), "loupe.accuracy": "exact",
			},
		},
		{
			name: "ipv4 icmp echo request",
			rec: flow.Record{
				Key: flow.Key{SrcAddr: addr("192.168.1.10"), DstAddr: addr("8.8.8.8"), SrcMAC: mac1, DstMAC: mac2,
					IfIndex: 7, EtherType: 0x0800, SrcPort: 8, DstPort: 0, Proto: 1, Direction: flow.Egress, VlanID: 4094},
				Iface: "eth0", Packets: 2, Bytes: 196, Segments: 4, WireBytes: 216, FirstSeen: t0, LastSeen: t0.Add(time.Second), Sampling: 1, DSCP: 0,
			},
			attrs: map[string]any{
				"network.interface.name": "eth0", "network.io.direction": "transmit",
				"network.type": "ipv4", "network.transport": "icmp",
				"source.address": "192.168.1.10", "destination.address": "8.8.8.8",
				"loupe.ip.protocol": int64(1), "loupe.icmp.type": int64(8), "loupe.icmp.code": int64(0),
				"loupe.flow.packets": int64(2), "loupe.flow.bytes": int64(196),
				"loupe.flow.segments": int64(4), "loupe.flow.wire_bytes": int64(216),
				"loupe.flow.start": t0.UnixNano(), "loupe.dscp": int64(0),
				"loupe.sampling_rate": int64(1), "loupe.ifindex": int64(7),
				"loupe.source.mac": "02-42-AC-11-00-02", "loupe.destination.mac": "FE-ED-FA-CE-BE-EF",
				"loupe.eth_type": int64(2048), "loupe.vlan.id": int64(4094), "loupe.accuracy": "exact",
			},
		},
		{
			name: "ipv6 icmpv6 neighbor solicitation",
			rec: flow.Record{
				Key: flow.Key{SrcAddr: addr("fe80::1"), DstAddr: addr("ff02::1:ff00:2"), SrcMAC: mac1, DstMAC: mac2,
					IfIndex: 3, EtherType: 0x86DD, SrcPort: 135, DstPort: 0, Proto: 58, Direction: flow.Ingress, VlanID: 1},
				Iface: "br0", Packets: 1, Bytes: 86, Segments: 2, WireBytes: 96, FirstSeen: t0, LastSeen: t0, Sampling: 1, DSCP: 48,
			},
			attrs: map[string]any{
				"network.interface.name": "br0", "network.io.direction": "receive",
				"network.type": "ipv6", "network.transport": "ipv6-icmp",
				"source.address": "fe80::1", "destination.address": "ff02::1:ff00:2",
				"loupe.ip.protocol": int64(58), "loupe.icmp.type": int64(135), "loupe.icmp.code": int64(0),
				"loupe.flow.packets": int64(1), "loupe.flow.bytes": int64(86),
				"loupe.flow.segments": int64(2), "loupe.flow.wire_bytes": int64(96),
				"loupe.flow.start": t0.UnixNano(), "loupe.dscp": int64(48),
				"loupe.sampling_rate": int64(1), "loupe.ifindex": int64(3),
				"loupe.source.mac": "02-42-AC-11-00-02", "loupe.destination.mac": "FE-ED-FA-CE-BE-EF",
				"loupe.eth_type": int64(34525), "loupe.vlan.id": int64(1), "loupe.accuracy": "exact",
			},
		},
		{
			name: "arp (non-ip)",
			rec: flow.Record{
				Key:   flow.Key{SrcMAC: mac1, DstMAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, IfIndex: 7, EtherType: 0x0806, Direction: flow.Ingress, VlanID: 7},
				Iface: "eth0", Packets: 1, Bytes: 42, Segments: 2, WireBytes: 52, FirstSeen: t0, LastSeen: t0, Sampling: 1,
			},
			attrs: map[string]any{
				"network.interface.name": "eth0", "network.io.direction": "receive",
				"loupe.flow.packets": int64(1), "loupe.flow.bytes": int64(42),
				"loupe.flow.segments": int64(2), "loupe.flow.wire_bytes": int64(52), "loupe.flow.start": t0.UnixNano(),
				"loupe.sampling_rate": int64(1), "loupe.ifindex": int64(7),
				"loupe.source.mac": "02-42-AC-11-00-02", "loupe.destination.mac": "FF-FF-FF-FF-FF-FF",
				"loupe.eth_type": int64(2054), "loupe.vlan.id": int64(7), "loupe.accuracy": "exact",
			},
		},
		{
			name: "ipv4 sctp, interface name unknown",
			rec: flow.Record{
				Key: flow.Key{SrcAddr: addr("10.1.0.1"), DstAddr: addr("10.1.0.2"), SrcMAC: mac1, DstMAC: mac2,
					IfIndex: 99, EtherType: 0x0800, SrcPort: 36412, DstPort: 38412, Proto: 132, Direction: flow.Egress},
				Packets: 5, Bytes: 900, Segments: 10, WireBytes: 950, FirstSeen: t0, LastSeen: t0.Add(time.Minute), Sampling: 1, DSCP: 10,
			},
			attrs: map[string]any{
				"network.io.direction": "transmit", "network.type": "ipv4", "network.transport": "sctp",
				"source.address": "10.1.0.1", "source.port": int64(36412),
				"destination.address": "10.1.0.2", "destination.port": int64(38412),
				"loupe.ip.protocol": int64(132), "loupe.flow.packets": int64(5), "loupe.flow.bytes": int64(900),
				"loupe.flow.segments": int64(10), "loupe.flow.wire_bytes": int64(950),
				"loupe.flow.start": t0.UnixNano(), "loupe.dscp": int64(10),
				"loupe.sampling_rate": int64(1), "loupe.ifindex": int64(99),
				"loupe.source.mac": "02-42-AC-11-00-02", "loupe.destination.mac": "FE-ED-FA-CE-BE-EF",
				"loupe.eth_type": int64(2048), "loupe.vlan.id": int64(0), "loupe.accuracy": "exact",
			},
		},
		{
			name: "ipv4 gre: no ports",
			rec: flow.Record{
				Key: flow.Key{SrcAddr: addr("172.16.0.1"), DstAddr: addr("172.16.0.2"), SrcMAC: mac1, DstMAC: mac2,
					IfIndex: 7, EtherType: 0x0800, Proto: 47, Direction: flow.Ingress},
				Iface: "eth0", Packets: 4, Bytes: 5000, Segments: 8, WireBytes: 5040, FirstSeen: t0, LastSeen: t0, Sampling: 1,
			},
			attrs: map[string]any{
				"network.interface.name": "eth0", "network.io.direction": "receive",
				"network.type": "ipv4", "network.transport": "gre",
				"source.address": "172.16.0.1", "destination.address": "172.16.0.2",
				"loupe.ip.protocol": int64(47), "loupe.flow.packets": int64(4), "loupe.flow.bytes": int64(5000),
				"loupe.flow.segments": int64(8), "loupe.flow.wire_bytes": int64(5040),
				"loupe.flow.start": t0.UnixNano(), "loupe.dscp": int64(0),
				"loupe.sampling_rate": int64(1), "loupe.ifindex": int64(7),
				"loupe.source.mac": "02-42-AC-11-00-02", "loupe.destination.mac": "FE-ED-FA-CE-BE-EF",
				"loupe.eth_type": int64(2048), "loupe.vlan.id": int64(0), "loupe.accuracy": "exact",
			},
		},
		{
			name: "ipv4 udp decoded from the sketch",
			rec: flow.Record{
				Key: flow.Key{SrcAddr: addr("10.0.0.9"), DstAddr: addr("10.0.0.53"), SrcMAC: mac1, DstMAC: mac2,
					IfIndex: 7, EtherType: 0x0800, SrcPort: 41000, DstPort: 53, Proto: 17, Direction: flow.Ingress},
				Iface: "eth0", Packets: 6, Bytes: 480, Segments: 12, WireBytes: 540, FirstSeen: t0, LastSeen: t0.Add(time.Second), Sampling: 1,
				Accuracy: flow.Decoded,
			},
			attrs: map[string]any{
				"network.interface.name": "eth0", "network.io.direction": "receive",
				"network.type": "ipv4", "network.transport": "udp",
				"source.address": "10.0.0.9", "source.port": int64(41000),
				"destination.address": "10.0.0.53", "destination.port": int64(53),
				"loupe.ip.protocol": int64(17), "loupe.flow.packets": int64(6), "loupe.flow.bytes": int64(480),
				"loupe.flow.segments": int64(12), "loupe.flow.wire_bytes": int64(540),
				"loupe.flow.start": t0.UnixNano(), "loupe.dscp": int64(0),
				"loupe.sampling_rate": int64(1), "loupe.ifindex": int64(7),
				"loupe.source.mac": "02-42-AC-11-00-02", "loupe.destination.mac": "FE-ED-FA-CE-BE-EF",
				"loupe.eth_type": int64(2048), "loupe.vlan.id": int64(0), "loupe.accuracy": "decoded",
			},
		},
		{
			name: "ipv6 tcp estimated by the count-min sketch",
			rec: flow.Record{
				Key: flow.Key{SrcAddr: addr("2001:db8::7"), DstAddr: addr("2001:db8::443"), SrcMAC: mac2, DstMAC: mac1,
					IfIndex: 12, EtherType: 0x86DD, SrcPort: 50000, DstPort: 443, Proto: 6, Direction: flow.Egress},
				Iface: "veth1a2b", Packets: 120, Bytes: 150000, Segments: 240, WireBytes: 151200, FirstSeen: t0, LastSeen: t0.Add(time.Second),
				Sampling: 1, TCPFlags: 0x18, Accuracy: flow.Estimated, MaxErrorPackets: 17, MaxErrorBytes: 25000, ErrorConfidence: 0.9816843611112658,
			},
			attrs: map[string]any{
				"network.interface.name": "veth1a2b", "network.io.direction": "transmit",
				"network.type": "ipv6", "network.transport": "tcp",
				"source.address": "2001:db8::7", "source.port": int64(50000),
				"destination.address": "2001:db8::443", "destination.port": int64(443),
				"loupe.ip.protocol": int64(6), "loupe.flow.packets": int64(120), "loupe.flow.bytes": int64(150000),
				"loupe.flow.segments": int64(240), "loupe.flow.wire_bytes": int64(151200),
				"loupe.flow.start": t0.UnixNano(), "loupe.tcp.flags": int64(0x18), "loupe.dscp": int64(0),
				"loupe.sampling_rate": int64(1), "loupe.ifindex": int64(12),
				"loupe.source.mac": "FE-ED-FA-CE-BE-EF", "loupe.destination.mac": "02-42-AC-11-00-02",
				"loupe.eth_type": int64(34525), "loupe.vlan.id": int64(0), "loupe.accuracy": "estimated",
				"loupe.max_error.packets": int64(17), "loupe.max_error.bytes": int64(25000), "loupe.max_error.confidence": 0.9816843611112658,
			},
		},
	}
}

func records(cases []testCase) []flow.Record {
	out := make([]flow.Record, len(cases))
	for i, c := range cases {
		out[i] = c.rec
	}
	return out
}

// diffMaps describes how got differs from want, "" if equal.
func diffMaps(got, want map[string]any) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	var b strings.Builder
	keys := slices.Sorted(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		if gok != wok || !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&b, "\n  %s: got %#v (present %v), want %#v (present %v)", k, g, gok, w, wok)
		}
	}
	return b.String()
}

// manyRecords returns n distinct IPv4 TCP records spread over ifaces
// interfaces, both directions; packets of record i are i+1, bytes 100*(i+1),
// segments twice the packets and wire bytes the bytes plus 10 a packet, as
// in testCases (see withWireMetrics).
func manyRecords(n, ifaces int) []flow.Record {
	out := make([]flow.Record, n)
	for i := range out {
		out[i] = flow.Record{
			Key: flow.Key{
				SrcAddr: addr(fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)), DstAddr: addr("10.255.0.1"),
				SrcMAC: mac1, DstMAC: mac2, IfIndex: uint32(i % ifaces), EtherType: 0x0800,
				SrcPort: uint16(1024 + i%60000), DstPort: 443, Proto: 6, Direction: flow.Direction(i % 2),
			},
			Iface: fmt.Sprintf("eth%d", i%ifaces), Packets: uint64(i + 1), Bytes: uint64(100 * (i + 1)),
			Segments: uint64(2 * (i + 1)), WireBytes: uint64(110 * (i + 1)),
			FirstSeen: t0, LastSeen: t0.Add(time.Duration(i)), Sampling: 1, TCPFlags: 0x12,
		}
	}
	return out
}
