package flow

import (
	"slices"
	"testing"
)

func spillKey(ifindex uint32, dir Direction, port uint16) Key {
	return Key{IfIndex: ifindex, Direction: dir, EtherType: EtherTypeIPv4, Proto: 17, SrcPort: port}
}

// TestSpillRecordsAddUp checks that a spill's records name what they can
// and that, per interface and direction, they add up to the exact totals.
func TestSpillRecordsAddUp(t *testing.T) {
	a, b, c, d := spillKey(2, Ingress, 1), spillKey(2, Ingress, 2), spillKey(2, Ingress, 3), spillKey(3, Egress, 4)
	big := spillKey(3, Egress, 5)
	est := map[Key]Estimate{
		b:   {Packets: 25, Bytes: 2500, MaxErrorPackets: 5, MaxErrorBytes: 500, Confidence: 0.98},
		c:   {Packets: 4, Bytes: 400, MaxErrorPackets: 5, MaxErrorBytes: 500, Confidence: 0.98},   // not surely there
		d:   {Packets: 8, Bytes: 800, MaxErrorPackets: 2, MaxErrorBytes: 200, Confidence: 0.98},   // there
		big: {Packets: 50, Bytes: 5000, MaxErrorPackets: 2, MaxErrorBytes: 200, Confidence: 0.98}, // more than is left
	}
	s := Spill{
		Decoded:    []SpillFlow{{Key: a, Packets: 60, Bytes: 6000}},
		Unverified: []SpillFlow{{Key: b, Packets: 30, Bytes: 3000}},
		Undecoded:  2,
		Totals: []SpillTotal{
			{IfIndex: 2, Direction: Ingress, Packets: 100, Bytes: 10000},
			{IfIndex: 3, Direction: Egress, Packets: 10, Bytes: 1000},
		},
		Estimate: func(k *Key) Estimate { return est[*k] },
	}
	recs := spillRecords(&s, []Key{c, d, big, a})
	got := map[Key]spillRecord{}
	sums := map[[2]uint32][2]uint64{}
	for _, r := range recs {
		if _, dup := got[r.key]; dup {
			t.Fatalf("two records of %+v", r.key)
		}
		got[r.key] = r
		id := [2]uint32{r.key.IfIndex, uint32(r.key.Direction)}
		sums[id] = [2]uint64{sums[id][0] + r.counts.Packets, sums[id][1] + r.counts.Bytes}
	}
	for _, tot := range s.Totals {
		if s := sums[[2]uint32{tot.IfIndex, uint32(tot.Direction)}]; s != [2]uint64{tot.Packets, tot.Bytes} {
			t.Errorf("interface %d %v: records add up to %v, want %d packets %d bytes", tot.IfIndex, tot.Direction, s, tot.Packets, tot.Bytes)
		}
	}
	want := map[Key]struct {
		acc     Accuracy
		packets uint64
		errP    uint64
	}{
		a:                                {Decoded, 60, 0},
		b:                                {Estimated, 25, 5},
		d:                                {Estimated, 8, 2},
		{IfIndex: 2, Direction: Ingress}: {Estimated, 15, 5},
		{IfIndex: 3, Direction: Egress}:  {Estimated, 2, 2},
	}
	if len(got) != len(want) {
		t.Errorf("%d records, want %d: %+v", len(got), len(want), recs)
	}
	for k, w := range want {
		r, ok := got[k]
		if !ok {
			t.Errorf("no record of %+v", k)
			continue
		}
		if r.accuracy != w.acc || r.counts.Packets != w.packets || r.est.MaxErrorPackets != w.errP {
			t.Errorf("%+v: %v %d packets ±%d, want %v %d ±%d", k, r.accuracy, r.counts.Packets, r.est.MaxErrorPackets, w.acc, w.packets, w.errP)
		}
	}
	if r := got[Key{IfIndex: 2, Direction: Ingress}]; r.est.Confidence < 0.979 || r.est.Confidence > 0.981 {
		t.Errorf("unattributed confidence %v, want the one estimate's 0.98", r.est.Confidence)
	}
}

