package e2e

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// floodFlow is one flow a sketch test sends: its source address and port
// tell it apart, its packets and bytes are the truth.
type floodFlow struct {
	src     [4]byte
	port    uint16
	packets uint64
	bytes   uint64
}

// floodFrames builds n frames of f (sizes 64 to 191 bytes, from rng) and
// counts them into f.
func floodFrames(t *testing.T, f *floodFlow, n int, rng *rand.Rand, src, dst []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for range n {
		fr := testutil.UDPFrame(src, dst, nil, f.port, 64+rng.IntN(128))
		copy(fr[26:30], f.src[:]) // the IPv4 source: the header checksum is left stale, which the hook ignores
		f.packets++
		f.bytes += uint64(len(fr))
		out = append(out, fr)
	}
	return out
}

// newFloodFlows makes n light flows, from 10.200.0.0/16 onwards by index.
func newFloodFlows(n, base int) []*floodFlow {
	out := make([]*floodFlow, n)
	for i := range out {
		j := base + i
		out[i] = &floodFlow{src: [4]byte{10, byte(200 + j>>24&0x1f), byte(j >> 8), byte(j)}, port: uint16(1024 + j%50000)}
	}
	return out
}

// sketchRecords reads the records of iface's ingress and sums them per flow
// (source address and port), with the records' worst accuracy and summed
// bounds; the unattributed records (no addresses) sum under the zero key.
type sketchSum struct {
	packets, bytes uint64
	accuracy       flow.Accuracy
	errPackets     uint64
	records        int
}

func sumSketchRecords(recs []flow.Record, iface string) (map[[6]byte]*sketchSum, totals) {
	out := map[[6]byte]*sketchSum{}
	var all totals
	for _, r := range recs {
		if r.Iface != iface || r.Direction != flow.Ingress {
			continue
		}
		var id [6]byte
		if r.EtherType != 0 {
			copy(id[:4], r.SrcAddr[12:16])
			binary.BigEndian.PutUint16(id[4:], r.SrcPort)
		}
		s := out[id]
		if s == nil {
			s = &sketchSum{}
			out[id] = s
		}
		s.packets += r.Packets
		s.bytes += r.Bytes
		s.accuracy = max(s.accuracy, r.Accuracy)
		s.errPackets += r.MaxErrorPackets
		s.records++
		all.packets += r.Packets
		all.bytes += r.Bytes
	}
	return out, all
}

func floodID(f *floodFlow) [6]byte {
	var id [6]byte
	copy(id[:4], f.src[:])
	binary.BigEndian.PutUint16(id[4:], f.port)
	return id
}

// TestSketchKeepsFloodsExact sends more flows than the flow table holds:
// the rest spill into the sketch, which decodes them, so that every flow
// comes back with its exact counts (decoded) and the interface's totals
// are exact.
func TestSketchKeepsFloodsExact(t *testing.T) {
	p, a := quietPair(t, []string{"--memory", "16MiB", "--flow-budget", "1024", "--cache-active-timeout", "1m", "--signals-table-size", "16", "--dns-enabled=false", "--dns-handshake-rtt=false"})
	a.waitLog(5*time.Second, "memory budget split")
	macA, macB := macOf(t, p.a, p.vethA), macOf(t, p.b, p.vethB)
	rng := rand.New(rand.NewPCG(9, 9))

	flows := newFloodFlows(20000, 0)
	var frames [][]byte
	for i, f := range flows {
		n := 1 + rng.IntN(3)
		if i%200 == 7 {
			n = 50 + rng.IntN(100) // the heavy hitters, a hundred of them
		}
		frames = append(frames, floodFrames(t, f, n, rng, macB, macA)...)
	}
	rng.Shuffle(len(frames), func(i, j int) { frames[i], frames[j] = frames[j], frames[i] })
	rx0 := p.a.Stats(t, p.vethA).RxPackets
	p.b.SendFrames(t, p.vethB, frames, testutil.SendOptions{})
	rx := p.a.Stats(t, p.vethA).RxPackets - rx0
	m := a.metrics()
	a.stop()

	recs := a.exported()
	got, all := sumSketchRecords(recs, p.vethA)
	byAcc := map[flow.Accuracy]int{}
	for _, r := range recs {
		byAcc[r.Accuracy]++
	}
	t.Logf("records by accuracy: %v", byAcc)
	if all.packets != uint64(len(frames)) || rx != uint64(len(frames)) {
		t.Fatalf("records hold %d packets, the interface received %d, %d were sent", all.packets, rx, len(frames))
	}
	// A flow whose every packet a CPU's flow filter took for one it had
	// seen (its false-positive rate, far below 0.1 % under capacity) is in
	// no record: its packets are in the unattributed one, and nowhere else.
	var decoded, missing int
	var missingPackets uint64
	for _, f := range flows {
		s := got[floodID(f)]
		switch {
		case s == nil:
			missing++
			missingPackets += f.packets
		case s.accuracy == flow.Estimated:
			t.Fatalf("flow %v:%d estimated, but the sketch had room to decode it", f.src, f.port)
		case s.packets != f.packets || s.bytes != f.bytes:
			t.Fatalf("flow %v:%d: %d packets %d bytes (%v), sent %d %d", f.src, f.port, s.packets, s.bytes, s.accuracy, f.packets, f.bytes)
		case s.accuracy == flow.Decoded:
			decoded++
		}
	}
	var unattributed uint64
	if u := got[[6]byte{}]; u != nil {
		unattributed = u.packets
	}
	if unattributed != missingPackets || missing > len(flows)/1000 {
		t.Fatalf("%d flows (%d packets) in no record, %d packets unattributed: want the same, and at most 0.1 %% of the flows", missing, missingPackets, unattributed)
	}
	if decoded < len(flows)-2*1024 {
		t.Fatalf("%d flows decoded from the sketch, want all but the table's", decoded)
	}
	if m["loupe_sketch_decode_incomplete_total"] != 0 || m["loupe_sketch_memory_bytes"] == 0 {
		t.Errorf("metrics: incomplete %v, sketch memory %v", m["loupe_sketch_decode_incomplete_total"], m["loupe_sketch_memory_bytes"])
	}
	t.Logf("%d flows, %d packets: %d decoded from the sketch, the rest exact in the table but %d (%d packets) unattributed", len(flows), len(frames), decoded, missing, missingPackets)
}

