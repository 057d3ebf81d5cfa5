package datapath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// udpFrame returns a distinct IPv4/UDP flow per source port.
func udpFrame(t testing.TB, srcPort uint16, size int) []byte {
	t.Helper()
	return frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolUDP),
		&layers.UDP{SrcPort: layers.UDPPort(srcPort), DstPort: 9}, make(gopacket.Payload, size))
}

func TestRotateIsExactAcrossSwaps(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, tables := range []TableKind{PerCPU, Shared} {
		t.Run(tables.String(), func(t *testing.T) {
			dp := loadForTest(t, Options{FlowBudget: 16, Tables: tables, RingBufSize: 1 << 16})
			f := udpFrame(t, 1000, 100)
			var total uint64
			for round, n := range []int{3, 1, 7, 0, 2} {
				for range n {
					runProg(t, dp, flow.Ingress, f)
				}
				got := drainAll(t, dp)
				var pk, by uint64
				for _, d := range got {
					pk += d.stats.Packets
					by += d.stats.Bytes
				}
				if pk != uint64(n) || by != uint64(n*len(f)) {
					t.Fatalf("round %d: drained %d packets %d bytes, want %d and %d", round, pk, by, n, n*len(f))
				}
				total += pk
			}
			// Both tables are empty now: two more rotations find nothing.
			for range 2 {
				if got := drainAll(t, dp); len(got) != 0 {
					t.Fatalf("table not empty after drain: %+v", got)
				}
			}
			if total != 13 {
				t.Fatalf("total %d, want 13", total)
			}
		})
	}
}

func TestMapFullDivertsToRingBuffer(t *testing.T) {
	testutil.RequirePrivileged(t)
	onOneCPU(t) // a per-CPU table's budget is each CPU's
	for _, tables := range []TableKind{PerCPU, Shared} {
		t.Run(tables.String(), func(t *testing.T) {
			const budget, flows = 4, 10
			dp := loadForTest(t, Options{FlowBudget: budget, Tables: tables, RingBufSize: 1 << 16})
			ev, err := dp.OpenEvents(0)
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Close()

			for i := range flows {
				runProg(t, dp, flow.Egress, udpFrame(t, uint16(2000+i), 10+i))
			}
			inTable := drainAll(t, dp)
			if len(inTable) != budget {
				t.Fatalf("table held %d flows, want the budget %d", len(inTable), budget)
			}
			events := readEvents(t, ev)
			if len(events) != flows-budget {
				t.Fatalf("%d events, want %d", len(events), flows-budget)
			}
			seen := map[uint16]uint64{}
			for _, d := range inTable {
				seen[d.key.SrcPort] += d.stats.Bytes
			}
			for _, e := range events {
				if e.Reason != flow.ReasonMapFull || e.Errno != 7 /* E2BIG */ {
					t.Errorf("event reason %v errno %d, want map_full E2BIG", e.Reason, e.Errno)
				}
				if e.Stats.Packets != 1 || e.Key.Direction != flow.Egress {
					t.Errorf("event %+v", e)
				}
				if e.Stats.Segments != 1 || e.Stats.WireBytes != e.Stats.Bytes {
					t.Errorf("event of a packet that is not GSO: %d segments %d wire bytes for %d bytes",
						e.Stats.Segments, e.Stats.WireBytes, e.Stats.Bytes)
				}
				seen[e.Key.SrcPort] += e.Stats.Bytes
			}
			for i := range flows {
				want := uint64(len(udpFrame(t, 0, 10+i)))
				if got := seen[uint16(2000+i)]; got != want {
					t.Errorf("flow %d: %d bytes accounted, want %d", i, got, want)
				}
			}
			if c := counterMap(t, dp); c["map_full"] != flows-budget || c["lost_packets"] != 0 {
				t.Errorf("counters %v", c)
			}
		})
	}
}

