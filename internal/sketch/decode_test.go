package sketch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// wantFlows returns the truth as Decode orders flows.
func wantFlows(tr truth) []Flow {
	var fs []Flow
	for k, c := range tr {
		fs = append(fs, Flow{Key: k, Packets: c.Packets, Bytes: c.Bytes})
	}
	sortFlows(fs)
	return fs
}

// diffFlows describes how got differs from want, or returns "".
func diffFlows(got, want []Flow) string {
	g := make(map[Key]Flow, len(got))
	for _, f := range got {
		g[f.Key] = f
	}
	var d []string
	for _, w := range want {
		f, ok := g[w.Key]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("missing %x: %d packets %d bytes", w.Key[8:16], w.Packets, w.Bytes))
		case f != w:
			d = append(d, fmt.Sprintf("%x: %d packets %d bytes, want %d %d", w.Key[8:16], f.Packets, f.Bytes, w.Packets, w.Bytes))
		}
		delete(g, w.Key)
	}
	for k := range g {
		d = append(d, fmt.Sprintf("unexpected %x", k[8:16]))
	}
	if len(d) > 5 {
		d = append(d[:5], fmt.Sprintf("and %d more", len(d)-5))
	}
	return strings.Join(d, "; ")
}

func decode(t *testing.T, p FlowSetParams, encs ...*Encoder) Result {
	t.Helper()
	tables := make([][]byte, len(encs))
	for i, e := range encs {
		tables[i] = e.FlowSet
	}
	r, err := Decode(p, tables)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDecodeCrafted decodes a small set of flows sharing cells, some split
// over two CPUs, and expects every flow's exact packets and bytes: per CPU,
// and summed by key across CPUs.
func TestDecodeCrafted(t *testing.T) {
	p := params(t, 8, 1009, 10) // 24 cells: the flows must share cells
	cpus := []*Encoder{newEncoder(t, p), newEncoder(t, p)}
	perCPU := []truth{{}, {}}
	all := truth{}
	r := rand.New(rand.NewPCG(7, 7))
	keys := distinctKeys(r, 14)
	for i, k := range keys {
		// Flows 0-3 run on CPU 0, 4-9 on CPU 1, 10-13 on both (the two
		// directions of a connection steered to different CPUs).
		on := []int{0}
		switch {
		case i >= 10:
			on = []int{0, 1}
		case i >= 4:
			on = []int{1}
		}
		for _, cpu := range on {
			for j := range i + 1 {
				length := uint64(64 + 97*i + 13*j + 100*cpu)
				cpus[cpu].Add(&k, length)
				perCPU[cpu].add(k, 1, length)
				all.add(k, 1, length)
			}
		}
	}
	shared := 0
	for c := range p.FlowSet.Cells {
		if ParseCell(cpus[0].FlowSet[c*CellSize:]).FlowCount > 1 {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("no cell on CPU 0 holds two flows: the set does not exercise peeling")
	}

	for cpu, e := range cpus {
		got, err := DecodeCPU(p.FlowSet, e.FlowSet)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Complete() || got.Residual != (Counts{}) || got.Contaminated != 0 {
			t.Fatalf("cpu %d: complete %v, residual %+v, contaminated %d", cpu, got.Complete(), got.Residual, got.Contaminated)
		}
		if d := diffFlows(got.Flows, wantFlows(perCPU[cpu])); d != "" {
			t.Errorf("cpu %d: flows: %s", cpu, d)
		}
	}
	got := decode(t, p.FlowSet, cpus...)
	if !got.Complete() || got.Residual != (Counts{}) || len(got.Unverified) != 0 {
		t.Fatalf("merged: complete %v, residual %+v, unverified %v", got.Complete(), got.Residual, got.Unverified)
	}
	if d := diffFlows(got.Flows, wantFlows(all)); d != "" {
		t.Errorf("merged flows: %s", d)
	}
	if u, ok := got.Unattributed(); !ok || u != (Counts{}) {
		t.Errorf("unattributed %+v, %v; want zero, true", u, ok)
	}
}

// TestDecodeOverCapacity fills a flow set past the peeling threshold: decoding
// must report failure, every flow it does return must be exact, and the
// residual must be exactly the undecoded flows and their traffic.
func TestDecodeOverCapacity(t *testing.T) {
	const sub = 1024
	p := params(t, sub, 1<<20+7, 10) // a large filter: no false positives here
	if !isPrime(p.FlowSet.FilterBits) {
		t.Fatal("filter bits not prime")
	}
	e := newEncoder(t, p)
	r := rand.New(rand.NewPCG(8, 8))
	tr := truth{}
	for _, k := range distinctKeys(r, 9*K*sub/10) {
		packets := 1 + r.Uint64N(20)
		bytes := packets * (40 + r.Uint64N(1460))
		if !e.AddN(&k, packets, bytes) {
			t.Fatal("flow filter false positive: the test expects none")
		}
		tr.add(k, packets, bytes)
	}
	got := decode(t, p.FlowSet, e)
	if got.Complete() {
		t.Fatal("decoding at 0.9 flows per cell reported complete")
	}
	if len(got.Flows) == 0 || len(got.Unverified) != 0 {
		t.Fatalf("%d flows, %d unverified", len(got.Flows), len(got.Unverified))
	}
	rest := tr.total()
	for _, f := range got.Flows {
		if want, ok := tr[f.Key]; !ok || want != (Counts{f.Packets, f.Bytes}) {
			t.Fatalf("flow %x: %d packets %d bytes, want %+v (present %v)", f.Key[:16], f.Packets, f.Bytes, want, ok)
		}
		rest.Packets -= f.Packets
		rest.Bytes -= f.Bytes
	}
	if got.Undecoded != uint64(len(tr)-len(got.Flows)) {
		t.Errorf("undecoded %d, want %d", got.Undecoded, len(tr)-len(got.Flows))
	}
	if got.Residual != rest {
		t.Errorf("residual %+v, want %+v", got.Residual, rest)
	}
	if _, ok := got.Unattributed(); ok {
		t.Error("unattributed traffic claimed known after a failed decode")
	}
	t.Logf("%d flows in %d cells: %d decoded, %d undecoded", len(tr), p.FlowSet.Cells, len(got.Flows), got.Undecoded)
}

// TestDecodeFalsePositiveCrafted records a flow the flow filter wrongly
// believes inserted, in cells that each hold one real flow: a decoder
// trusting flow_count alone would add its packets to those flows. Decode
// must keep every flow exact and report the phantom's traffic unattributed.
func TestDecodeFalsePositiveCrafted(t *testing.T) {
	const sub = 64
	p := params(t, sub, 1009, 10)
	e := newEncoder(t, p)
	r := rand.New(rand.NewPCG(9, 9))
	keys := distinctKeys(r, 2000)
	flows, phantom := keys[:20], Key{}
	tr := truth{}
	occupied := make(map[int]int) // cell -> flows in it
	for i, k := range flows {
		packets := uint64(i + 1)
		if !e.AddN(&k, packets, packets*1000) {
			t.Fatal("unexpected flow filter false positive")
		}
		tr.add(k, packets, packets*1000)
		for _, c := range hashKey(&k).cells(sub) {
			occupied[c]++
		}
	}
	// The phantom: a key each of whose cells holds exactly one real flow.
	found := false
	for _, k := range keys[20:] {
		n := 0
		for _, c := range hashKey(&k).cells(sub) {
			if occupied[c] == 1 {
				n++
			}
		}
		if n == K {
			phantom, found = k, true
			break
		}
	}
	if !found {
		t.Fatal("no candidate phantom shares a cell with one flow in every subrange")
	}
	// The filter holds the phantom's bits, as if other flows had set them.
	e.testAndSet(hashKey(&phantom))
	if e.AddN(&phantom, 7, 7777) {
		t.Fatal("the phantom was inserted")
	}

	got := decode(t, p.FlowSet, e)
	if !got.Complete() || len(got.Unverified) != 0 {
		t.Fatalf("complete %v, undecoded %d, unverified %v", got.Complete(), got.Undecoded, got.Unverified)
	}
	if d := diffFlows(got.Flows, wantFlows(tr)); d != "" {
		t.Errorf("flows: %s", d)
	}
	if u, ok := got.Unattributed(); !ok || u != (Counts{7, 7777}) {
		t.Errorf("unattributed %+v (%v), want {7 7777}", u, ok)
	}
	if got.Contaminated != K {
		t.Errorf("contaminated cells %d, want %d", got.Contaminated, K)
	}
}

// TestDecodeFalsePositives fills flow sets to capacity behind a flow filter
// sized for 5 % false positives at capacity, fifty times the sizing's rate,
// so that each table holds dozens of phantoms. Every flow Decode calls exact must be, the
// unverified ones' bounds must hold, and when decoding is complete the
// unattributed traffic must be exactly the phantoms'.
func TestDecodeFalsePositives(t *testing.T) {
	const sub = 2048
	cap := capacity(K * sub)
	bits := nextPrime(cap * 624 / 100) // 6.24 bits a flow, 4 probes: 5 %
	p := params(t, sub, bits, 4)
	r := rand.New(rand.NewPCG(10, 10))
	var phantoms, flows, unverified, incomplete, exact int
	for range 10 {
		e := newEncoder(t, p)
		tr := truth{}
		var lost Counts
		for _, k := range distinctKeys(r, cap) {
			packets := 1 + r.Uint64N(50)
			bytes := packets * (40 + r.Uint64N(1460))
			if e.AddN(&k, packets, bytes) {
				tr.add(k, packets, bytes)
			} else {
				phantoms++
				lost.Packets += packets
				lost.Bytes += bytes
			}
		}
		flows += len(tr)
		got := decode(t, p.FlowSet, e)
		for _, f := range got.Flows {
			if want := tr[f.Key]; want != (Counts{f.Packets, f.Bytes}) {
				t.Fatalf("flow %x: %d packets %d bytes, want %+v", f.Key[:16], f.Packets, f.Bytes, want)
			}
		}
		for _, f := range got.Unverified {
			if want := tr[f.Key]; f.Packets < want.Packets || f.Bytes < want.Bytes {
				t.Fatalf("unverified flow %x: bound %d packets %d bytes below %+v", f.Key[:16], f.Packets, f.Bytes, want)
			}
		}
		unverified += len(got.Unverified)
		if got.Undecoded != 0 {
			incomplete++
			continue
		}
		if len(got.Flows)+len(got.Unverified) != len(tr) {
			t.Fatalf("%d flows and %d unverified, want %d", len(got.Flows), len(got.Unverified), len(tr))
		}
		if u, ok := got.Unattributed(); ok {
			if u != lost {
				t.Fatalf("unattributed %+v, want the phantoms' %+v", u, lost)
			}
			exact++
		}
	}
	if exact < 5 {
		t.Errorf("unattributed traffic known in %d of 10 tables", exact)
	}
	t.Logf("%d flows, %d phantoms, %d unverified, %d of 10 tables undecoded", flows, phantoms, unverified, incomplete)
	if phantoms < 100 {
		t.Fatalf("only %d phantoms: the filter is not exercised", phantoms)
	}
	if incomplete > 1 {
		t.Errorf("%d of 10 tables at capacity left keys undecoded", incomplete)
	}
	// A phantom takes a flow's value away only when it sits in all of that
	// flow's usable cells; allow one flow in a thousand.
	if unverified*1000 > flows {
		t.Errorf("%d of %d flows unverified", unverified, flows)
	}
}

// TestDecodeInconsistent feeds tables no insert sequence produces.
func TestDecodeInconsistent(t *testing.T) {
	p := params(t, 64, 1009, 10)
	e := newEncoder(t, p)
	r := rand.New(rand.NewPCG(11, 11))
	for _, k := range distinctKeys(r, 40) {
		e.AddN(&k, 3, 300)
	}
	// One cell's packets moved: subrange totals disagree.
	torn := slices.Clone(e.FlowSet)
	c := ParseCell(torn[5*CellSize:])
	c.Packets++
	c.Put(torn[5*CellSize:])
	if _, err := DecodeCPU(p.FlowSet, torn); !errors.Is(err, ErrInconsistent) {
		t.Errorf("packets changed in one cell: err %v, want ErrInconsistent", err)
	}
	// A key with no flow count.
	torn = slices.Clone(e.FlowSet)
	for i := range CellSize {
		torn[i] = 0
	}
	torn[3] = 1
	if _, err := DecodeCPU(p.FlowSet, torn); !errors.Is(err, ErrInconsistent) {
		t.Errorf("cell rewritten: err %v, want ErrInconsistent", err)
	}
	if _, err := DecodeCPU(p.FlowSet, e.FlowSet[:CellSize]); err == nil {
		t.Error("short table decoded")
	}
	// Garbage must not crash the decoder.
	for i := range 200 {
		g := make([]byte, len(e.FlowSet))
		for j := range g {
			g[j] = byte(r.Uint32())
		}
		if i%2 == 0 { // mostly small counts, so that cells look pure
			for c := range p.FlowSet.Cells {
				byteOrder.PutUint32(g[c*CellSize+offFlowCount:], r.Uint32N(3))
			}
		}
		_, _ = DecodeCPU(p.FlowSet, g)
	}
}