// TestSketchOverCapacityStaysHonest floods a small sketch with more flows
// than it decodes, after an interval that made a hundred heavy hitters
// known. The heavy hitters are estimated, each within its stated bound;
// the flows the sketch cannot name are in an unattributed record; the
// interface's totals stay exact; the failed decode is counted.
func TestSketchOverCapacityStaysHonest(t *testing.T) {
	p, a := quietPair(t, []string{"--memory", "5MiB", "--flow-budget", "1024", "--cache-active-timeout", "5s", "--signals-table-size", "16", "--dns-enabled=false", "--dns-handshake-rtt=false"})
	a.waitLog(5*time.Second, "memory budget split")
	macA, macB := macOf(t, p.a, p.vethA), macOf(t, p.b, p.vethB)
	rng := rand.New(rand.NewPCG(7, 7))
	heavy := newFloodFlows(100, 1<<20)
	heavyFrames := func() [][]byte {
		var fr [][]byte
		for _, f := range heavy {
			fr = append(fr, floodFrames(t, f, 40+rng.IntN(40), rng, macB, macA)...)
		}
		return fr
	}
	rx0 := p.a.Stats(t, p.vethA).RxPackets

	// The frames of both intervals, built beforehand. Interval 2: light
	// flows fill the table, then the heavy hitters come back among many
	// more light flows than the sketch decodes.
	first := heavyFrames()
	light := newFloodFlows(40000, 0)
	var fill, rest [][]byte
	for i, f := range light {
		fr := floodFrames(t, f, 1, rng, macB, macA)
		if i < 1100 {
			fill = append(fill, fr...)
		} else {
			rest = append(rest, fr...)
		}
	}
	second := heavyFrames()
	heavyTruth := map[[6]byte][2]uint64{}
	for _, f := range heavy {
		heavyTruth[floodID(f)] = [2]uint64{f.packets, f.bytes}
	}
	rest = append(rest, second...)
	rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })

	// Interval 1: the heavy hitters alone, in the table. Interval 2
	// starts at the eviction that ends it, and lasts long enough (5 s)
	// to hold all of its traffic.
	evictions := strings.Count(a.logs.String(), "msg=evicted")
	p.b.SendFrames(t, p.vethB, first, testutil.SendOptions{})
	for deadline := time.Now().Add(15 * time.Second); strings.Count(a.logs.String(), "msg=evicted") <= evictions; {
		if time.Now().After(deadline) {
			t.Fatal("no eviction within 15s of the first interval's traffic")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.b.SendFrames(t, p.vethB, append(fill, rest...), testutil.SendOptions{})
	sent := uint64(len(first) + len(fill) + len(rest))
	rx := p.a.Stats(t, p.vethA).RxPackets - rx0
	a.stop()

	got, all := sumSketchRecords(a.exported(), p.vethA)
	if all.packets != sent || rx != sent {
		t.Fatalf("records hold %d packets, the interface received %d, %d were sent", all.packets, rx, sent)
	}
	u := got[[6]byte{}]
	if u == nil || u.accuracy != flow.Estimated {
		t.Fatalf("no unattributed record, though %d light flows cannot all decode", len(light))
	}
	var estimated int
	for id, truth := range heavyTruth {
		s := got[id]
		if s == nil {
			t.Fatalf("heavy hitter %v has no record", id)
		}
		if s.accuracy == flow.Estimated {
			estimated++
		}
		if s.packets < truth[0] || s.packets-truth[0] > s.errPackets {
			t.Errorf("heavy hitter %v: %d packets (%v, bound %d), truth %d", id, s.packets, s.accuracy, s.errPackets, truth[0])
		}
	}
	if estimated == 0 {
		t.Fatalf("no heavy hitter was estimated: the test did not reach the count-min sketch")
	}
	t.Logf("%d packets; %d of %d heavy hitters estimated within their bounds; %d packets unattributed", sent, estimated, len(heavy), u.packets)
}
