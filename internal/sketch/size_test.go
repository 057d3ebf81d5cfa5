package sketch

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSize checks the sizing of a 16 MiB budget: it fits, it uses the budget
// (one more cell per subrange would not fit), and the filter meets its
// false-positive target at capacity.
func TestSize(t *testing.T) {
	const budget = 16 << 20
	p, err := Size(budget)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	fs := p.FlowSet
	if p.Bytes() > budget {
		t.Errorf("%d bytes, over the budget %d", p.Bytes(), budget)
	}
	if p.CountMin.Rows != DefaultRows || p.CountMin.Bytes() > budget/16 {
		t.Errorf("count-min %+v (%d bytes), want %d rows in a sixteenth", p.CountMin, p.CountMin.Bytes(), DefaultRows)
	}
	if want := budget / 16 / CellSize / CacheWays * CacheWays; p.Cache != want {
		t.Errorf("flow cache of %d entries, want %d", p.Cache, want)
	}
	if next := flowSetFor(fs.Cells/K + 1); next.Bytes()+p.CountMin.Bytes()+p.CacheBytes() <= budget {
		t.Errorf("a flow set of %d cells would fit too", next.Cells)
	}
	if !isPrime(fs.FilterBits) || fs.FilterHashes != 10 {
		t.Errorf("filter of %d bits, %d hashes: want a prime, 10", fs.FilterBits, fs.FilterHashes)
	}
	if got := fs.Capacity(); got != int(loadReliable*float64(fs.Cells)) {
		t.Errorf("capacity %d, want %.2f of %d cells", got, loadReliable, fs.Cells)
	}
	if fpr := fs.FilterFPR(fs.Capacity()); fpr > filterFPR {
		t.Errorf("filter false-positive rate %.5f at capacity, want at most %g", fpr, filterFPR)
	}
	t.Logf("16 MiB: %d cells (%d flows), filter %d bits × %d, count-min %d × %d, flow cache %d; %d bytes",
		fs.Cells, fs.Capacity(), fs.FilterBits, fs.FilterHashes, p.CountMin.Rows, p.CountMin.Width, p.Cache, p.Bytes())

	if _, err := SizeFlowSet(flowSetFor(minSub).Bytes() - 1); err == nil {
		t.Error("a budget below the smallest flow set accepted")
	}
	if _, err := SizeCountMin(CounterSize, 2); err == nil {
		t.Error("a count-min budget for half a row accepted")
	}
	for _, b := range []int{1 << 20, 3<<20 + 12345, 64 << 20} {
		fs, err := SizeFlowSet(b)
		if err != nil || fs.Bytes() > b || fs.Validate() != nil {
			t.Errorf("budget %d: %+v (%d bytes), %v", b, fs, fs.Bytes(), err)
		}
	}
}

// TestFilterFPR fills a flow filter sized by SizeFlowSet to capacity and
// measures its false-positive rate on fresh keys: double hashing over a prime
// number of bits must give what kf independent hashes would.
func TestFilterFPR(t *testing.T) {
	fs, err := SizeFlowSet(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	e := newEncoder(t, Params{FlowSet: fs, CountMin: CountMinParams{Rows: 1, Width: 1}})
	r := rand.New(rand.NewPCG(15, 15))
	keys := distinctKeys(r, fs.Capacity()+100000)
	for _, k := range keys[:fs.Capacity()] {
		e.testAndSet(hashKey(&k))
	}
	m := fs.FilterBits
	fp := 0
	for _, k := range keys[fs.Capacity():] {
		pos, step := hashKey(&k).probes(m)
		seen := true
		for range fs.FilterHashes {
			seen = seen && byteOrder.Uint64(e.Filter[pos/64*8:])>>(pos%64)&1 == 1
			pos = (pos + step) % m
		}
		if seen {
			fp++
		}
	}
	rate, want := float64(fp)/100000, fs.FilterFPR(fs.Capacity())
	// Five standard deviations of a binomial over 100000 probes.
	if tol := 5 * math.Sqrt(want*(1-want)/100000); math.Abs(rate-want) > tol {
		t.Errorf("false-positive rate %.5f, want %.5f ± %.5f", rate, want, tol)
	}
	t.Logf("%d flows in %d bits: false-positive rate %.5f (formula %.5f)", fs.Capacity(), fs.FilterBits, rate, want)
}

// TestMerge checks how results of several CPUs combine.
func TestMerge(t *testing.T) {
	a, b, c := Key{1}, Key{2}, Key{3}
	got := Merge(
		Result{Flows: []Flow{{a, 1, 10}, {b, 2, 20}}, Residual: Counts{5, 50}, Undecoded: 1},
		Result{Flows: []Flow{{a, 3, 30}}, Unverified: []Flow{{b, 4, 40}, {c, 5, 50}}, Contaminated: 2},
	)
	want := Result{
		Flows:        []Flow{{a, 4, 40}},
		Unverified:   []Flow{{b, 6, 60}, {c, 5, 50}},
		Undecoded:    1,
		Residual:     Counts{5, 50},
		Contaminated: 2,
	}
	if d := diffFlows(got.Flows, want.Flows) + diffFlows(got.Unverified, want.Unverified); d != "" ||
		got.Undecoded != want.Undecoded || got.Residual != want.Residual || got.Contaminated != want.Contaminated {
		t.Errorf("Merge = %+v, want %+v (%s)", got, want, d)
	}
	if got.Complete() {
		t.Error("merge with undecoded flows complete")
	}
}

// BenchmarkDecode16MiB decodes one CPU's flow set of a 16 MiB budget filled
// to capacity.
func BenchmarkDecode16MiB(b *testing.B) {
	p, err := Size(16 << 20)
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewEncoder(p)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(16, 16))
	n := 0
	for _, k := range distinctKeys(r, p.FlowSet.Capacity()) {
		if e.AddN(&k, 1+r.Uint64N(100), 1500) {
			n++
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := DecodeCPU(p.FlowSet, e.FlowSet)
		if err != nil || len(res.Flows) != n {
			b.Fatalf("%d of %d flows, %v", len(res.Flows), n, err)
		}
	}
	b.ReportMetric(float64(n), "flows/op")
}
