package sketch

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
)

var measure = flag.Bool("sketch.measure", false, "measure decoding success against load (slow) and print the table the package documentation quotes")

// trial fills a flow set of sub cells per subrange with n one-packet flows of
// distinct realistic keys, no flow filter in the way, and decodes it. It
// checks what must hold whether or not decoding succeeds: decoded flows
// exact, undecoded ones and their traffic exactly the residual.
func trial(t testing.TB, r *rand.Rand, sub, n int) bool {
	p := FlowSetParams{Cells: K * sub, FilterBits: 2, FilterHashes: 1}
	table := make([]byte, p.TableBytes())
	keys := make(map[Key]struct{}, n)
	for _, k := range distinctKeys(r, n) {
		keys[k] = struct{}{}
		// Bytes are a function of the key, so the residual can be checked.
		insert(table, sub, &k, 1, size(&k))
	}
	res, err := DecodeCPU(p, table)
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{Packets: uint64(n)}
	for k := range keys {
		want.Bytes += size(&k)
	}
	for _, f := range res.Flows {
		if _, ok := keys[f.Key]; !ok || f.Packets != 1 || f.Bytes != size(&f.Key) {
			t.Fatalf("decoded flow %x: %d packets %d bytes (inserted %v)", f.Key[8:16], f.Packets, f.Bytes, ok)
		}
		want.Packets--
		want.Bytes -= f.Bytes
	}
	if res.Undecoded != uint64(n-len(res.Flows)) || res.Residual != want || len(res.Unverified) != 0 {
		t.Fatalf("undecoded %d of %d, residual %+v want %+v, %d unverified",
			res.Undecoded, n-len(res.Flows), res.Residual, want, len(res.Unverified))
	}
	return res.Complete()
}

// size is a one-packet flow's bytes in trials: a function of its key.
func size(k *Key) uint64 { return 40 + uint64(k[15]) + uint64(k[50]) }

// insert adds a flow to a flow set as the datapath does for a flow the filter
// has not seen, without the filter: the threshold is the flow set's.
func insert(table []byte, sub int, k *Key, packets, bytes uint64) {
	h := hashKey(k)
	for _, c := range h.cells(sub) {
		b := table[c*CellSize : (c+1)*CellSize]
		xorKey((*Key)(b[:KeySize]), k)
		byteOrder.PutUint32(b[offFlowCount:], byteOrder.Uint32(b[offFlowCount:])+1)
		byteOrder.PutUint32(b[offCheck:], byteOrder.Uint32(b[offCheck:])+uint32(packets)*h.check())
		byteOrder.PutUint64(b[offPackets:], byteOrder.Uint64(b[offPackets:])+packets)
		byteOrder.PutUint64(b[offBytes:], byteOrder.Uint64(b[offBytes:])+bytes)
	}
}

// TestDecodeThreshold checks the measured threshold on the smallest flow set
// SizeFlowSet builds: decoding succeeds at least 99 times in 100 at 0.70
// flows per cell and at the sizing's 0.75, and almost never at 0.90.
func TestDecodeThreshold(t *testing.T) {
	for i, c := range []struct {
		load     float64
		trials   int
		min, max int
	}{
		{0.70, 100, 99, 100},
		{loadReliable, 100, 99, 100},
		{0.90, 20, 0, 1},
	} {
		t.Run(fmt.Sprintf("load %.2f", c.load), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(12, uint64(i)))
			ok := 0
			for range c.trials {
				if trial(t, r, minSub, int(c.load*K*minSub)) {
					ok++
				}
			}
			if ok < c.min || ok > c.max {
				t.Errorf("%d of %d decoded, want %d..%d", ok, c.trials, c.min, c.max)
			}
		})
	}
}

// TestMeasureThreshold prints decoding success against load for several
// table sizes: go test -run MeasureThreshold -sketch.measure -v.
func TestMeasureThreshold(t *testing.T) {
	if !*measure {
		t.Skip("slow: run with -sketch.measure")
	}
	r := rand.New(rand.NewPCG(13, 13))
	for _, c := range []struct{ sub, trials int }{{1024, 2000}, {16384, 200}, {62000, 100}} {
		for _, load := range []float64{0.70, 0.75, 0.78, 0.80, 0.81, 0.82, 0.83, 0.85, 0.90} {
			ok := 0
			for range c.trials {
				if trial(t, r, c.sub, int(load*float64(K*c.sub))) {
					ok++
				}
			}
			fmt.Printf("cells %7d load %.2f: %4d / %4d decoded (%.1f %%)\n", K*c.sub, load, ok, c.trials, 100*float64(ok)/float64(c.trials))
		}
	}
}
