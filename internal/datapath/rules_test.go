package datapath

import (
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// ruleFrame is a TCP or UDP packet from src:sport to dst:dport with size
// bytes of payload.
func ruleFrame(t testing.TB, proto layers.IPProtocol, src, dst string, sport, dport uint16, size int) []byte {
	t.Helper()
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	var l4 gopacket.SerializableLayer
	if proto == layers.IPProtocolTCP {
		l4 = &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), ACK: true, Window: 512}
	} else {
		l4 = &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	}
	if s.Is4() {
		return frame(t, eth(layers.EthernetTypeIPv4), &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto,
			SrcIP: s.AsSlice(), DstIP: d.AsSlice()}, l4, make(gopacket.Payload, size))
	}
	return frame(t, eth(layers.EthernetTypeIPv6), &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto,
		SrcIP: s.AsSlice(), DstIP: d.AsSlice()}, l4, make(gopacket.Payload, size))
}

// prefix is a trie key for a CIDR, IPv4 mapped.
func prefix(cidr string) RulePrefix {
	p := netip.MustParsePrefix(cidr)
	a := p.Addr()
	bits := p.Bits()
	if a.Is4() {
		bits += 96
	}
	return RulePrefix{Addr: netip.AddrFrom16(a.As16()).As16(), Len: uint8(bits)}
}

