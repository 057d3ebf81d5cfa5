package datapath

import (
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// tcpFlagsFrame is a TCP packet of one flow (192.168.9.1:1000 to
// 172.16.9.1:80) with the flags syn (SYN) or not (ACK).
func tcpFlagsFrame(t testing.TB, syn bool) []byte {
	t.Helper()
	return frame(t, eth(layers.EthernetTypeIPv4), &layers.IPv4{Version: 4, IHL: 5, TTL: 64,
		Protocol: layers.IPProtocolTCP, SrcIP: []byte{192, 168, 9, 1}, DstIP: []byte{172, 16, 9, 1}},
		&layers.TCP{SrcPort: 1000, DstPort: 80, SYN: syn, ACK: !syn, Window: 512}, make(gopacket.Payload, 10))
}

// wantRuleCounts checks the counts of the set in force, packets and
// measured packets by slot.
func wantRuleCounts(t *testing.T, dp *Datapath, what string, want ...[2]uint64) {
	t.Helper()
	counts, err := dp.RuleCounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != len(want) {
		t.Fatalf("%s: %d rules' counts, want %d", what, len(counts), len(want))
	}
	for i, w := range want {
		if counts[i].Packets != w[0] || counts[i].MeasuredPackets != w[1] {
			t.Errorf("%s: rule %d: %d packets, %d measured; want %d, %d", what, i,
				counts[i].Packets, counts[i].MeasuredPackets, w[0], w[1])
		}
	}
}

// TestRulesVerdictCache holds the verdict cache (rules.h) to the rules: a
// flow's later packets take its kept verdict; a replacement, a change of
// interface groups and a packet with other TCP flags make it be judged
// again; and flows that share a cache slot each keep their own verdict.
// One CPU, so that every packet finds what the ones before it left.
func TestRulesVerdictCache(t *testing.T) {
	testutil.RequirePrivileged(t)
	onOneCPU(t)
	dp := loadForTest(t, Options{FlowBudget: 8192, RingBufSize: 1 << 16, Capabilities: []string{"flows", "rules"}})
	// The generations cross the wrap of the 32-bit counter, which skips
	// 0: the set parity must survive it.
	dp.rulesGen = 0xfffffffe

	syn, ack := tcpFlagsFrame(t, true), tcpFlagsFrame(t, false)
	tcpMeasure := RuleEntry{Action: RuleMeasure, Proto: 6}
	udpSkip := RuleEntry{Action: RuleSkip, Proto: 17}
	wild2 := []RuleCandidate{{Slot: 0}, {Slot: 1}}

	// A flow's second packet is decided from the cache: rewrite the kept
	// verdict to the other rule and the packet follows it.
	if _, err := dp.SetRules(RuleSet{Rules: []RuleEntry{tcpMeasure, udpSkip}, Wild: wild2}); err != nil {
		t.Fatal(err)
	}
	runProg(t, dp, flow.Ingress, ack)
	wantRuleCounts(t, dp, "first packet", [2]uint64{1, 1}, [2]uint64{0, 0})
	slot, v := keptVerdict(t, dp)
	if v.Judged != int32(dp.rulesGen&1)<<16 {
		t.Fatalf("kept verdict %#x, want set %d slot 0", v.Judged, dp.rulesGen&1)
	}
	forgeVerdict(t, dp, slot, int32(dp.rulesGen&1)<<16|1)
	runProg(t, dp, flow.Ingress, ack)
	wantRuleCounts(t, dp, "forged verdict", [2]uint64{1, 1}, [2]uint64{1, 0})
	if flows := drainAll(t, dp); len(flows) != 1 || flows[0].stats.Packets != 1 {
		t.Errorf("flows %+v, want the first packet only", flows)
	}
	ifindex := keptVerdictKey(t, dp).Ifindex

	// A replacement: the kept verdict is stale, the new set decides
	// from its first packet on, and so does the one after it.
	if _, err := dp.SetRules(RuleSet{Rules: []RuleEntry{{Action: RuleSkip, Proto: 6}}, Wild: []RuleCandidate{{Slot: 0}}}); err != nil {
		t.Fatal(err)
	}
	if dp.rulesGen != 2 {
		t.Fatalf("generation %#x after the wrap, want 2", dp.rulesGen)
	}
	for range 3 {
		runProg(t, dp, flow.Ingress, ack)
	}
	wantRuleCounts(t, dp, "skip set", [2]uint64{3, 0})
	if _, err := dp.SetRules(RuleSet{Rules: []RuleEntry{tcpMeasure}, Wild: []RuleCandidate{{Slot: 0}}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		runProg(t, dp, flow.Ingress, ack)
	}
	wantRuleCounts(t, dp, "measure set", [2]uint64{2, 2})
	if flows := drainAll(t, dp); len(flows) != 1 || flows[0].stats.Packets != 2 {
		t.Errorf("flows %+v, want 2 packets measured", flows)
	}

	// A rule on TCP flags decides packet by packet within one flow.
	synSkip := RuleEntry{Action: RuleSkip, Proto: 6, TCPFlagsMask: 0x02, TCPFlagsValue: 0x02}
	if _, err := dp.SetRules(RuleSet{Rules: []RuleEntry{synSkip, tcpMeasure}, Wild: wild2}); err != nil {
		t.Fatal(err)
	}
	for _, f := range [][]byte{syn, ack, ack, syn, ack, syn, syn, ack} {
		runProg(t, dp, flow.Ingress, f)
	}
	wantRuleCounts(t, dp, "TCP flags", [2]uint64{4, 0}, [2]uint64{4, 4})

	// The interface joins and leaves a rule's group: its flow is judged
	// again each time.
	ifSkip := RuleEntry{Action: RuleSkip, IfaceGroup: 1}
	if _, err := dp.SetRules(RuleSet{Rules: []RuleEntry{ifSkip, tcpMeasure}, Wild: wild2, HasIface: true,
		IfaceGroups: map[uint32]uint64{ifindex: 1}}); err != nil {
		t.Fatal(err)
	}
	runProg(t, dp, flow.Ingress, ack)
	runProg(t, dp, flow.Ingress, ack)
	if err := dp.SetRuleIfaces(map[uint32]uint64{}); err != nil {
		t.Fatal(err)
	}
	runProg(t, dp, flow.Ingress, ack)
	if err := dp.SetRuleIfaces(map[uint32]uint64{ifindex: 1}); err != nil {
		t.Fatal(err)
	}
	runProg(t, dp, flow.Ingress, ack)
	wantRuleCounts(t, dp, "interface groups", [2]uint64{3, 0}, [2]uint64{1, 1})
	drainAll(t, dp)

	// More flows than the cache has slots, so that some share one: two
	// passes over 6 000 UDP flows, source ports below 3 000 skipped.
	const nflows, skipped = 6000, 3000
	if _, err := dp.SetRules(RuleSet{
		Rules: []RuleEntry{{Action: RuleSkip, Proto: 17, PortSide: RulePortSrc, PortLo: 1, PortHi: skipped - 1},
			{Action: RuleMeasure, Proto: 17}},
		Wild: wild2,
	}); err != nil {
		t.Fatal(err)
	}
	frames := make([][]byte, nflows)
	for i := range frames {
		frames[i] = ruleFrame(t, layers.IPProtocolUDP, "192.168.10.1", "172.16.10.1", uint16(i+1), 53, 0)
	}
	for range 2 {
		for _, f := range frames {
			runProg(t, dp, flow.Ingress, f)
		}
	}
	wantRuleCounts(t, dp, "shared slots", [2]uint64{2 * (skipped - 1), 0},
		[2]uint64{2 * (nflows - skipped + 1), 2 * (nflows - skipped + 1)})
	flows := drainAll(t, dp)
	if len(flows) != nflows-skipped+1 {
		t.Errorf("%d flows, want %d", len(flows), nflows-skipped+1)
	}
	for _, f := range flows {
		if f.stats.Packets != 2 || f.key.SrcPort < skipped {
			t.Errorf("flow from port %d: %d packets, want only ports from %d, 2 packets each", f.key.SrcPort, f.stats.Packets, skipped)
			break
		}
	}
}

// keptVerdict finds the one entry of the verdict cache, on this CPU, that
// the generation in force wrote.
func keptVerdict(t *testing.T, dp *Datapath) (uint32, loupeRulesVerdict) {
	t.Helper()
	cpu := currentCPU(t)
	var (
		slot, found uint32
		per         []loupeRulesVerdict
		v           loupeRulesVerdict
		n           int
	)
	it := dp.objs.RulesCache.Iterate()
	for it.Next(&slot, &per) {
		if per[cpu].Gen == dp.rulesGen {
			found, v = slot, per[cpu]
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d verdicts of generation %#x on CPU %d, want 1", n, dp.rulesGen, cpu)
	}
	return found, v
}

func keptVerdictKey(t *testing.T, dp *Datapath) loupeFlowKey {
	t.Helper()
	_, v := keptVerdict(t, dp)
	return v.Key
}

// forgeVerdict rewrites the verdict kept in slot on this CPU.
func forgeVerdict(t *testing.T, dp *Datapath, slot uint32, judged int32) {
	t.Helper()
	per := make([]loupeRulesVerdict, dp.ncpu)
	if err := dp.objs.RulesCache.Lookup(slot, per); err != nil {
		t.Fatal(err)
	}
	per[currentCPU(t)].Judged = judged
	if err := dp.objs.RulesCache.Put(slot, per); err != nil {
		t.Fatal(err)
	}
}

// currentCPU is the one CPU onOneCPU left the test to run on.
func currentCPU(t *testing.T) int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	if set.Count() != 1 {
		t.Fatalf("the test may run on %d CPUs, want 1 (onOneCPU)", set.Count())
	}
	for cpu := 0; ; cpu++ {
		if set.IsSet(cpu) {
			return cpu
		}
	}
}

func TestNextRulesGen(t *testing.T) {
	for _, tc := range []struct{ gen, step, want uint32 }{
		{0, 1, 1}, {1, 1, 2}, {1, 2, 3}, {0xfffffffe, 1, 0xffffffff},
		{0xffffffff, 1, 2}, {0xfffffffe, 2, 2}, {0xffffffff, 2, 1},
	} {
		got := nextRulesGen(tc.gen, tc.step)
		if got != tc.want || got&1 != (tc.gen+tc.step)&1 {
			t.Errorf("nextRulesGen(%#x, %d) = %#x, want %#x", tc.gen, tc.step, got, tc.want)
		}
	}
}
