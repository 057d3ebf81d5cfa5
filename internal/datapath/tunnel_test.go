package datapath

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"loupe/internal/flow"
	"loupe/internal/testutil"
	"loupe/internal/tunnel"
)

// The inner packets innerFrame builds, as the flow key has them.
var (
	inner4UDP = want{ethType: 0x0800, src: v4A, dst: v4B, proto: 17, srcPort: 5353, dstPort: 53, dscp: 46}
	inner6UDP = want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 17, srcPort: 5353, dstPort: 53, dscp: 10}
	inner4TCP = want{ethType: 0x0800, src: v4A, dst: v4B, proto: 6, srcPort: 40000, dstPort: 443, tcpFlags: flow.TCPSyn, dscp: 46}
	inner6TCP = want{ethType: 0x86dd, src: v6A, dst: v6B, proto: 6, srcPort: 40000, dstPort: 443, tcpFlags: flow.TCPSyn, dscp: 10}
)

// outerKey is the key of a packet counted by its outer headers: the
// underlay's addresses, protocol proto, ports 50000 > dport (dport 0: no
// ports, GRE and IP in IP).
func outerKey(v6 bool, proto uint8, dport uint16, counters map[string]uint64) want {
	w := want{ethType: 0x0800, src: outer4A, dst: outer4B, proto: proto, dstPort: dport, counters: counters}
	if v6 {
		w.ethType, w.src, w.dst = 0x86dd, outer6A, outer6B
	}
	if dport != 0 {
		w.srcPort = 50000
	}
	return w
}

// outerSide is the tunnel.Info of a packet of the given tunnel over the
// underlay (outerIP, outerEth; UDP from 50000).
func outerSide(v6 bool, typ tunnel.Type, dport uint16, id uint32, hasID, innerEth bool) *tunnel.Info {
	in := &tunnel.Info{Type: typ, ID: id, HasID: hasID, SrcAddr: outer4A, DstAddr: outer4B,
		SrcMAC: [6]byte(macOuterA), DstMAC: [6]byte(macOuterB), InnerEthernet: innerEth}
	if v6 {
		in.SrcAddr, in.DstAddr = outer6A, outer6B
	}
	if dport != 0 {
		in.SrcPort, in.DstPort = 50000, dport
	}
	return in
}

type tunnelCase struct {
	name  string
	frame []byte
	key   want
	// The key's MACs: the inner frame's (macA > macB) when the tunnel
	// carries Ethernet, else the outer frame's.
	outerMACs bool
	// The outer side the tunnel table must hold for the flow; nil: the
	// packet is counted by its outer headers, or was never in a tunnel.
	tunnel *tunnel.Info
}