// TestRules runs the real program on crafted packets under hand-compiled
// rule sets (internal/rules compiles them from text; its own tests hold
// the compiler to a reference matcher): the rule with the longest prefix
// decides, ties go to the first; skip leaves no flow, sample 1:N measures
// one packet in N and says N, aggregate counts the prefixes' flow; every
// packet is in its rule's counts; and a replaced set hands back its counts.
func TestRules(t *testing.T) {
	testutil.RequirePrivileged(t)
	onOneCPU(t)
	dp := loadForTest(t, Options{FlowBudget: 256, RingBufSize: 1 << 16, Capabilities: []string{"flows", "rules"}})

	// 0: src 10.0.0.0/8 measure; 1: src 10.1.0.0/16 skip; 2: udp sample
	// 1:4 (no prefix); 3: dst 2001:db8::/32 tcp dport 443 skip;
	// 4: net 192.168.0.0/16 aggregate /24.
	rs := RuleSet{
		Rules: []RuleEntry{
			{Action: RuleMeasure},
			{Action: RuleSkip},
			{Action: RuleSample, SampleN: 4, Proto: 17},
			{Action: RuleSkip, Proto: 6, PortSide: RulePortDst, PortLo: 443, PortHi: 443},
			{Action: RuleAggregate, AggPrefix: 24},
		},
		Src: map[RulePrefix][]RuleCandidate{
			prefix("10.0.0.0/8"):     {{Slot: 0, Plen: 104}},
			prefix("10.1.0.0/16"):    {{Slot: 1, Plen: 112}, {Slot: 0, Plen: 104}},
			prefix("192.168.0.0/16"): {{Slot: 4, Plen: 112}},
		},
		Dst: map[RulePrefix][]RuleCandidate{
			prefix("2001:db8::/32"):  {{Slot: 3, Plen: 32}},
			prefix("192.168.0.0/16"): {{Slot: 4, Plen: 112}},
		},
		Wild: []RuleCandidate{{Slot: 2, Plen: 0}},
	}
	old, err := dp.SetRules(rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != 0 {
		t.Errorf("the first set replaced %d rules' counts, want none", len(old))
	}

	type send struct {
		frame []byte
		n     int
	}
	tcp, udp := layers.IPProtocolTCP, layers.IPProtocolUDP
	sends := []send{
		{ruleFrame(t, tcp, "10.2.0.1", "172.16.0.1", 1000, 80, 10), 3},      // rule 0: measured
		{ruleFrame(t, tcp, "10.1.0.1", "172.16.0.1", 1000, 80, 10), 5},      // rule 1 (longer prefix): skipped
		{ruleFrame(t, udp, "172.16.0.9", "172.16.0.1", 53, 53, 20), 8},      // rule 2: sampled, 2 of 8
		{ruleFrame(t, udp, "10.1.0.1", "172.16.0.1", 53, 53, 20), 2},        // rule 1 beats the wildcard
		{ruleFrame(t, tcp, "2001:db8:1::1", "2001:db8::9", 999, 443, 0), 4}, // rule 3: skipped
		{ruleFrame(t, tcp, "2001:db8:1::1", "2001:db8::9", 999, 80, 0), 1},  // rule 3's port misses: no rule
		{ruleFrame(t, tcp, "192.168.7.1", "172.16.0.1", 1111, 80, 0), 2},    // rule 4: /24 aggregate
		{ruleFrame(t, tcp, "192.168.7.99", "172.16.0.1", 2222, 81, 0), 3},   // the same aggregate
		{ruleFrame(t, tcp, "172.16.0.1", "192.168.8.5", 80, 3333, 0), 1},    // rule 4 by destination
	}
	var total uint64
	for _, s := range sends {
		for range s.n {
			if ret := runProg(t, dp, flow.Ingress, s.frame); ret != tcxNext {
				t.Fatalf("the program returned %d", int32(ret))
			}
		}
		total += uint64(s.n)
	}

	counts, err := dp.RuleCounts()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ packets, measured uint64 }{{3, 3}, {7, 0}, {8, 2}, {4, 0}, {6, 6}}
	for i, w := range want {
		if counts[i].Packets != w.packets || counts[i].MeasuredPackets != w.measured {
			t.Errorf("rule %d: %d packets, %d measured; want %d, %d", i, counts[i].Packets, counts[i].MeasuredPackets, w.packets, w.measured)
		}
	}

	flows := drainAll(t, dp)
	byKey := map[string]drained{}
	var inFlows, ruled uint64
	for _, f := range flows {
		k := f.key.SrcIP().String() + ">" + f.key.DstIP().String()
		byKey[k] = f
		inFlows += f.stats.Packets
	}
	for _, c := range counts {
		ruled += c.Packets - c.MeasuredPackets
	}
	// Every packet is in a flow or in a rule's unmeasured count.
	if inFlows+ruled != total {
		t.Errorf("%d packets in flows + %d counted only by their rule = %d, want the %d sent", inFlows, ruled, inFlows+ruled, total)
	}
	if f, ok := byKey["172.16.0.9>172.16.0.1"]; !ok || f.stats.Packets != 2 || f.stats.Sampling != 4 {
		t.Errorf("sampled flow: %+v (found %v), want 2 packets at sampling 4", f.stats, ok)
	}
	if _, ok := byKey["10.1.0.1>172.16.0.1"]; ok {
		t.Errorf("a skipped packet made a flow")
	}
	if f := byKey["10.2.0.1>172.16.0.1"]; f.stats.Packets != 3 || f.stats.Sampling != 1 {
		t.Errorf("measured flow: %+v, want 3 packets at sampling 1", f.stats)
	}
	if f := byKey["2001:db8:1::1>2001:db8::9"]; f.stats.Packets != 1 {
		t.Errorf("the IPv6 packet no rule decides: %+v, want 1 packet", f.stats)
	}
	agg, ok := byKey["192.168.7.0>172.16.0.0"]
	if !ok || agg.stats.Packets != 5 || agg.key.SrcPort != 0 || agg.key.DstPort != 0 || agg.key.SrcMAC != ([6]byte{}) || agg.key.AggPrefix != 24 {
		t.Errorf("aggregate: %+v %+v (found %v), want 5 packets without ports at /24", agg.key, agg.stats, ok)
	}
	if agg, ok := byKey["172.16.0.0>192.168.8.0"]; !ok || agg.stats.Packets != 1 {
		t.Errorf("aggregate by destination: %+v (found %v), want 1 packet", agg.stats, ok)
	}

	// A new set: the old one's counts come back, final; the new set
	// starts at zero and decides at once.
	old, err = dp.SetRules(RuleSet{Rules: []RuleEntry{{Action: RuleSkip}}, Wild: []RuleCandidate{{Slot: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != len(want) || old[1].Packets != 7 || old[2].Packets != 8 {
		t.Errorf("replaced set's counts %+v, want those above", old)
	}
	runProg(t, dp, flow.Ingress, sends[0].frame)
	counts, err = dp.RuleCounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Packets != 1 || counts[0].MeasuredPackets != 0 {
		t.Errorf("new set's counts %+v, want one skipped packet", counts)
	}
	if flows := drainAll(t, dp); len(flows) != 0 {
		t.Errorf("%d flows under a skip-everything set", len(flows))
	}
	// And back to no rule: every packet measured.
	if _, err := dp.SetRules(RuleSet{}); err != nil {
		t.Fatal(err)
	}
	runProg(t, dp, flow.Ingress, sends[0].frame)
	if flows := drainAll(t, dp); len(flows) != 1 || flows[0].stats.Packets != 1 {
		t.Errorf("no rule: flows %+v, want the packet measured", flows)
	}
}

func TestRulesNeedTheCapability(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp := loadForTest(t, Options{FlowBudget: 16, RingBufSize: 1 << 16})
	if _, err := dp.SetRules(RuleSet{}); err == nil {
		t.Error("SetRules on a datapath without rules succeeded")
	}
	if _, err := Load(Options{FlowBudget: 16, Capabilities: []string{"rules"}}); err == nil {
		t.Error("rules without flows loaded")
	}
}
