package sketch

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCountMinZipf runs a skewed workload (Zipf, a few flows carry most
// packets) over four CPUs into narrow count-min sketches, where collisions are
// many, and checks every flow's estimate: never below the truth, and above
// it by more than the bound for no more than the fraction 1-confidence of the
// flows. The heaviest flows must come out within their bounds.
func TestCountMinZipf(t *testing.T) {
	const (
		cpus   = 4
		flows  = 20000
		draws  = 400000
		width  = 512
		rows   = DefaultRows
		maxLen = 1500
	)
	p := Params{
		FlowSet:  FlowSetParams{Cells: K * 1024, FilterBits: 1031, FilterHashes: 1},
		CountMin: CountMinParams{Rows: rows, Width: width},
	}
	r := rand.New(rand.NewPCG(14, 14))
	keys := distinctKeys(r, flows)
	zipf := rand.NewZipf(r, 1.1, 1, flows-1)
	// Packets per flow and CPU: a flow mostly stays on one CPU, as RSS keeps
	// it, with a share on a second one.
	type cell struct{ packets, bytes uint64 }
	per := make([][cpus]cell, flows)
	for range draws {
		f := int(zipf.Uint64())
		cpu := f % cpus
		if r.IntN(8) == 0 {
			cpu = (cpu + 1) % cpus
		}
		per[f][cpu].packets++
		per[f][cpu].bytes += 40 + uint64(r.IntN(maxLen-40))
	}
	encs := make([]*Encoder, cpus)
	tables := make([][]byte, cpus)
	for c := range encs {
		encs[c] = newEncoder(t, p)
		tables[c] = encs[c].CountMin
	}
	tr := truth{}
	for f, k := range keys {
		for c := range cpus {
			// AddN is the sum of per-packet Adds: counters only add.
			encs[c].AddN(&k, per[f][c].packets, per[f][c].bytes)
			tr.add(k, per[f][c].packets, per[f][c].bytes)
		}
	}
	cm, err := NewCountMin(p.CountMin, tables)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cm.Total(), tr.total(); got != want {
		t.Fatalf("total %+v, want %+v", got, want)
	}
	var over, overBytes int
	type est struct {
		key        Key
		truth      Counts
		got        Counts
		errP, errB uint64
	}
	var all []est
	for _, k := range keys {
		want := tr[k]
		gp, gb, ep, eb, conf := cm.Estimate(&k)
		if conf != 1-math.Exp(-rows) {
			t.Fatalf("confidence %v, want 1-e^-%d", conf, rows)
		}
		if gp < want.Packets || gb < want.Bytes {
			t.Fatalf("flow %x: estimate %d packets %d bytes below the truth %+v", k[8:16], gp, gb, want)
		}
		if gp-want.Packets > ep {
			over++
		}
		if gb-want.Bytes > eb {
			overBytes++
		}
		all = append(all, est{k, want, Counts{gp, gb}, ep, eb})
	}
	// The bound is e/w of the total: check it is that, not something looser.
	_, _, ep, eb, _ := cm.Estimate(&keys[0])
	if tot := cm.Total(); ep != uint64(math.Ceil(math.E*float64(tot.Packets)/width)) || eb != uint64(math.Ceil(math.E*float64(tot.Bytes)/width)) {
		t.Fatalf("bounds %d packets %d bytes for totals %+v", ep, eb, tot)
	}
	delta := math.Exp(-rows)
	if float64(over) > delta*flows || float64(overBytes) > delta*flows {
		t.Errorf("%d flows over the packet bound, %d over the byte bound: want at most %.0f", over, overBytes, delta*flows)
	}
	slices.SortFunc(all, func(a, b est) int { return -cmpU(a.truth.Packets, b.truth.Packets) })
	var meanErr float64
	for _, e := range all {
		meanErr += float64(e.got.Packets - e.truth.Packets)
	}
	meanErr /= flows
	for _, e := range all[:10] {
		if e.got.Packets-e.truth.Packets > e.errP || e.got.Bytes-e.truth.Bytes > e.errB {
			t.Errorf("heavy hitter %x: %+v estimated %+v, bounds %d %d", e.key[8:16], e.truth, e.got, e.errP, e.errB)
		}
	}
	t.Logf("%d packets; heaviest flow %d; bound %d packets; mean overestimate %.1f; %d flows over the bound",
		cm.Total().Packets, all[0].truth.Packets, all[0].errP, meanErr, over)
	// Collisions must show: the test would not notice a sketch that ignores
	// them if every estimate were exact.
	if meanErr == 0 {
		t.Error("no overestimate at all: the sketch is not under load")
	}
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestCountMinLayout checks that an estimate reads the counters where the
// layout puts them: row r's pair for column c at (r·w+c)·16, packets first.
func TestCountMinLayout(t *testing.T) {
	p := CountMinParams{Rows: 3, Width: 100}
	table := make([]byte, p.Bytes())
	k := goldenKeys()[2]
	for r := range p.Rows {
		off := (r*p.Width + hashKey(&k).column(r, p.Width)) * CounterSize
		byteOrder.PutUint64(table[off:], uint64(10+r)) // row 0 holds the least
		byteOrder.PutUint64(table[off+8:], uint64(1000-r))
	}
	cm, err := NewCountMin(p, [][]byte{table, table})
	if err != nil {
		t.Fatal(err)
	}
	if gp, gb, _, _, _ := cm.Estimate(&k); gp != 2*10 || gb != 2*998 {
		t.Errorf("estimate %d packets %d bytes, want %d %d", gp, gb, 20, 1996)
	}
	if _, err := NewCountMin(p, [][]byte{table[:16]}); err == nil {
		t.Error("short table accepted")
	}
}