// TestSpillDecodedCompletely: a sketch that decoded every flow gives
// decoded records only, and no unattributed one.
func TestSpillDecodedCompletely(t *testing.T) {
	a, b := spillKey(2, Ingress, 1), spillKey(2, Ingress, 2)
	s := Spill{
		Decoded: []SpillFlow{{Key: a, Packets: 3, Bytes: 300}, {Key: b, Packets: 1, Bytes: 64}},
		Totals:  []SpillTotal{{IfIndex: 2, Direction: Ingress, Packets: 4, Bytes: 364}},
		Estimate: func(*Key) Estimate {
			t.Fatal("estimated with nothing to estimate")
			return Estimate{}
		},
	}
	recs := spillRecords(&s, []Key{spillKey(2, Ingress, 9)})
	if len(recs) != 2 || recs[0].accuracy != Decoded || recs[1].accuracy != Decoded {
		t.Fatalf("records %+v", recs)
	}
}

func TestHeavyFlowsKeepTheHeaviest(t *testing.T) {
	var h heavyFlows
	h.begin()
	for i := range 3 * heavyKeep {
		k := spillKey(2, Ingress, uint16(i))
		h.offer(&k, uint64((i*7919)%(3*heavyKeep))) // every weight once, shuffled
	}
	h.begin()
	c := h.candidates()
	if len(c) != heavyKeep {
		t.Fatalf("%d candidates, want %d", len(c), heavyKeep)
	}
	var weights []int
	for _, k := range c {
		weights = append(weights, int(k.SrcPort)*7919%(3*heavyKeep))
	}
	slices.Sort(weights)
	if weights[0] != 2*heavyKeep || weights[len(weights)-1] != 3*heavyKeep-1 {
		t.Fatalf("kept weights %d..%d, want the top %d", weights[0], weights[len(weights)-1], heavyKeep)
	}
}

// TestSpillCandidatesNeedTheFilter: with a flow filter, a candidate is
// estimated only if the filter says it spilled, however large its
// estimate (a count-min counter shared with heavier flows).
func TestSpillCandidatesNeedTheFilter(t *testing.T) {
	in, out := spillKey(2, Ingress, 1), spillKey(2, Ingress, 2)
	s := Spill{
		Undecoded: 5,
		Totals:    []SpillTotal{{IfIndex: 2, Direction: Ingress, Packets: 100, Bytes: 10000}},
		Estimate: func(*Key) Estimate {
			return Estimate{Packets: 20, Bytes: 2000, MaxErrorPackets: 30, MaxErrorBytes: 3000, Confidence: 0.98}
		},
		Seen: func(k *Key) bool { return *k == in },
	}
	recs := spillRecords(&s, []Key{in, out})
	if len(recs) != 2 || recs[0].key != in || recs[0].accuracy != Estimated || recs[1].key.EtherType != 0 || recs[1].counts.Packets != 80 {
		t.Fatalf("records %+v, want the seen candidate estimated (though under its bound) and 80 packets unattributed", recs)
	}
}

// TestSpillOtherSlot: a decoded flow of an interface whose spill the
// datapath could not keep apart (it went to "other", interface 0) is still
// named, its traffic counted out of "other".
func TestSpillOtherSlot(t *testing.T) {
	a := spillKey(7, Egress, 1)
	s := Spill{
		Decoded: []SpillFlow{{Key: a, Packets: 3, Bytes: 300}},
		Totals:  []SpillTotal{{Packets: 5, Bytes: 500}},
	}
	recs := spillRecords(&s, nil)
	if len(recs) != 2 || recs[0].key != a || recs[0].accuracy != Decoded || recs[1].key.IfIndex != 0 || recs[1].counts.Packets != 2 {
		t.Fatalf("records %+v, want the flow decoded and 2 packets left unattributed", recs)
	}
}
