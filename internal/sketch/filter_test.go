package sketch

import (
	"math/rand/v2"
	"testing"
)

// TestFilterContainsWhatWasInserted: every inserted key is found, and keys
// never inserted are found about as often as the filter's rate says.
func TestFilterContainsWhatWasInserted(t *testing.T) {
	p, err := Size(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEncoder(p)
	if err != nil {
		t.Fatal(err)
	}
	n := p.FlowSet.Capacity()
	keys := distinctKeys(rand.New(rand.NewPCG(5, 5)), n+100000)
	for i := range n {
		e.Add(&keys[i], 100)
	}
	f, err := NewFilter(p.FlowSet, [][]byte{make([]byte, p.FlowSet.FilterBytes()), e.Filter})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if !f.Contains(&keys[i]) {
			t.Fatalf("inserted key %d not found", i)
		}
	}
	false_ := 0
	const probes = 100000
	for i := range probes {
		if f.Contains(&keys[n+i]) {
			false_++
		}
	}
	if rate, want := float64(false_)/probes, p.FlowSet.FilterFPR(n); rate > 2*want+0.0005 {
		t.Fatalf("%d of %d keys never inserted found: rate %.5f, filter sized for %.5f", false_, probes, rate, want)
	}
}

// TestDecodeRecoversPhantomsOfKnownKeys: a flow that one CPU's flow filter
// wrongly took for one it had seen (its packets in the cells, its key not)
// is given back its packets on that CPU when another CPU decoded its key.
func TestDecodeRecoversPhantomsOfKnownKeys(t *testing.T) {
	p, err := Size(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	e0, err := NewEncoder(p)
	if err != nil {
		t.Fatal(err)
	}
	e1, err := NewEncoder(p)
	if err != nil {
		t.Fatal(err)
	}
	keys := distinctKeys(rand.New(rand.NewPCG(3, 3)), 2000)
	for i, k := range keys[:1000] {
		e0.AddN(&k, uint64(1+i%5), uint64(100*(1+i%5)))
	}
	for i, k := range keys[1000:] {
		e1.AddN(&k, uint64(1+i%3), uint64(64*(1+i%3)))
	}
	// keys[7] on CPU 1 as a false positive of its filter: its bits set
	// beforehand, as other flows' bits would have.
	ghost, err := NewEncoder(p)
	if err != nil {
		t.Fatal(err)
	}
	ghost.AddN(&keys[7], 1, 1)
	for i := range e1.Filter {
		e1.Filter[i] |= ghost.Filter[i]
	}
	if inserted := e1.AddN(&keys[7], 4, 400); inserted {
		t.Fatal("the phantom was inserted with its key")
	}
	res, err := Decode(p.FlowSet, [][]byte{e0.FlowSet, e1.FlowSet})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete() || res.Residual != (Counts{}) {
		t.Fatalf("decode left %d undecoded, %d unverified, residual %+v", res.Undecoded, len(res.Unverified), res.Residual)
	}
	for _, f := range res.Flows {
		if f.Key == keys[7] {
			if want := uint64(1 + 7%5 + 4); f.Packets != want {
				t.Fatalf("the flow of both CPUs: %d packets, want %d", f.Packets, want)
			}
			return
		}
	}
	t.Fatal("the flow of both CPUs did not decode")
}

// TestDecodeDoubtsWhatAnOverloadedCPUMayHold: a flow decoded on one CPU
// whose key another CPU's filter holds, where that CPU did not decode
// completely, is not reported exact.
func TestDecodeDoubtsWhatAnOverloadedCPUMayHold(t *testing.T) {
	p, err := Size(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	e0, _ := NewEncoder(p)
	e1, _ := NewEncoder(p)
	keys := distinctKeys(rand.New(rand.NewPCG(4, 4)), 2*p.FlowSet.Capacity()+10)
	e0.AddN(&keys[0], 5, 500)
	// CPU 1: the same flow among twice as many flows as decode.
	e1.AddN(&keys[0], 3, 300)
	for i := range keys[1:] {
		e1.AddN(&keys[1+i], 1, 64)
	}
	res, err := DecodeFiltered(p.FlowSet, [][]byte{e0.FlowSet, e1.FlowSet}, [][]byte{e0.Filter, e1.Filter})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Flows {
		if f.Key == keys[0] {
			t.Fatalf("the flow is reported exact with %d packets, though CPU 1 holds its key undecoded", f.Packets)
		}
	}
	if !hasUnbounded(res.Unverified, &keys[0]) {
		t.Fatal("the flow is not among the unverified, unbounded")
	}
}

func hasUnbounded(fs []Flow, k *Key) bool {
	for _, f := range fs {
		if f.Key == *k && f.Packets == ^uint64(0) {
			return true
		}
	}
	return false
}