func tunnelCases(t *testing.T) []tunnelCase {
	payload := []byte("inner payload")
	in := func(withEth, v6, tcp bool) []byte { return innerFrame(t, withEth, v6, tcp, payload) }
	opts := []byte{0x01, 0x02, 0x80, 0x01, 0xde, 0xad, 0xbe, 0xef} // one 8-byte option: class, type, length 1
	gre := func(v6 bool, proto uint16, o greOpts, inner []byte) []byte {
		return ipTunnel(t, v6, layers.IPProtocolGRE, greHeader(proto, o), inner)
	}
	truncate := func(b []byte, n int) []byte { return b[:n] }
	vxlan4 := udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x08, 42), in(true, false, false))
	const vxlanInner = 14 + 20 + 8 + 8 // where the inner frame starts in vxlan4

	return []tunnelCase{
		// VXLAN: both ports, both outer families, both inner families.
		{name: "vxlan 4789 ipv4 in ipv4", frame: vxlan4, key: inner4UDP,
			tunnel: outerSide(false, tunnel.VXLAN, portVXLAN, 42, true, true)},
		{name: "vxlan 8472 ipv6 tcp in ipv6", frame: udpTunnel(t, true, 50000, portVXLANLinux, vxlanHeader(0x08, 0xabcdef), in(true, true, true)),
			key: inner6TCP, tunnel: outerSide(true, tunnel.VXLAN, portVXLANLinux, 0xabcdef, true, true)},
		{name: "vxlan 4789 ipv6 in ipv4", frame: udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x08, 1), in(true, true, false)),
			key: inner6UDP, tunnel: outerSide(false, tunnel.VXLAN, portVXLAN, 1, true, true)},
		{name: "vxlan 8472 ipv4 tcp in ipv4", frame: udpTunnel(t, false, 50000, portVXLANLinux, vxlanHeader(0x08, 7), in(true, false, true)),
			key: inner4TCP, tunnel: outerSide(false, tunnel.VXLAN, portVXLANLinux, 7, true, true)},
		{
			// The outer frame's VLAN goes with the outer side; the key
			// has the inner frame's.
			name: "vxlan tagged outside and inside",
			frame: frame(t, &layers.Ethernet{SrcMAC: macOuterA, DstMAC: macOuterB, EthernetType: layers.EthernetTypeDot1Q},
				&layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeIPv4}, outerIP(false, layers.IPProtocolUDP),
				&layers.UDP{SrcPort: 50000, DstPort: portVXLAN}, gopacket.Payload(vxlanHeader(0x08, 42)),
				eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 100, Type: layers.EthernetTypeIPv4},
				ip4(layers.IPProtocolUDP), &layers.UDP{SrcPort: 5353, DstPort: 53}, gopacket.Payload(payload)),
			key: func() want { w := inner4UDP; w.vlanID = 100; return w }(),
			tunnel: func() *tunnel.Info {
				i := outerSide(false, tunnel.VXLAN, portVXLAN, 42, true, true)
				i.VlanID = 7
				return i
			}(),
		},
		// Geneve: with options, Ethernet or IP inside.
		{name: "geneve with options, ipv4 tcp", frame: udpTunnel(t, false, 50000, portGeneve, geneveHeader(0, etherTypeTEB, 5001, opts), in(true, false, true)),
			key: inner4TCP, tunnel: outerSide(false, tunnel.Geneve, portGeneve, 5001, true, true)},
		{name: "geneve carrying ipv6 directly, over ipv6", frame: udpTunnel(t, true, 50000, portGeneve, geneveHeader(0, 0x86dd, 9, nil), in(false, true, false)),
			key: inner6UDP, outerMACs: true, tunnel: outerSide(true, tunnel.Geneve, portGeneve, 9, true, false)},
		{name: "geneve 252 bytes of options", frame: udpTunnel(t, false, 50000, portGeneve, geneveHeader(0, etherTypeTEB, 3, make([]byte, 252)), in(true, true, false)),
			key: inner6UDP, tunnel: outerSide(false, tunnel.Geneve, portGeneve, 3, true, true)},
		// GRE: each optional field, IP and Ethernet inside.
		{name: "gre ipv4 in ipv4", frame: gre(false, 0x0800, greOpts{}, in(false, false, false)),
			key: inner4UDP, outerMACs: true, tunnel: outerSide(false, tunnel.GRE, 0, 0, false, false)},
		{name: "gre key, ipv4 in ipv4", frame: gre(false, 0x0800, greOpts{key: true, keyVal: 0xfeedf00d}, in(false, false, true)),
			key: inner4TCP, outerMACs: true, tunnel: outerSide(false, tunnel.GRE, 0, 0xfeedf00d, true, false)},
		{name: "gre checksum, ipv6 in ipv4", frame: gre(false, 0x86dd, greOpts{csum: true}, in(false, true, false)),
			key: inner6UDP, outerMACs: true, tunnel: outerSide(false, tunnel.GRE, 0, 0, false, false)},
		{name: "gre sequence, ipv4 in ipv6", frame: gre(true, 0x0800, greOpts{seq: true}, in(false, false, false)),
			key: inner4UDP, outerMACs: true, tunnel: outerSide(true, tunnel.GRE, 0, 0, false, false)},
		{name: "gre checksum key sequence, ipv6 tcp in ipv6", frame: gre(true, 0x86dd, greOpts{csum: true, key: true, keyVal: 77, seq: true}, in(false, true, true)),
			key: inner6TCP, outerMACs: true, tunnel: outerSide(true, tunnel.GRE, 0, 77, true, false)},
		{name: "gre transparent ethernet bridging, key", frame: gre(false, etherTypeTEB, greOpts{key: true, keyVal: 12}, in(true, false, false)),
			key: inner4UDP, tunnel: outerSide(false, tunnel.GRE, 0, 12, true, true)},
		// IP in IP, every pair of families.
		{name: "ipip 4in4", frame: ipTunnel(t, false, layers.IPProtocolIPv4, in(false, false, true)),
			key: inner4TCP, outerMACs: true, tunnel: outerSide(false, tunnel.IPIP, 0, 0, false, false)},
		{name: "ipip 6in4", frame: ipTunnel(t, false, layers.IPProtocolIPv6, in(false, true, false)),
			key: inner6UDP, outerMACs: true, tunnel: outerSide(false, tunnel.IPIP, 0, 0, false, false)},
		{name: "ipip 4in6", frame: ipTunnel(t, true, layers.IPProtocolIPv4, in(false, false, false)),
			key: inner4UDP, outerMACs: true, tunnel: outerSide(true, tunnel.IPIP, 0, 0, false, false)},
		{name: "ipip 6in6", frame: ipTunnel(t, true, layers.IPProtocolIPv6, in(false, true, true)),
			key: inner6TCP, outerMACs: true, tunnel: outerSide(true, tunnel.IPIP, 0, 0, false, false)},
		{
			// The outer IPv6 header's extension headers are walked
			// before the tunnel (RFC 2473's tunnel encapsulation
			// limit is a destination option).
			name: "ipip 6in6 after a destination option",
			frame: frame(t, outerEth(true), &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Destination,
				SrcIP: outer6A.AsSlice(), DstIP: outer6B.AsSlice()}, ext(layers.IPProtocolIPv6, 8, false), gopacket.Payload(in(false, true, false))),
			key: inner6UDP, outerMACs: true, tunnel: outerSide(true, tunnel.IPIP, 0, 0, false, false),
		},
		// The inner packet is counted even when its transport header is
		// cut short, like any packet: under its addresses.
		{name: "vxlan inner tcp header cut short", frame: truncate(udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x08, 42), in(true, false, true)), vxlanInner+14+20+10),
			key:    want{ethType: 0x0800, src: v4A, dst: v4B, proto: 6, dscp: 46, counters: map[string]uint64{"truncated_l4": 1}},
			tunnel: outerSide(false, tunnel.VXLAN, portVXLAN, 42, true, true)},
		// One level deep: VXLAN in VXLAN is keyed by the first inner
		// packet, itself VXLAN's UDP.
		{name: "vxlan inside vxlan", frame: udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x08, 42),
			frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolUDP), &layers.UDP{SrcPort: 6000, DstPort: portVXLAN},
				gopacket.Payload(vxlanHeader(0x08, 43)), gopacket.Payload(in(true, false, false)))),
			key:    want{ethType: 0x0800, src: v4A, dst: v4B, proto: 17, srcPort: 6000, dstPort: portVXLAN, dscp: 46, counters: map[string]uint64{"tunnel_depth": 1}},
			tunnel: outerSide(false, tunnel.VXLAN, portVXLAN, 42, true, true)},

		// Malformed or cut short: counted, and counted by the outer
		// headers.
		{name: "vxlan without its I flag", frame: udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x00, 42), in(true, false, false)),
			key: outerKey(false, 17, portVXLAN, map[string]uint64{"tunnel_bad_header": 1}), outerMACs: true},
		{name: "vxlan header cut short", frame: truncate(vxlan4, 14+20+8+4),
			key: outerKey(false, 17, portVXLAN, map[string]uint64{"tunnel_truncated": 1}), outerMACs: true},
		{name: "vxlan inner ethernet cut short", frame: truncate(vxlan4, vxlanInner+10),
			key: outerKey(false, 17, portVXLAN, map[string]uint64{"tunnel_truncated": 1}), outerMACs: true},
		{name: "vxlan inner ipv4 header cut short", frame: truncate(vxlan4, vxlanInner+14+12),
			key: outerKey(false, 17, portVXLAN, map[string]uint64{"tunnel_truncated": 1}), outerMACs: true},
		{name: "geneve version 1", frame: udpTunnel(t, true, 50000, portGeneve, geneveHeader(1, etherTypeTEB, 5, nil), in(true, false, false)),
			key: outerKey(true, 17, portGeneve, map[string]uint64{"tunnel_bad_header": 1}), outerMACs: true},
		{name: "geneve options past the frame", frame: truncate(udpTunnel(t, false, 50000, portGeneve, geneveHeader(0, etherTypeTEB, 5, make([]byte, 252)), in(true, false, false)), 14+20+8+8+200),
			key: outerKey(false, 17, portGeneve, map[string]uint64{"tunnel_truncated": 1}), outerMACs: true},
		{name: "gre with routing", frame: gre(false, 0x0800, greOpts{routing: true}, in(false, false, false)),
			key: outerKey(false, 47, 0, map[string]uint64{"tunnel_bad_header": 1}), outerMACs: true},
		{name: "gre version 2", frame: gre(false, 0x0800, greOpts{version: 2}, in(false, false, false)),
			key: outerKey(false, 47, 0, map[string]uint64{"tunnel_bad_header": 1}), outerMACs: true},
		{name: "gre key cut short", frame: truncate(gre(false, 0x0800, greOpts{key: true}, in(false, false, false)), 14+20+4+2),
			key: outerKey(false, 47, 0, map[string]uint64{"tunnel_truncated": 1}), outerMACs: true},
		{name: "ipip inner header cut short", frame: truncate(ipTunnel(t, false, layers.IPProtocolIPv4, in(false, false, false)), 14+20+16),
			key: outerKey(false, 4, 0, map[string]uint64{"tunnel_truncated": 1}), outerMACs: true},
		// Not taken apart, and not an anomaly: PPTP's GRE, GRE carrying
		// something else than IP or Ethernet.
		{name: "gre version 1 (pptp)", frame: gre(false, 0x880b, greOpts{version: 1, key: true}, payload),
			key: outerKey(false, 47, 0, nil), outerMACs: true},
		{name: "gre carrying erspan", frame: gre(false, 0x88be, greOpts{seq: true}, payload),
			key: outerKey(false, 47, 0, nil), outerMACs: true},
		// Not tunnels at all.
		{name: "udp to 5353, inside the ports' range", frame: udpTunnel(t, false, 50000, 5353, payload),
			key: outerKey(false, 17, 5353, nil), outerMACs: true},
		{name: "udp-lite to 4789", frame: frame(t, outerEth(false), outerIP(false, layers.IPProtocolUDPLite),
			gopacket.Payload{0xc3, 0x50, 0x12, 0xb5, 0, 8, 0, 0}, gopacket.Payload(vxlanHeader(0x08, 42)), gopacket.Payload(in(true, false, false))),
			key: outerKey(false, 136, portVXLAN, nil), outerMACs: true},
	}
}

