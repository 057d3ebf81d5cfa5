package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"loupe/internal/flow"
	"loupe/internal/sketch"
	"loupe/internal/testutil"
)

// skbIfindexContext is struct __sk_buff up to ifindex (offset 40):
// BPF_PROG_TEST_RUN runs the program on a packet of that device of the
// caller's network namespace when it is above 1 (1, or 0, is loopback).
type skbIfindexContext struct {
	_       [40]byte
	Ifindex uint32
}

// sketchKey is the key the datapath computes for udpFrame(srcPort) seen on
// ifindex in dir, as the sketch hashes it: struct flow_key and 4 zero bytes.
func sketchKey(t testing.TB, srcPort uint16, ifindex uint32, dir flow.Direction) sketch.Key {
	t.Helper()
	k := loupeFlowKey{Ifindex: ifindex, EthType: 0x0800, SrcPort: srcPort, DstPort: 9, Proto: 17, Direction: uint8(dir)}
	mapped := func(a []byte) (m [16]byte) {
		m[10], m[11] = 0xff, 0xff
		copy(m[12:], a)
		return m
	}
	k.SrcAddr, k.DstAddr = mapped(v4A.AsSlice()), mapped(v4B.AsSlice())
	copy(k.SrcMac[:], macA)
	copy(k.DstMac[:], macB)
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, &k); err != nil {
		t.Fatal(err)
	}
	var sk sketch.Key
	if b.Len() != 60 || copy(sk[:], b.Bytes()) != 60 {
		t.Fatalf("flow key of %d bytes, want 60", b.Len())
	}
	return sk
}

// sketchPacket is one packet a test runs: its flow (source port), length,
// interface and direction.
type sketchPacket struct {
	port    uint16
	size    int // UDP payload
	ifindex uint32
	dir     flow.Direction
}

