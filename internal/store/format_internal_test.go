package store

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
)

// encodeBatch encodes recs as one segment, in memory.
func encodeBatch(t testing.TB, recs []flow.Record) []byte {
	t.Helper()
	b := newBatch(len(recs))
	for i := range recs {
		b.add(&recs[i])
	}
	var buf bytes.Buffer
	if _, err := b.encode(&buf, 1, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// columnParts decodes each column block of an encoded one-record segment:
// "kind N" -> the record's value in it, resolved through the dictionary
// for the dictionary columns.
func columnParts(t testing.TB, data []byte) flowtest.Parts {
	t.Helper()
	s, err := parseSegment(data, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.verifyAll(); err != nil {
		t.Fatal(err)
	}
	names, err := s.nameDict()
	if err != nil {
		t.Fatal(err)
	}
	p := flowtest.Parts{}
	for c := range numCols {
		v := s.cols[c]
		switch c {
		case cSrcAddr, cDstAddr:
			k := s.addrKey(le.Uint32(v))
			v = append(k.a[:], k.fam)
		case cSrcMAC, cDstMAC:
			m := s.mac(le.Uint32(v))
			v = m[:]
		case cIface:
			v = []byte(names[le.Uint32(v)])
		case cDropReasons, cDNSQName:
			if x := sparseU32(v, 0); x > 0 {
				v = []byte(names[x-1])
			}
		case cSrcNamespace, cSrcPod, cSrcWorkload, cSrcWorkloadKind, cSrcService, cSrcNode,
			cDstNamespace, cDstPod, cDstWorkload, cDstWorkloadKind, cDstService, cDstNode, cIfacePod, cIfaceNamespace:
			if x := sparseU32(v, 0); x > 0 {
				v = []byte(names[x-1])
			}
		case cOuterSrcAddr, cOuterDstAddr:
			if x := sparseU32(v, 0); x > 0 {
				k := s.addrKey(x - 1)
				v = append(k.a[:], k.fam)
			}
		}
		if len(v) == 0 && sparseCol(c) {
			continue // not written: all zeros
		}
		p[fmt.Sprintf("kind %d", c+1)] = hex.EncodeToString(v)
	}
	return p
}

// TestColumnKindsAreTheRegistrys checks that the column of each field is
// written under the block kind flow's registry gives it, with the width
// its type needs, and that a field's column changes with the field.
func TestColumnKindsAreTheRegistrys(t *testing.T) {
	var recs []flow.Record
	for _, b := range flowtest.Bases() {
		recs = append(recs, b.Rec)
		if b.Rec.Has.Any(flow.HasRetransmits) { // measured zero in the bases: a column of zeros is not written
			r := b.Rec
			r.Retransmits = 1
			recs = append(recs, r)
		}
	}
	s, err := parseSegment(encodeBatch(t, recs), "test")
	if err != nil {
		t.Fatal(err)
	}
	written := map[uint32]uint32{} // kind -> width, from the block directory
	nBlocks := le.Uint32(s.data[12:])
	for i := range nBlocks {
		e := s.data[headerFixed+dirEntrySize*int(i):]
		written[le.Uint32(e)] = le.Uint32(e[4:])
	}
	for _, f := range flow.Fields() {
		w, ok := written[f.Wire.Store]
		if !ok {
			t.Errorf("field %s: no block of kind %d in a segment", f.Name, f.Wire.Store)
			continue
		}
		want := uint32(4) // dictionary index
		switch {
		case f.Type == flow.TypeTime || f.Type == flow.TypeFloat:
			want = 8
		case f.Type == flow.TypeUint || f.Type == flow.TypeDirection || f.Type == flow.TypeAccuracy || f.Type == flow.TypeEnum:
			want = 1
			for int(want)*8 < f.Bits {
				want *= 2
			}
		}
		if w != want {
			t.Errorf("field %s: kind %d is %d bytes wide, want %d", f.Name, f.Wire.Store, w, want)
		}
		delete(written, f.Wire.Store)
	}
	for k := range written {
		if k < flow.StoreDictionaryKinds && k != kindPresence {
			t.Errorf("block kind %d is a column of no field", k)
		}
	}
	flowtest.Coverage{
		Encode: func(t testing.TB, r *flow.Record) flowtest.Parts {
			return columnParts(t, encodeBatch(t, []flow.Record{*r}))
		},
		IDs:   func(f *flow.Field) []string { return []string{fmt.Sprintf("kind %d", f.Wire.Store)} },
		Other: map[string]string{fmt.Sprintf("kind %d", kindPresence): "the presence bits of the fields present only where measured"},
	}.Check(t)
}

// oldSegmentRecords are the records in testdata/v1-before-segments.lseg,
// as the program that wrote it listed them (see testdata/README.md).
func oldSegmentRecords() []flow.Record {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	a := func(s string) [16]byte { return netip.MustParseAddr(s).As16() }
	return []flow.Record{
		{Key: flow.Key{SrcAddr: a("10.0.0.1"), DstAddr: a("10.0.0.2"), SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
			IfIndex: 7, EtherType: 0x0800, SrcPort: 40000, DstPort: 443, Proto: 6, Direction: flow.Ingress},
			Iface: "eth0", Packets: 10, Bytes: 15000, FirstSeen: t0, LastSeen: t0.Add(time.Second), Sampling: 1, TCPFlags: 0x12, DSCP: 46},
		{Key: flow.Key{SrcAddr: a("2001:db8::1"), DstAddr: a("2001:db8::2"), SrcMAC: [6]byte{2, 0, 0, 0, 0, 3}, DstMAC: [6]byte{2, 0, 0, 0, 0, 4},
			IfIndex: 9, EtherType: 0x86DD, SrcPort: 5353, DstPort: 53, Proto: 17, Direction: flow.Egress},
			Iface: "veth1", Packets: 3, Bytes: 276, FirstSeen: t0.Add(time.Minute), LastSeen: t0.Add(time.Minute + time.Millisecond), Sampling: 1},
		{Key: flow.Key{IfIndex: 5, EtherType: 0x0806, Direction: flow.Ingress, SrcMAC: [6]byte{2, 0, 0, 0, 0, 5}, DstMAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
			Iface: "eth0", Packets: 1 << 40, Bytes: 1 << 50, FirstSeen: t0, LastSeen: t0, Sampling: 1},
	}
}

func decodeAll(t *testing.T, s *segment) []flow.Record {
	t.Helper()
	dec, err := newRecordDecoder(s)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]flow.Record, s.n)
	for i := range out {
		if err := dec.decode(i, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestReadSegmentWithoutLaterColumns reads a segment written before the
// segments, wire_bytes and vlan_id columns existed: they read as packets,
// bytes and 0, through the whole-file check and through the per-block
// checks (as Top verifies), and compaction writes them out explicitly.
func TestReadSegmentWithoutLaterColumns(t *testing.T) {
	data, err := os.ReadFile("testdata/v1-before-segments.lseg")
	if err != nil {
		t.Fatal(err)
	}
	want := oldSegmentRecords()
	for i := range want {
		want[i].Segments, want[i].WireBytes, want[i].VlanID = want[i].Packets, want[i].Bytes, 0
	}
	for _, full := range []bool{true, false} {
		s, err := parseSegment(data, "old")
		if err != nil {
			t.Fatal(err)
		}
		if full {
			err = s.verifyAll()
		} else {
			err = s.verify(cSegments, cWireBytes, cVlanID)
		}
		if err != nil {
			t.Fatalf("verify (whole file %v): %v", full, err)
		}
		if got := decodeAll(t, s); !reflect.DeepEqual(got, want) {
			t.Errorf("whole file %v: read\n%+v\nwant\n%+v", full, got, want)
		}
	}
	s, _ := parseSegment(data, "old")
	b := newBatch(0)
	if err := b.appendSegment(s); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := b.encode(&buf, 2, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	merged, err := parseSegment(buf.Bytes(), "merged")
	if err != nil {
		t.Fatal(err)
	}
	if err := merged.verifyAll(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(merged.cols[cSegments], merged.cols[cPackets]) || len(merged.cols[cVlanID]) != 2*len(want) {
		t.Errorf("compacted segment: segments column %x, packets %x, vlan %x", merged.cols[cSegments], merged.cols[cPackets], merged.cols[cVlanID])
	}
	if got := decodeAll(t, merged); !reflect.DeepEqual(got, want) {
		t.Errorf("compacted: read\n%+v\nwant\n%+v", got, want)
	}
}

// TestSegmentMissingAColumnIsCorrupt: only the later columns may be
// missing; a segment without packets is refused even though segments
// would copy it.
func TestSegmentMissingAColumnIsCorrupt(t *testing.T) {
	data, err := os.ReadFile("testdata/v1-before-segments.lseg")
	if err != nil {
		t.Fatal(err)
	}
	data = append([]byte(nil), data...)
	// Rename the packets block (kind 3) to an unknown kind and fix the
	// header CRC: the block is then skipped as unknown, i.e. missing.
	nRepl := le.Uint32(data[72:])
	dirOff := headerFixed + 8*int(nRepl)
	nBlocks := int(le.Uint32(data[12:]))
	for i := range nBlocks {
		e := data[dirOff+dirEntrySize*i:]
		if le.Uint32(e) == uint32(cPackets+1) {
			le.PutUint32(e, 99)
		}
	}
	hdrEnd := dirOff + dirEntrySize*nBlocks
	le.PutUint32(data[hdrEnd:], crc32c(data[:hdrEnd]))
	if _, err := parseSegment(data, "broken"); err == nil {
		t.Fatal("a segment without its packets column parsed")
	}
}

// TestExactSegmentsHaveNoAccuracyColumns: a segment of exact records
// carries no accuracy columns (kinds 23..26) and reads exact; one record
// that is not exact brings all four, and every record reads back as
// written, through the whole-file check and through the per-block checks.
func TestExactSegmentsHaveNoAccuracyColumns(t *testing.T) {
	kinds := func(data []byte) map[uint32]bool {
		out := map[uint32]bool{}
		for i := range int(le.Uint32(data[12:])) {
			out[le.Uint32(data[headerFixed+dirEntrySize*i:])] = true
		}
		return out
	}
	exact := oldSegmentRecords()
	data := encodeBatch(t, exact)
	for c := cAccuracy; c <= cErrConfidence; c++ {
		if kinds(data)[uint32(c+1)] {
			t.Errorf("a segment of exact records has column kind %d", c+1)
		}
	}
	if !kinds(data)[uint32(cAggPrefix+1)] {
		t.Fatal("no aggregate_prefix column: the test reads the directory wrong")
	}
	s, err := parseSegment(data, "exact")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.verify(sparseCols[:]...); err != nil {
		t.Fatal(err)
	}
	if got := decodeAll(t, s); !reflect.DeepEqual(got, exact) {
		t.Errorf("exact segment read\n%+v\nwant\n%+v", got, exact)
	}

	mixed := append(oldSegmentRecords(), oldSegmentRecords()[1])
	mixed[3].Accuracy, mixed[3].MaxErrorPackets, mixed[3].MaxErrorBytes, mixed[3].ErrorConfidence = flow.Estimated, 3, 1<<40, 0.9816843611112658
	mixed[0].Accuracy = flow.Decoded
	data = encodeBatch(t, mixed)
	for c := cAccuracy; c <= cErrConfidence; c++ {
		if !kinds(data)[uint32(c+1)] {
			t.Errorf("a segment with an estimate lacks column kind %d", c+1)
		}
	}
	for _, full := range []bool{true, false} {
		s, err := parseSegment(data, "mixed")
		if err != nil {
			t.Fatal(err)
		}
		if full {
			err = s.verifyAll()
		} else {
			err = s.verify(sparseCols[:]...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeAll(t, s); !reflect.DeepEqual(got, mixed) {
			t.Errorf("whole file %v: read\n%+v\nwant\n%+v", full, got, mixed)
		}
	}
	if d := len(encodeBatch(t, mixed)) - len(encodeBatch(t, append(oldSegmentRecords(), oldSegmentRecords()[1]))); d < 4*25 {
		t.Errorf("the accuracy columns of 4 records take %d bytes, want at least 100", d)
	}
}

// TestSignalColumnsOnlyWhereMeasured: a segment whose records carry no
// kernel signal, DNS or tunnel has none of their columns (kinds 27..45);
// one with such records has the presence column and the columns of the
// fields some record holds a value other than 0 in, no other, and reads
// back every record as written, presence included (a retransmits of 0
// present, without a column). Compaction keeps them, remapping the
// strings and addresses they index.
func TestSignalColumnsOnlyWhereMeasured(t *testing.T) {
	kinds := func(data []byte) map[uint32]bool {
		out := map[uint32]bool{}
		for i := range int(le.Uint32(data[12:])) {
			out[le.Uint32(data[headerFixed+dirEntrySize*i:])] = true
		}
		return out
	}
	plain := oldSegmentRecords()
	for k := range kinds(encodeBatch(t, plain)) {
		if k >= kindPresence && k <= numCols {
			t.Errorf("a segment without signals has column kind %d", k)
		}
	}
	var measured []flow.Record
	for _, b := range flowtest.Bases() {
		if b.Rec.Has != 0 {
			measured = append(measured, b.Rec)
		}
	}
	if len(measured) < 4 {
		t.Fatalf("%d bases with signals", len(measured))
	}
	recs := append(oldSegmentRecords(), measured...)
	data := encodeBatch(t, recs)
	got := kinds(data)
	if !got[kindPresence] {
		t.Error("no presence column")
	}
	for _, f := range flow.Fields() {
		if f.Presence == 0 {
			continue
		}
		nonZero := false
		for i := range recs {
			nonZero = nonZero || flowtest.Value(&f, &recs[i]) != flowtest.Value(&f, &flow.Record{}) && flowtest.Value(&f, &recs[i]) != "0"
		}
		if got[f.Wire.Store] != nonZero {
			t.Errorf("field %s: column written %v, want %v (a record holds a value other than 0: %v)", f.Name, got[f.Wire.Store], nonZero, nonZero)
		}
	}
	for _, full := range []bool{true, false} {
		s, err := parseSegment(data, "signals")
		if err != nil {
			t.Fatal(err)
		}
		if full {
			err = s.verifyAll()
		} else {
			err = s.verify(sparseCols[:]...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if back := decodeAll(t, s); !reflect.DeepEqual(back, recs) {
			t.Errorf("whole file %v: read\n%+v\nwant\n%+v", full, back, recs)
		}
	}

	// Compaction: a segment with them after one without, into a batch
	// whose dictionaries start with other entries.
	first := flowtest.Bases()[1].Rec
	b := newBatch(8)
	b.add(&first)
	for _, in := range [][]flow.Record{plain, recs} {
		s, err := parseSegment(encodeBatch(t, in), "in")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.verifyAll(); err != nil {
			t.Fatal(err)
		}
		if err := b.appendSegment(s); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := b.encode(&buf, 2, nil); err != nil {
		t.Fatal(err)
	}
	s, err := parseSegment(buf.Bytes(), "compacted")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.verifyAll(); err != nil {
		t.Fatal(err)
	}
	want := append(append([]flow.Record{first}, plain...), recs...)
	if back := decodeAll(t, s); !reflect.DeepEqual(back, want) {
		t.Errorf("compacted: read\n%+v\nwant\n%+v", back, want)
	}
}

// TestReadSegmentBeforeSignals reads testdata/v1-before-signals.lseg, a
// segment the store wrote before the presence column and the signals',
// DNS and tunnel columns existed (an estimate among its records, so its
// accuracy columns are there): every record reads as written, with no
// field present only where measured.
func TestReadSegmentBeforeSignals(t *testing.T) {
	data, err := os.ReadFile("testdata/v1-before-signals.lseg")
	if err != nil {
		t.Fatal(err)
	}
	want := oldSegmentRecords()
	est := want[1]
	est.SrcPort = 5354
	est.Accuracy, est.MaxErrorPackets, est.MaxErrorBytes, est.ErrorConfidence = flow.Estimated, 3, 1<<20, 0.9816843611112658
	want = append(want, est)
	for _, full := range []bool{true, false} {
		s, err := parseSegment(data, "before-signals")
		if err != nil {
			t.Fatal(err)
		}
		if full {
			err = s.verifyAll()
		} else {
			err = s.verify(sparseCols[:]...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(s.cols[cPresence]) != 0 {
			t.Fatal("a segment from before the presence column has one")
		}
		if got := decodeAll(t, s); !reflect.DeepEqual(got, want) {
			t.Errorf("whole file %v: read\n%+v\nwant\n%+v", full, got, want)
		}
	}
}

// TestK8sColumns: a segment without Kubernetes names has none of their
// columns; one with names reads them back as written, a record without
// names among them included (no K8s), whether the file is verified whole
// or column by column; and compaction merges a segment from before the
// names (testdata/v1-before-signals.lseg) with one that has them.
func TestK8sColumns(t *testing.T) {
	kindsOf := func(data []byte) map[uint32]bool {
		s, err := parseSegment(data, "k")
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint32]bool{}
		for i := range le.Uint32(s.data[12:]) {
			out[le.Uint32(s.data[headerFixed+dirEntrySize*int(i):])] = true
		}
		return out
	}
	plain := oldSegmentRecords()
	for k := range kindsOf(encodeBatch(t, plain)) {
		if k >= cSrcKind+1 && k <= numCols {
			t.Errorf("a segment without names has column kind %d", k)
		}
	}
	var named []flow.Record
	for _, b := range flowtest.Bases() {
		if b.Rec.K8s != nil {
			named = append(named, b.Rec)
		}
	}
	// A service and an external address: names absent at one end.
	svc := named[0]
	svc.K8s = &flow.K8s{Src: flow.K8sEnd{Kind: flow.K8sExternal}, Dst: flow.K8sEnd{Kind: flow.K8sService, Namespace: "kube-system", Service: "kube-dns"}}
	recs := append(append(slices.Clone(plain[:1]), named...), svc)
	data := encodeBatch(t, recs)
	for c := cSrcKind; c < numCols; c++ {
		if !kindsOf(data)[uint32(c+1)] {
			t.Errorf("column kind %d not written", c+1)
		}
	}
	for _, full := range []bool{true, false} {
		s, err := parseSegment(data, "k8s")
		if err != nil {
			t.Fatal(err)
		}
		if full {
			err = s.verifyAll()
		} else {
			err = s.verify(sparseCols[:]...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if back := decodeAll(t, s); !reflect.DeepEqual(back, recs) {
			t.Errorf("whole file %v: read\n%+v\nwant\n%+v", full, back, recs)
		}
	}

	old, err := os.ReadFile("testdata/v1-before-signals.lseg")
	if err != nil {
		t.Fatal(err)
	}
	b := newBatch(8)
	var want []flow.Record
	for _, in := range [][]byte{old, data} {
		s, err := parseSegment(in, "in")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.verifyAll(); err != nil {
			t.Fatal(err)
		}
		want = append(want, decodeAll(t, s)...)
		if err := b.appendSegment(s); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := b.encode(&buf, 2, nil); err != nil {
		t.Fatal(err)
	}
	s, err := parseSegment(buf.Bytes(), "compacted")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.verifyAll(); err != nil {
		t.Fatal(err)
	}
	if back := decodeAll(t, s); !reflect.DeepEqual(back, want) {
		t.Errorf("compacted: read\n%+v\nwant\n%+v", back, want)
	}
}