// TestTunnels runs the entry program on crafted frames of every
// encapsulation (BPF_PROG_TEST_RUN; this kernel has no Geneve, GRE or IPIP
// devices) and checks the flow key is the inner packet's, the counts are
// the whole frame's, the tunnel table holds the outer side, and that a
// malformed or cut tunnel is counted and keyed by its outer headers.
func TestTunnels(t *testing.T) {
	testutil.RequirePrivileged(t)
	cases := tunnelCases(t)
	for _, tables := range []TableKind{PerCPU, Shared} {
		for _, caps := range [][]string{{"flows"}, {"flows", "capture", "rules"}} {
			dp := loadForTest(t, Options{FlowBudget: 64, Tables: tables, RingBufSize: 1 << 16, Capabilities: caps})
			if len(caps) > 1 {
				// Rules on, none set: every packet is measured.
				if _, err := dp.SetRules(RuleSet{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, tc := range cases {
				t.Run(tables.String()+"/"+caps[len(caps)-1]+"/"+tc.name, func(t *testing.T) {
					checkTunnelCase(t, dp, tc)
				})
			}
		}
	}
}

func checkTunnelCase(t *testing.T, dp *Datapath, tc tunnelCase) {
	t.Helper()
	before := counterMap(t, dp)
	for _, dir := range []flow.Direction{flow.Ingress, flow.Egress} {
		if ret := runProg(t, dp, dir, tc.frame); int32(ret) != -1 {
			t.Fatalf("%s returned %d, want -1 (TCX_NEXT)", dir, int32(ret))
		}
	}
	d, err := dp.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	var recs []drained
	if _, err := d.Read(func(k *flow.Key, perCPU []flow.Stats) {
		s, _ := flow.MergePerCPU(perCPU, 0)
		recs = append(recs, drained{key: *k, stats: s})
	}); err != nil {
		t.Fatal(err)
	}
	tunnels, err := Tunnels(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Clear(); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("got %d flows, want one per direction: %+v", len(recs), recs)
	}
	src, dst := macA, macB
	if tc.outerMACs {
		src, dst = macOuterA, macOuterB
	}
	for _, r := range recs {
		checkKeyMACs(t, r, tc.key, uint64(len(tc.frame)), src, dst)
		got, ok := tunnels[r.key]
		switch {
		case tc.tunnel == nil && ok:
			t.Errorf("%s: outer side %+v kept for a packet counted by its outer headers", r.key.Direction, got)
		case tc.tunnel != nil && !ok:
			t.Errorf("%s: no outer side kept (tunnel table: %+v)", r.key.Direction, tunnels)
		case tc.tunnel != nil && got != *tc.tunnel:
			t.Errorf("%s: outer side\n got %+v\nwant %+v", r.key.Direction, got, *tc.tunnel)
		}
	}
	if want := 0; tc.tunnel != nil {
		want = 2
		if len(tunnels) != want {
			t.Errorf("tunnel table holds %d entries, want %d: %+v", len(tunnels), want, tunnels)
		}
	} else if len(tunnels) != want {
		t.Errorf("tunnel table holds %d entries, want %d: %+v", len(tunnels), want, tunnels)
	}
	after := counterMap(t, dp)
	for name, v := range after {
		if d := v - before[name]; d != 2*tc.key.counters[name] && name != "pulled" {
			t.Errorf("counter %s moved by %d, want %d", name, d, 2*tc.key.counters[name])
		}
	}
}

// TestTunnelTableFollowsFlowTable: the outer side is written with a flow's
// first packet in a table, and the tunnel table is emptied with the flow
// table, so that the next interval's flows get their own.
func TestTunnelTableFollowsFlowTable(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp := loadForTest(t, Options{FlowBudget: 64, RingBufSize: 1 << 16})
	payload := []byte("x")
	a := udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x08, 100), innerFrame(t, true, false, false, payload))
	b := udpTunnel(t, false, 50001, portVXLAN, vxlanHeader(0x08, 200), innerFrame(t, true, false, false, payload))
	drain := func() ([]drained, map[flow.Key]tunnel.Info) {
		d, err := dp.Rotate()
		if err != nil {
			t.Fatal(err)
		}
		var recs []drained
		if _, err := d.Read(func(k *flow.Key, perCPU []flow.Stats) {
			s, _ := flow.MergePerCPU(perCPU, 0)
			recs = append(recs, drained{key: *k, stats: s})
		}); err != nil {
			t.Fatal(err)
		}
		tun, err := Tunnels(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Clear(); err != nil {
			t.Fatal(err)
		}
		return recs, tun
	}
	// One inner flow through two tunnels (VNI 100 first, then 200) in one
	// interval: 3 packets, and the first one's outer side.
	runProg(t, dp, flow.Ingress, a)
	runProg(t, dp, flow.Ingress, b)
	runProg(t, dp, flow.Ingress, a)
	recs, tun := drain()
	if len(recs) != 1 || recs[0].stats.Packets != 3 || len(tun) != 1 || tun[recs[0].key].ID != 100 {
		t.Fatalf("first interval: %+v, tunnels %+v; want one flow of 3 packets with VNI 100", recs, tun)
	}
	// Next interval: the other tunnel first.
	runProg(t, dp, flow.Ingress, b)
	recs, tun = drain()
	if len(recs) != 1 || recs[0].stats.Packets != 1 || tun[recs[0].key].ID != 200 || tun[recs[0].key].SrcPort != 50001 {
		t.Fatalf("second interval: %+v, tunnels %+v; want one flow of 1 packet with VNI 200 from port 50001", recs, tun)
	}
	// Both tables drained and cleared: nothing left in either.
	for range 2 {
		if recs, tun := drain(); len(recs) != 0 || len(tun) != 0 {
			t.Fatalf("after clearing: %+v, tunnels %+v", recs, tun)
		}
	}
}

// TestTunnelTableFull: when the tunnel table is full, the flow is counted
// all the same, without its outer side, and the miss is counted.
func TestTunnelTableFull(t *testing.T) {
	testutil.RequirePrivileged(t)
	const budget = 16
	dp := loadForTest(t, Options{FlowBudget: budget, RingBufSize: 1 << 16})
	before := counterMap(t, dp)
	payload := []byte("x")
	// budget tunnelled flows fill both tables; one more goes through the
	// ring buffer, and its outer side finds the tunnel table full.
	for i := range budget + 1 {
		in := innerFrame(t, true, false, false, payload)
		in[14+20], in[14+20+1] = 0x10, byte(i) // the inner source port
		runProg(t, dp, flow.Ingress, udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x08, 5), in))
	}
	d, err := dp.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	n, err := d.Read(func(*flow.Key, []flow.Stats) {})
	if err != nil {
		t.Fatal(err)
	}
	tun, err := Tunnels(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Clear(); err != nil {
		t.Fatal(err)
	}
	after := counterMap(t, dp)
	if n != budget || len(tun) != budget {
		t.Errorf("%d flows, %d outer sides in the tables; want %d of each", n, len(tun), budget)
	}
	if got := after["tunnel_table_full"] - before["tunnel_table_full"]; got != 1 {
		t.Errorf("tunnel_table_full moved by %d, want 1", got)
	}
	if got := after["map_full"] - before["map_full"]; got != 1 {
		t.Errorf("map_full moved by %d, want 1 (the packet went through the ring buffer)", got)
	}
}

// TestTunnelTableMemory: the tunnel tables are not preallocated, so a host
// without tunnels gives them only their buckets, and a tunnelled flow costs
// its entry. Logs the bytes (the kernel's memlock accounting).
func TestTunnelTableMemory(t *testing.T) {
	testutil.RequirePrivileged(t)
	const budget, flows = 65536, 4096
	dp := loadForTest(t, Options{FlowBudget: budget, RingBufSize: 1 << 16})
	memlock := func() uint64 {
		info, err := dp.objs.TunnelsA.Info()
		if err != nil {
			t.Fatal(err)
		}
		n, ok := info.Memlock()
		if !ok {
			t.Skip("the kernel reports no memlock for maps")
		}
		return n
	}
	empty := memlock()
	payload := make([]byte, 64)
	for i := range flows {
		in := innerFrame(t, true, false, false, payload)
		in[14+20], in[14+20+1] = byte(i>>8), byte(i) // the inner source port
		runProg(t, dp, flow.Ingress, udpTunnel(t, false, uint16(30000+i), portVXLAN, vxlanHeader(0x08, 42), in))
	}
	full := memlock()
	_, tables, err := dp.MemoryBytes()
	if err != nil {
		t.Fatal(err)
	}
	perFlow := float64(full-empty) / flows
	t.Logf("tunnel table, flow budget %d: %d bytes empty, %d with %d tunnelled flows (%.0f a flow); the two flow tables: %d",
		budget, empty, full, flows, perFlow, tables)
	// Preallocated, an entry (60-byte key, 56-byte value, the kernel's
	// element header) would be there for each of the budget's flows.
	if empty > budget*32 || perFlow < 116 || perFlow > 512 {
		t.Errorf("tunnel table: %d bytes empty, %.0f a flow: not what a table without preallocation holds", empty, perFlow)
	}
}