func TestRingBufferFullIsCountedAsLost(t *testing.T) {
	testutil.RequirePrivileged(t)
	// A per-CPU table's budget is each CPU's: runs that moved to the other
	// CPU would find room there.
	onOneCPU(t)
	// One page of ring buffer holds a few dozen events; budget 1 sends
	// every other flow there, and the rest must show up as lost.
	dp := loadForTest(t, Options{FlowBudget: 1, Tables: PerCPU, RingBufSize: 4096})
	ev, err := dp.OpenEvents(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()

	const flows = 200
	var sentBytes uint64
	for i := range flows {
		f := udpFrame(t, uint16(3000+i), 20)
		sentBytes += uint64(len(f))
		runProg(t, dp, flow.Ingress, f)
	}
	var pk, by uint64
	for _, d := range drainAll(t, dp) {
		pk, by = pk+d.stats.Packets, by+d.stats.Bytes
	}
	events := readEvents(t, ev)
	for _, e := range events {
		pk, by = pk+e.Stats.Packets, by+e.Stats.Bytes
	}
	c := counterMap(t, dp)
	if c["ringbuf_full"] == 0 {
		t.Fatalf("ring buffer never filled: %v", c)
	}
	if pk+c["lost_packets"] != flows || by+c["lost_bytes"] != sentBytes {
		t.Fatalf("accounted %d+%d lost packets, %d+%d lost bytes; sent %d packets %d bytes",
			pk, c["lost_packets"], by, c["lost_bytes"], flows, sentBytes)
	}
	if c["map_full"] != flows-1 || c["ringbuf_full"] != c["lost_packets"] {
		t.Fatalf("counters %v", c)
	}
}

// TestOffPathCountsWhatItLoses runs the off-path datapath (map_type
// ringbuf): every packet is one event, the table stays empty, and what a
// full ring buffer refuses is counted as lost, to the packet and the byte.
func TestOffPathCountsWhatItLoses(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp := loadForTest(t, Options{FlowBudget: 1024, Tables: RingBuf, RingBufSize: 4096})
	ev, err := dp.OpenEvents(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()

	// 3 flows of 70 packets: more than a page of ring buffer holds.
	const flows, each = 3, 70
	var sentBytes uint64
	for i := range flows * each {
		f := udpFrame(t, uint16(4000+i%flows), 10+i%flows)
		sentBytes += uint64(len(f))
		runProg(t, dp, flow.Egress, f)
	}
	if d := drainAll(t, dp); len(d) != 0 {
		t.Fatalf("the off-path datapath wrote %d flows into its table", len(d))
	}
	events := readEvents(t, ev)
	var pk, by uint64
	for _, e := range events {
		if e.Reason != flow.ReasonOffPath || e.Errno != 0 || e.Stats.Packets != 1 {
			t.Fatalf("event %+v, want one packet, off_path, no error", e)
		}
		pk, by = pk+e.Stats.Packets, by+e.Stats.Bytes
	}
	c := counterMap(t, dp)
	if len(events) == 0 || c["lost_packets"] == 0 {
		t.Fatalf("%d events and %d lost: the ring buffer should hold some and refuse some", len(events), c["lost_packets"])
	}
	if pk+c["lost_packets"] != flows*each || by+c["lost_bytes"] != sentBytes {
		t.Fatalf("accounted %d+%d lost packets, %d+%d lost bytes; sent %d packets %d bytes",
			pk, c["lost_packets"], by, c["lost_bytes"], flows*each, sentBytes)
	}
	if c["map_full"] != 0 || c["map_busy"] != 0 || c["ringbuf_full"] != c["lost_packets"] {
		t.Fatalf("counters %v", c)
	}
}

func readEvents(t *testing.T, ev *Events) []flow.Event {
	t.Helper()
	if err := ev.Drain(); err != nil {
		t.Fatal(err)
	}
	var out []flow.Event
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		e, err := ev.Read()
		if errors.Is(err, ErrDrained) {
			return out
		}
		if err != nil {
			t.Fatalf("read event: %v", err)
		}
		out = append(out, e)
	}
	t.Fatal("ring buffer never drained")
	return nil
}

// TestDecodeEvent checks the hand-written decoder against the layout bpf2go
// generated from the C struct.
func TestDecodeEvent(t *testing.T) {
	in := loupeFlowEvent{
		Key: loupeFlowKey{SrcAddr: [16]uint8{1, 2, 3}, DstAddr: [16]uint8{15: 9}, SrcMac: [6]uint8{1, 2, 3, 4, 5, 6},
			DstMac: [6]uint8{7, 8, 9, 10, 11, 12}, Ifindex: 0x01020304, EthType: 0x86dd, SrcPort: 443, DstPort: 55555,
			VlanId: 4094, Proto: 6, Direction: 1, AggPrefix: 24},
		Stats: loupeFlowStats{Packets: 3, Bytes: 4000, ExtraSegments: 6, ExtraWireBytes: 321, FirstSeen: 111, LastSeen: 222,
			TcpFlags: 0x1ff, Sampling: 7, Dscp: 46},
		Reason: 2, Err: -16,
	}
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.NativeEndian, &in); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != eventSize {
		t.Fatalf("binary size %d, struct size %d: padding crept in", buf.Len(), eventSize)
	}
	got, err := decodeEvent(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var wantKey flow.Key
	keyFromBPF(&wantKey, &in.Key)
	var wantStats flow.Stats
	statsFromBPF(&wantStats, &in.Stats)
	if got.Key != wantKey || got.Stats != wantStats || got.Reason != flow.ReasonMapBusy || got.Errno != 16 {
		t.Fatalf("decoded %+v", got)
	}
	if got.Key.VlanID != 4094 || got.Key.AggPrefix != 24 || got.Stats.Segments != 9 || got.Stats.WireBytes != 4321 {
		t.Fatalf("decoded vlan %d segments %d wire bytes %d", got.Key.VlanID, got.Stats.Segments, got.Stats.WireBytes)
	}
	if _, err := decodeEvent(buf.Bytes()[:eventSize-1]); err == nil {
		t.Fatal("short event decoded without error")
	}
}

// TestCounterNamesMatchGenerated keeps the name table in step with enum
// counter: every generated constant has a name, in order.
func TestCounterNamesMatchGenerated(t *testing.T) {
	checkCounterNames(t, "loupe_bpfel.go", "loupeCounterCOUNTER_", counterNames[:])
}

// checkCounterNames checks names against the constants of a counter enum
// that bpf2go generated into file, each starting with prefix: one name per
// constant, in order, the constant's name in lower case.
func checkCounterNames(t *testing.T, file, prefix string, names []string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for _, id := range vs.Names {
				if strings.HasPrefix(id.Name, prefix) && id.Name != prefix+"MAX" {
					consts = append(consts, id.Name)
				}
			}
		}
		return true
	})
	if len(consts) != len(names) {
		t.Fatalf("%d generated counters, %d names", len(consts), len(names))
	}
	for i, c := range consts {
		want := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(c, prefix)), "_", "")
		if got := strings.ReplaceAll(names[i], "_", ""); got != want {
			t.Errorf("counter %d: name %q for %s", i, names[i], c)
		}
	}
}

