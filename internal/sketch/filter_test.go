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