// runPinned runs the packets on one CPU, in order, inside ns (so that the
// interfaces' indexes exist), and returns that CPU: BPF_PROG_TEST_RUN runs
// the program on the CPU of the calling thread, so the thread is locked and
// bound to one CPU for the run, and let go afterwards.
func runPinned(t *testing.T, ns *testutil.NS, dp *Datapath, pkts []sketchPacket) int {
	t.Helper()
	cpu := -1
	err := ns.Do(func() error {
		var orig unix.CPUSet
		if err := unix.SchedGetaffinity(0, &orig); err != nil {
			return err
		}
		for c := 0; c < 1024; c++ {
			if orig.IsSet(c) {
				cpu = c
				break
			}
		}
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return err
		}
		defer unix.SchedSetaffinity(0, &orig)
		for _, p := range pkts {
			prog := dp.Ingress()
			if p.dir == flow.Egress {
				prog = dp.Egress()
			}
			opts := &ebpf.RunOptions{Data: udpFrame(t, p.port, p.size)}
			if p.ifindex > 1 {
				opts.Context = skbIfindexContext{Ifindex: p.ifindex}
			}
			if _, err := prog.Run(opts); err != nil {
				return fmt.Errorf("run: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return cpu
}

// sketchNS returns a namespace with a veth pair in it (this kernel may lack
// dummy devices), and the three interface indexes to run packets on
// (loopback's, 1, and the pair's).
func sketchNS(t *testing.T) (*testutil.NS, []uint32) {
	t.Helper()
	ns := testutil.NewNSPrefix(t, "lsk-")
	ns.IP(t, "link", "add", "lsk0", "type", "veth", "peer", "name", "lsk1")
	idx := []uint32{1}
	for _, name := range []string{"lsk0", "lsk1"} {
		var i uint32
		if err := ns.Do(func() error {
			ifc, err := net.InterfaceByName(name)
			if err == nil {
				i = uint32(ifc.Index)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		idx = append(idx, i)
	}
	return ns, idx
}

// interval is the traffic of one test interval: budget flows that fill the
// table first, then flows that spill, their packets interleaved, lengths
// varying, over every (interface, direction).
func interval(ifindexes []uint32, budget, spilled, perFlow int, base uint16) (fill, spill []sketchPacket) {
	for i := range budget {
		fill = append(fill, sketchPacket{port: base + uint16(i), size: 10, ifindex: 1, dir: flow.Ingress})
	}
	for round := range perFlow {
		for i := range spilled {
			pair := i % (2 * len(ifindexes))
			spill = append(spill, sketchPacket{
				port:    base + uint16(budget+i),
				size:    (i*37 + round*101) % 1400,
				ifindex: ifindexes[pair/2],
				dir:     flow.Direction(pair % 2),
			})
		}
	}
	return fill, spill
}

func cloneAll(b [][]byte) [][]byte {
	out := make([][]byte, len(b))
	for i := range b {
		out[i] = slices.Clone(b[i])
	}
	return out
}

// expect feeds pkts to a fresh Encoder, in order, and returns it with each
// flow's exact counts and each (interface, direction)'s.
func expect(t *testing.T, p sketch.Params, pkts []sketchPacket) (*sketch.Encoder, map[sketch.Key]sketch.Counts, map[[2]uint32]sketch.Counts) {
	t.Helper()
	enc, err := sketch.NewEncoder(p)
	if err != nil {
		t.Fatal(err)
	}
	flows := map[sketch.Key]sketch.Counts{}
	ifaces := map[[2]uint32]sketch.Counts{}
	for _, pk := range pkts {
		k := sketchKey(t, pk.port, pk.ifindex, pk.dir)
		n := uint64(len(udpFrame(t, pk.port, pk.size)))
		enc.Add(&k, n)
		c := flows[k]
		c.Packets++
		c.Bytes += n
		flows[k] = c
		ic := ifaces[[2]uint32{pk.ifindex, uint32(pk.dir)}]
		ic.Packets++
		ic.Bytes += n
		ifaces[[2]uint32{pk.ifindex, uint32(pk.dir)}] = ic
	}
	return enc, flows, ifaces
}

// checkHalf compares a drained half with what the Encoder built from the
// same packets: byte for byte on the CPU that ran them, zero on the others;
// then decodes it and checks every flow's counts and the spill totals. With
// a flow cache, the half's flows went through it: the last of them were
// still there when it was read.
func checkHalf(t *testing.T, h *SketchHalf, cpu int, enc *sketch.Encoder, flows map[sketch.Key]sketch.Counts, ifaces map[[2]uint32]sketch.Counts) {
	t.Helper()
	if h == nil {
		t.Fatal("no sketch half")
	}
	cached := 0
	for c := range h.Cache {
		fs, err := sketch.CacheFlows(h.Params, h.Cache[c])
		if err != nil {
			t.Fatal(err)
		}
		cached += len(fs)
	}
	if h.Params.Cache > 0 && len(flows) > 0 && cached == 0 {
		t.Errorf("a flow cache of %d entries held none of %d flows when read", h.Params.Cache, len(flows))
	}
	// What the datapath left, with its flow caches inserted: every packet
	// in the sketch, as the Encoder inserts them.
	folded := *h
	folded.FlowSet, folded.Filter, folded.CountMin = cloneAll(h.FlowSet), cloneAll(h.Filter), cloneAll(h.CountMin)
	for c := range h.Cache {
		if _, err := sketch.FoldCache(h.Params, folded.FlowSet[c], folded.Filter[c], folded.CountMin[c], h.Cache[c]); err != nil {
			t.Fatal(err)
		}
	}
	for c := range h.FlowSet {
		for _, tc := range []struct {
			name      string
			got, want []byte
		}{
			{"flow set", folded.FlowSet[c], enc.FlowSet},
			{"flow filter", folded.Filter[c], enc.Filter},
			{"count-min", folded.CountMin[c], enc.CountMin},
		} {
			want := tc.want
			if c != cpu {
				want = make([]byte, len(tc.want))
			}
			if !bytes.Equal(tc.got, want) {
				i := 0
				for i < len(want) && i < len(tc.got) && tc.got[i] == want[i] {
					i++
				}
				t.Errorf("cpu %d: %s differs from the Encoder's (%d and %d bytes, first difference at byte %d)",
					c, tc.name, len(tc.got), len(want), i)
			}
		}
	}
	res, err := sketch.Decode(h.Params.FlowSet, folded.FlowSet)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !res.Complete() || len(res.Flows) != len(flows) {
		t.Fatalf("decoded %d flows (%d unverified, %d undecoded), want %d", len(res.Flows), len(res.Unverified), res.Undecoded, len(flows))
	}
	for _, f := range res.Flows {
		want, ok := flows[f.Key]
		if !ok || f.Packets != want.Packets || f.Bytes != want.Bytes {
			t.Errorf("flow %x: %d packets %d bytes, want %d and %d (known %v)", f.Key[44:58], f.Packets, f.Bytes, want.Packets, want.Bytes, ok)
		}
	}
	// The agent's decode, which takes the caches' entries as they are
	// and adds them to what the flow sets decode: the same flows.
	sp, err := h.Decode()
	if err != nil {
		t.Fatalf("the agent's decode: %v", err)
	}
	if len(sp.Decoded) != len(flows) || len(sp.Unverified) != 0 || sp.Undecoded != 0 {
		t.Fatalf("the agent's decode: %d flows (%d unverified, %d undecoded), want %d", len(sp.Decoded), len(sp.Unverified), sp.Undecoded, len(flows))
	}
	for _, f := range sp.Decoded {
		var k sketch.Key
		keyToBytes(k[:], &f.Key)
		if want := flows[k]; f.Packets != want.Packets || f.Bytes != want.Bytes {
			t.Errorf("the agent's decode: flow %x: %d packets %d bytes, want %d and %d", k[44:58], f.Packets, f.Bytes, want.Packets, want.Bytes)
		}
	}
	cm, err := sketch.NewCountMin(h.Params.CountMin, folded.CountMin)
	if err != nil {
		t.Fatal(err)
	}
	var total sketch.Counts
	for k, want := range flows {
		pk, by, _, _, _ := cm.Estimate(&k)
		if pk < want.Packets || by < want.Bytes {
			t.Errorf("count-min under the truth: %d/%d packets, %d/%d bytes", pk, want.Packets, by, want.Bytes)
		}
		total.Packets += want.Packets
		total.Bytes += want.Bytes
	}
	if cm.Total() != total || h.Total() != total {
		t.Errorf("totals: count-min %+v, spill %+v, want %+v", cm.Total(), h.Total(), total)
	}
	got := map[[2]uint32]sketch.Counts{}
	for _, s := range h.Spill {
		got[[2]uint32{s.IfIndex, uint32(s.Direction)}] = s.Counts
	}
	if h.Other != (sketch.Counts{}) || len(got) != len(ifaces) {
		t.Errorf("spill totals %+v, other %+v; want %+v", h.Spill, h.Other, ifaces)
	}
	for k, want := range ifaces {
		if got[k] != want {
			t.Errorf("ifindex %d direction %d: spilled %+v, want %+v", k[0], k[1], got[k], want)
		}
	}
	if h.FullCPUs != 1 {
		t.Errorf("%d CPUs saw the table full, want 1", h.FullCPUs)
	}
}

// TestSketchSpill: with the table full, new flows' packets go into the
// active half's sketch, which holds byte for byte what the Encoder builds
// from the same packets, decodes to every flow's exact counts, and comes
// with exact spill totals per interface and direction. Clearing the drained
// half empties it, full flag included: the next interval that writes it
// holds only its own packets, and fills the table again first.
func TestSketchSpill(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, tables := range []TableKind{PerCPU, Shared} {
		t.Run(tables.String(), func(t *testing.T) {
			ns, ifindexes := sketchNS(t)
			const budget = 4
			dp := loadForTest(t, Options{FlowBudget: budget, Tables: tables, RingBufSize: 1 << 16, SketchBytes: 512 << 10})
			p, ok := dp.SketchParams()
			if !ok {
				t.Fatal("sketch mode is off")
			}
			ev, err := dp.OpenEvents(0)
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Close()

			var spilledPk, spilledBy uint64
			for round, base := range []uint16{1000, 2000, 3000} {
				fill, spill := interval(ifindexes, budget, 30+10*round, 3+round, base)
				cpu := runPinned(t, ns, dp, append(fill, spill...))
				d, err := dp.Rotate()
				if err != nil {
					t.Fatal(err)
				}
				h, err := d.(SketchDrain).Sketch()
				if err != nil {
					t.Fatal(err)
				}
				enc, flows, ifaces := expect(t, p, spill)
				t.Run(fmt.Sprintf("interval%d", round), func(t *testing.T) {
					checkHalf(t, h, cpu, enc, flows, ifaces)
				})
				inTable := readDrain(t, d) // reads, then clears table and half
				if len(inTable) != budget {
					t.Errorf("interval %d: the table held %d flows, want %d (the full flag not cleared?)", round, len(inTable), budget)
				}
				for _, c := range flows {
					spilledPk += c.Packets
					spilledBy += c.Bytes
				}
			}
			c := counterMap(t, dp)
			if c["spilled_packets"] != spilledPk || c["spilled_bytes"] != spilledBy || c["map_full"] != 0 {
				t.Errorf("counters %v, want %d packets %d bytes spilled", c, spilledPk, spilledBy)
			}
			if events := readEvents(t, ev); len(events) != 0 {
				t.Errorf("%d packets went through the ring buffer", len(events))
			}
			// Both halves were cleared: nothing left in either.
			for range 2 {
				d, err := dp.Rotate()
				if err != nil {
					t.Fatal(err)
				}
				h, err := d.(SketchDrain).Sketch()
				if err != nil {
					t.Fatal(err)
				}
				for c := range h.FlowSet {
					if !allZero(h.FlowSet[c]) || !allZero(h.Filter[c]) || !allZero(h.CountMin[c]) {
						t.Errorf("cpu %d: a cleared half holds data", c)
					}
				}
				if h.Total() != (sketch.Counts{}) || h.FullCPUs != 0 || len(h.Spill) != 0 {
					t.Errorf("a cleared half: spill %+v, other %+v, %d full", h.Spill, h.Other, h.FullCPUs)
				}
				readDrain(t, d)
			}
		})
	}
}

// TestSketchEveryCapability loads sketch mode in every build and
// combination of capabilities that has flows (the verifier adds up the
// stack frames of the deepest chain of calls, which rules and capture
// lengthen, against 512 bytes) and spills packets through each: the
// sketch holds byte for byte what the Encoder builds from them.
func TestSketchEveryCapability(t *testing.T) {
	testutil.RequirePrivileged(t)
	ns, ifindexes := sketchNS(t)
	for _, caps := range [][]string{
		{"flows"},
		{"flows", "rules"},
		{"flows", "capture"},
		{"flows", "capture", "rules"},
	} {
		t.Run(fmt.Sprint(caps), func(t *testing.T) {
			const budget = 3
			dp := loadForTest(t, Options{FlowBudget: budget, RingBufSize: 1 << 16, SketchBytes: 512 << 10, Capabilities: caps})
			p, ok := dp.SketchParams()
			if !ok {
				t.Fatal("sketch mode is off")
			}
			fill, spill := interval(ifindexes, budget, 20, 2, 700)
			cpu := runPinned(t, ns, dp, append(fill, spill...))
			d, err := dp.Rotate()
			if err != nil {
				t.Fatal(err)
			}
			h, err := d.(SketchDrain).Sketch()
			if err != nil {
				t.Fatal(err)
			}
			enc, flows, ifaces := expect(t, p, spill)
			checkHalf(t, h, cpu, enc, flows, ifaces)
			readDrain(t, d)
		})
	}
}

// TestSketchOffDiverts: without a sketch budget, the drains have no sketch
// half and a full table diverts (TestMapFullDivertsToRingBuffer has the
// details).
func TestSketchOffDiverts(t *testing.T) {
	testutil.RequirePrivileged(t)
	onOneCPU(t) // a per-CPU table's budget is each CPU's
	dp := loadForTest(t, Options{FlowBudget: 1, RingBufSize: 1 << 16})
	if _, ok := dp.SketchParams(); ok {
		t.Fatal("sketch mode on without a budget")
	}
	runProg(t, dp, flow.Ingress, udpFrame(t, 1, 10))
	runProg(t, dp, flow.Ingress, udpFrame(t, 2, 10))
	d, err := dp.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if h, err := d.(SketchDrain).Sketch(); h != nil || err != nil {
		t.Fatalf("sketch half %v, %v; want none", h, err)
	}
	readDrain(t, d)
	if c := counterMap(t, dp); c["map_full"] != 1 || c["spilled_packets"] != 0 {
		t.Fatalf("counters %v", c)
	}
}

// TestSketchNeedsFlows: sketch mode is part of flows, and a budget below
// the smallest sketch is refused.
func TestSketchNeedsFlows(t *testing.T) {
	if _, err := Load(Options{FlowBudget: 1, SketchBytes: 1 << 20, Capabilities: []string{"capture"}}); err == nil {
		t.Fatal("sketch mode loaded without flows")
	}
	if _, err := SketchParams(1 << 10); err == nil {
		t.Fatal("a 1 KiB sketch")
	}
}

// TestSketchLayout checks the record sizes and offsets the Go side reads
// against the structs bpf2go generated from bpf/sketch/sketch.h.
func TestSketchLayout(t *testing.T) {
	var c loupeSketchCell
	var s loupeSketchSlot
	for _, tc := range []struct {
		name      string
		got, want uintptr
	}{
		{"sketch_cell", unsafe.Sizeof(c), sketch.CellSize},
		{"sketch_cell.flow_count", unsafe.Offsetof(c.FlowCount), 64},
		{"sketch_cell.check", unsafe.Offsetof(c.Check), 68},
		{"sketch_cell.packets", unsafe.Offsetof(c.Packets), 72},
		{"sketch_cell.bytes", unsafe.Offsetof(c.Bytes), 80},
		{"sketch_counter", unsafe.Sizeof(loupeSketchCounter{}), sketch.CounterSize},
		{"sketch_slot", unsafe.Sizeof(s), spillSlotSize},
		{"sketch_slot.ifindex", unsafe.Offsetof(s.Ifindex), 16},
		{"sketch_slot.direction", unsafe.Offsetof(s.Direction), 20},
		{"sketch_slot.used", unsafe.Offsetof(s.Used), 21},
		{"sketch_slot.full", unsafe.Offsetof(s.Full), 22},
		{"sketch_params", unsafe.Sizeof(loupeSketchParams{}), sketchConfSize},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// TestSketchSpillOther: two (interface, direction) pairs whose slots
// collide (ifindex 2 and 74, ingress): the first to spill keeps the slot,
// the other's spill is counted in Other, so the totals stay exact.
func TestSketchSpillOther(t *testing.T) {
	testutil.RequirePrivileged(t)
	ns := testutil.NewNSPrefix(t, "lsk-")
	ns.IP(t, "link", "add", "lsk0", "index", "2", "type", "veth", "peer", "name", "lsk1", "index", "3")
	ns.IP(t, "link", "add", "lsk2", "index", "74", "type", "veth", "peer", "name", "lsk3", "index", "75")
	dp := loadForTest(t, Options{FlowBudget: 1, RingBufSize: 1 << 16, SketchBytes: 512 << 10})
	pkts := []sketchPacket{{port: 1, size: 1, ifindex: 1}}
	var first, second sketch.Counts
	for i := range 10 {
		p := sketchPacket{port: uint16(10 + i%3), size: 20 * i, ifindex: 2}
		c := &first
		if i%2 == 1 {
			p.ifindex, p.port, c = 74, uint16(20+i%3), &second
		}
		pkts = append(pkts, p)
		c.Packets++
		c.Bytes += uint64(len(udpFrame(t, p.port, p.size)))
	}
	runPinned(t, ns, dp, pkts)
	d, err := dp.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.(SketchDrain).Sketch()
	if err != nil {
		t.Fatal(err)
	}
	readDrain(t, d)
	if len(h.Spill) != 1 || h.Spill[0].IfIndex != 2 || h.Spill[0].Direction != flow.Ingress ||
		h.Spill[0].Counts != first || h.Other != second {
		t.Fatalf("spill %+v other %+v; want ifindex 2 ingress %+v, other %+v", h.Spill, h.Other, first, second)
	}
}

// TestSketchShapes runs shapes sketch.Size never picks (more than four
// count-min rows, other filter probes, a small flow set) through the same
// comparison with the Encoder.
func TestSketchShapes(t *testing.T) {
	testutil.RequirePrivileged(t)
	ns, ifindexes := sketchNS(t)
	for _, p := range []sketch.Params{
		// Flow caches of 6 entries and of 2, where flows push one
		// another out in the kernel; and none. (Not with one filter
		// hash: there two flows share their bit one time in five, and
		// which of them is the false positive depends on the order
		// the cache inserts them in, which the Encoder's does not
		// follow.)
		{FlowSet: sketch.FlowSetParams{Cells: 3 * 64, FilterBits: 1009, FilterHashes: 7}, CountMin: sketch.CountMinParams{Rows: 6, Width: 50}, Cache: 6},
		{FlowSet: sketch.FlowSetParams{Cells: 3 * 101, FilterBits: 2003, FilterHashes: 1}, CountMin: sketch.CountMinParams{Rows: 1, Width: 7}},
		{FlowSet: sketch.FlowSetParams{Cells: 3 * 200, FilterBits: 4001, FilterHashes: maxSketchFilterHas}, CountMin: sketch.CountMinParams{Rows: sketch.MaxRows, Width: 33}, Cache: 2},
	} {
		t.Run(fmt.Sprintf("%+v", p), func(t *testing.T) {
			dp := loadForTest(t, Options{FlowBudget: 3, RingBufSize: 1 << 16, sketchParams: &p})
			fill, spill := interval(ifindexes, 3, 30, 3, 100)
			cpu := runPinned(t, ns, dp, append(fill, spill...))
			d, err := dp.Rotate()
			if err != nil {
				t.Fatal(err)
			}
			h, err := d.(SketchDrain).Sketch()
			if err != nil {
				t.Fatal(err)
			}
			if h.Params != p {
				t.Fatalf("half of params %+v", h.Params)
			}
			enc, flows, ifaces := expect(t, p, spill)
			checkHalf(t, h, cpu, enc, flows, ifaces)
			readDrain(t, d)
		})
	}
}

// TestSketchPinned: the sketch maps are pinned with the tables. An agent
// with the same sketch adopts them and goes on writing the half it finds
// active (the full flag still set); an agent with another sketch retires
// the set and reads its halves with the parameters the set holds.
func TestSketchPinned(t *testing.T) {
	testutil.RequirePrivileged(t)
	ns, ifindexes := sketchNS(t)
	const budget = 2
	for _, tc := range []struct {
		name   string
		second int // the second agent's sketch budget
	}{{"adopted", 512 << 10}, {"retired", 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			pins := filepath.Join(testutil.Bpffs(t), "loupe")
			opts := Options{FlowBudget: budget, RingBufSize: 1 << 16, PinDir: pins, SketchBytes: 512 << 10}
			first := loadForTest(t, opts)
			p, _ := first.SketchParams()
			fill, spill := interval(ifindexes, budget, 20, 2, 500)
			cpu := runPinned(t, ns, first, append(fill, spill...))
			first.Close() // a crash: the pins stay

			opts.SketchBytes = tc.second
			second := loadForTest(t, opts)
			var drains []flow.Drain
			if tc.name == "adopted" {
				if !second.Adopted() {
					t.Fatal("not adopted")
				}
				_, more := interval(ifindexes, 0, 10, 2, 600)
				if runPinned(t, ns, second, more) != cpu {
					t.Fatal("ran on another CPU")
				}
				spill = append(spill, more...)
				left, err := second.Leftovers() // the standby half: empty
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range left {
					readDrain(t, d)
				}
				d, err := second.Rotate()
				if err != nil {
					t.Fatal(err)
				}
				drains = []flow.Drain{d}
			} else {
				if second.Adopted() {
					t.Fatal("adopted a set of another sketch")
				}
				left, err := second.Leftovers()
				if err != nil || len(left) != 2 {
					t.Fatalf("leftovers %v, %v; want the retired set's two tables", left, err)
				}
				drains = left
			}
			enc, flows, ifaces := expect(t, p, spill)
			found := 0
			for _, d := range drains {
				h, err := d.(SketchDrain).Sketch()
				if err != nil {
					t.Fatal(err)
				}
				if h == nil {
					t.Fatal("no sketch half")
				}
				if h.Params != p {
					t.Fatalf("half of params %+v, want %+v", h.Params, p)
				}
				if h.Total() != (sketch.Counts{}) {
					checkHalf(t, h, cpu, enc, flows, ifaces)
					found++
				}
				readDrain(t, d)
			}
			if found != 1 {
				t.Fatalf("%d halves held the spill, want 1", found)
			}
		})
	}
}

// TestSketchRetiredOtherHash: a retired set whose sketch was written with
// another hashing (its sketch_conf says which) has its halves left unread,
// with an error, while its tables drain as usual: decoded with this build's
// hash, its flows would not peel and its count-min estimates could fall
// below the truth.
func TestSketchRetiredOtherHash(t *testing.T) {
	testutil.RequirePrivileged(t)
	ns, ifindexes := sketchNS(t)
	const budget = 2
	pins := filepath.Join(testutil.Bpffs(t), "loupe")
	opts := Options{FlowBudget: budget, RingBufSize: 1 << 16, PinDir: pins, SketchBytes: 512 << 10}
	first := loadForTest(t, opts)
	fill, spill := interval(ifindexes, budget, 20, 2, 800)
	runPinned(t, ns, first, append(fill, spill...))
	set := first.setName
	first.Close() // a crash: the pins stay

	conf, err := ebpf.LoadPinnedMap(filepath.Join(pins, set, loupeMapSketchConf), nil)
	if err != nil {
		t.Fatal(err)
	}
	var c loupeSketchParams
	if err := conf.Lookup(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	if c.Hash != sketch.HashVersion || c.Cells == 0 {
		t.Fatalf("sketch_conf %+v, want this build's hash version %d", c, sketch.HashVersion)
	}
	c.Hash = sketch.HashVersion - 1
	if err := conf.Update(uint32(0), &c, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	conf.Close()

	opts.SketchBytes = 1 << 20 // another sketch: the set is retired
	second := loadForTest(t, opts)
	left, err := second.Leftovers()
	if err != nil || len(left) != 2 {
		t.Fatalf("leftovers %v, %v; want the retired set's two tables", left, err)
	}
	flows := 0
	for _, d := range left {
		h, err := d.(SketchDrain).Sketch()
		if h != nil || err == nil || !strings.Contains(err.Error(), "hash version") {
			t.Errorf("sketch half read (%v), error %v; want none and an error naming the hash version", h != nil, err)
		}
		flows += len(readDrain(t, d))
	}
	if flows != budget {
		t.Errorf("the retired tables held %d flows, want %d", flows, budget)
	}
}