func TestMemoryIsReported(t *testing.T) {
	testutil.RequirePrivileged(t)
	small := loadForTest(t, Options{FlowBudget: 1024, Tables: PerCPU, RingBufSize: 1 << 16})
	big := loadForTest(t, Options{FlowBudget: 65536, Tables: PerCPU, RingBufSize: 1 << 16})
	_, s, err := small.MemoryBytes()
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := big.MemoryBytes()
	if err != nil {
		t.Fatal(err)
	}
	// Tables are preallocated: memory grows with the budget.
	if s == 0 || b < 32*s {
		t.Fatalf("table memory %d for 1024 flows, %d for 65536", s, b)
	}
}

// TestCapabilitySwitchedOffIsCompiledOut: a capability that is off is not
// in the loaded program at all (the verifier removes what its constant
// makes dead), so it costs nothing per packet; with every capability off
// the program only returns. With flows on, a packet is counted; with flows
// off, the same packet leaves the tables empty.
func TestCapabilitySwitchedOffIsCompiledOut(t *testing.T) {
	testutil.RequirePrivileged(t)
	names, err := Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, "flows") {
		t.Fatalf("capabilities %v: no flows", names)
	}
	if _, err := Load(Options{FlowBudget: 16, Capabilities: []string{"nosuch"}}); err == nil ||
		!strings.Contains(err.Error(), `"nosuch"`) {
		t.Fatalf("unknown capability: err %v", err)
	}

	xlated := func(dp *Datapath) int {
		info, err := dp.Ingress().Info()
		if err != nil {
			t.Fatal(err)
		}
		insns, err := info.Instructions()
		if err != nil {
			t.Fatal(err)
		}
		return len(insns)
	}
	on := loadForTest(t, Options{FlowBudget: 16, RingBufSize: 1 << 16, Capabilities: []string{"flows"}})
	off := loadForTest(t, Options{FlowBudget: 16, RingBufSize: 1 << 16, Capabilities: []string{}})
	nOn, nOff := xlated(on), xlated(off)
	// What is left with nothing on: the loads of the two switches (the
	// verifier keeps them though it knows their values) and their or, the
	// context's save, mov -1, exit: 9. No parse, no call.
	if nOff > 9 || nOn < 100 {
		t.Fatalf("instructions: %d with flows, %d with nothing; want > 100 and <= 9", nOn, nOff)
	}
	t.Logf("ingress program: %d instructions with flows, %d with every capability off", nOn, nOff)

	f := udpFrame(t, 1000, 100)
	for _, dp := range []*Datapath{on, off} {
		if ret := runProg(t, dp, flow.Ingress, f); int32(ret) != -1 {
			t.Fatalf("return %d, want -1 (TCX_NEXT)", int32(ret))
		}
	}
	if got := drainAll(t, on); len(got) != 1 || got[0].stats.Packets != 1 {
		t.Fatalf("flows on: drained %+v, want 1 flow of 1 packet", got)
	}
	if got := drainAll(t, off); len(got) != 0 {
		t.Fatalf("flows off: drained %+v, want nothing", got)
	}
}
