package sketch

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"testing"
)

// goldenKeys are the keys of the golden tables, which the datapath's tests
// reuse to prove the C hash matches this one bit for bit.
func goldenKeys() []Key {
	var seq Key
	for i := range seq {
		seq[i] = byte(i)
	}
	return []Key{
		{},  // all zero
		seq, // bytes 0, 1, ..., 63
		// 10.0.0.1:40000 -> 10.0.0.2:443 TCP, ingress, ifindex 2, MACs
		// 02:00:00:00:00:01 -> 02:00:00:00:00:02, as flowKey lays it out.
		flowKey([4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}, 40000, 443, 6, 0),
	}
}

// The golden values below were computed by testdata/reference.py, an
// implementation written from the package documentation alone (python3
// internal/sketch/testdata/reference.py prints them).

// TestHashGolden pins the two full hashes of each golden key.
func TestHashGolden(t *testing.T) {
	want := [][2]uint64{
		{0x153B5F777DF46326, 0x513BF45AB12055F9},
		{0x223ED2E6F8A83102, 0xB12F1956CAA8065B},
		{0xF87DCAD689EDDD50, 0x12FE75D0CDC6211F},
	}
	for i, k := range goldenKeys() {
		for s, seed := range []uint64{seedA, seedB} {
			if got := Hash(seed, &k); got != want[i][s] {
				t.Errorf("key %d, seed %d (%#016x): Hash = %#016x, want %#016x", i, s, seed, got, want[i][s])
			}
		}
		if h := hashKey(&k); h != (keyHash{want[i][0], want[i][1]}) {
			t.Errorf("key %d: hashKey = %#016x, want %#016x", i, h, want[i])
		}
	}
}

// TestIndexesGolden pins the values derived from the hashes for a reference
// shape: 1000 cells per subrange, a 1009-bit filter probed 10 times,
// count-min rows 1000 wide.
func TestIndexesGolden(t *testing.T) {
	want := []struct {
		cells  [K]int
		probes [10]int
		check  uint32
		cols   [4]int
	}{
		{[K]int{876, 1733, 2294}, [10]int{83, 403, 723, 34, 354, 674, 994, 305, 625, 945}, 0x7DF46326, [4]int{470, 222, 924, 370}},
		{[K]int{467, 1974, 2124}, [10]int{134, 832, 521, 210, 908, 597, 286, 984, 673, 362}, 0xF8A83102, [4]int{256, 935, 642, 981}},
		{[K]int{32, 1982, 2488}, [10]int{979, 45, 120, 195, 270, 345, 420, 495, 570, 645}, 0x89EDDD50, [4]int{29, 147, 413, 809}},
	}
	p := Params{
		FlowSet:  FlowSetParams{Cells: K * 1000, FilterBits: 1009, FilterHashes: 10},
		CountMin: CountMinParams{Rows: 4, Width: 1000},
	}
	for i, k := range goldenKeys() {
		h := hashKey(&k)
		if got := h.cells(1000); got != want[i].cells {
			t.Errorf("key %d: cells %v, want %v", i, got, want[i].cells)
		}
		// The probes, read back from the bits one insert sets.
		e := newEncoder(t, p)
		e.Add(&k, 1)
		var probes []int
		for b := range p.FlowSet.FilterBits {
			if byteOrder.Uint64(e.Filter[b/64*8:])>>(b%64)&1 == 1 {
				probes = append(probes, b)
			}
		}
		wantSet := make(map[int]bool)
		for _, b := range want[i].probes {
			wantSet[b] = true
		}
		if len(probes) != len(wantSet) {
			t.Errorf("key %d: %d filter bits set %v, want %v", i, len(probes), probes, want[i].probes)
		}
		for _, b := range probes {
			if !wantSet[b] {
				t.Errorf("key %d: filter bit %d set, want only %v", i, b, want[i].probes)
			}
		}
		if got := h.check(); got != want[i].check {
			t.Errorf("key %d: check term %#08x, want %#08x", i, got, want[i].check)
		}
		for r := range 4 {
			if got := h.column(r, 1000); got != want[i].cols[r] {
				t.Errorf("key %d: row %d column %d, want %d", i, r, got, want[i].cols[r])
			}
		}
	}
}

// TestEncodeGolden pins the bytes of a whole sketch after a fixed sequence of
// packets, for the reference shape: the datapath's insert must leave the same
// memory.
func TestEncodeGolden(t *testing.T) {
	if byteOrder.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the golden memory is little-endian, as on every host the bpfel datapath loads on")
	}
	p := Params{
		FlowSet:  FlowSetParams{Cells: K * 1000, FilterBits: 1009, FilterHashes: 10},
		CountMin: CountMinParams{Rows: 4, Width: 1000},
	}
	e := newEncoder(t, p)
	for i, k := range goldenKeys() {
		for j := range 3 {
			e.Add(&k, uint64(60+100*i+j)) // key i: 3 packets of 60+100i, +1, +2 bytes
		}
	}
	want := map[string]string{
		"flow set":  "35b9c02cee99b68f6d1c86b22dd7e88b69985a167990da0a4f99a941a98d912e",
		"filter":    "d58904a77cae0a9bf48873b09f99ff765b029f5ebfc18fdd8337d9033c82be7c",
		"count-min": "6e17e96091bcad34c8aee9219d0bb6a6053e921edbd7f62ceef26f518d77633c",
	}
	for name, b := range map[string][]byte{"flow set": e.FlowSet, "filter": e.Filter, "count-min": e.CountMin} {
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want[name] {
			t.Errorf("%s: sha256 %s, want %s", name, got, want[name])
		}
	}
}

// TestHashAvalanche checks why Hash has a finalizer: flipping any bit of a
// realistic key flips each output bit with probability close to one half.
// Without the finalizer the mean deviation is 0.10 and the top bits of the
// last word flip exactly two output bits.
func TestHashAvalanche(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n = 4000
	keys := make([]Key, n)
	hashes := make([]uint64, n)
	for i := range keys {
		keys[i] = randomKey(r)
		hashes[i] = Hash(seedA, &keys[i])
	}
	var sumDev float64
	for in := range KeySize * 8 {
		var flips [64]int
		for i := range keys {
			k := keys[i]
			k[in/8] ^= 1 << (in % 8)
			d := hashes[i] ^ Hash(seedA, &k)
			for b := range 64 {
				flips[b] += int(d >> b & 1)
			}
		}
		for b := range 64 {
			dev := math.Abs(float64(flips[b])/n - 0.5)
			sumDev += dev
			// 0.05 is eight standard deviations of a fair coin over n.
			if dev > 0.05 {
				t.Errorf("input bit %d flips output bit %d with probability %.3f", in, b, float64(flips[b])/n)
			}
		}
	}
	if mean := sumDev / (KeySize * 8 * 64); mean > 0.01 {
		t.Errorf("mean deviation from 1/2: %.4f, want at most 0.01", mean)
	}
}

// TestDerivedIndependence checks that the values derived from a key's two
// hashes behave as independent: over realistic keys, the joint value of a
// flow's K cells (in subranges of 7 and of 8 cells) and of its count-min
// columns (4 rows of 5) is spread evenly over all the combinations, by a
// chi-square test. Its control is plain double hashing, a + i·b mod S,
// which puts a flow's cells on one of S² lines of the S³ combinations and
// must fail the same test by far.
func TestDerivedIndependence(t *testing.T) {
	const perBin = 100
	keys := distinctKeys(rand.New(rand.NewPCG(21, 21)), 5*5*5*5*perBin)
	hashes := make([]keyHash, len(keys))
	for i := range keys {
		hashes[i] = hashKey(&keys[i])
	}
	plain := func(h keyHash, i, n int) int { return int((h.a + uint64(i)*h.b) % uint64(n)) }
	for _, tc := range []struct {
		name    string
		n, dims int
		value   func(h keyHash, d, n int) int
		control bool // must fail
	}{
		{"cells of 7", 7, K, func(h keyHash, j, n int) int { return h.cells(n)[j] - j*n }, false},
		{"cells of 8", 8, K, func(h keyHash, j, n int) int { return h.cells(n)[j] - j*n }, false},
		{"count-min 4 rows of 5", 5, 4, keyHash.column, false},
		{"plain double hashing, cells of 7", 7, K, func(h keyHash, j, n int) int { return plain(h, deriveCell+j, n) }, true},
	} {
		bins := 1
		for range tc.dims {
			bins *= tc.n
		}
		sample := hashes[:min(len(hashes), bins*perBin)]
		count := make([]int, bins)
		for _, h := range sample {
			b := 0
			for d := range tc.dims {
				b = b*tc.n + tc.value(h, d, tc.n)
			}
			count[b]++
		}
		expect := float64(len(sample)) / float64(bins)
		var chi2 float64
		for _, c := range count {
			chi2 += (float64(c) - expect) * (float64(c) - expect) / expect
		}
		// Chi-square with bins-1 degrees of freedom: mean bins-1,
		// standard deviation sqrt(2(bins-1)). Six of them.
		dof := float64(bins - 1)
		limit := dof + 6*math.Sqrt(2*dof)
		t.Logf("%s: chi-square %.0f over %d combinations (limit %.0f)", tc.name, chi2, bins, limit)
		if fail := chi2 > limit; fail != tc.control {
			t.Errorf("%s: chi-square %.0f, limit %.0f: independent %v, want %v", tc.name, chi2, limit, !fail, !tc.control)
		}
	}
}

// TestCellsShared counts, in flow sets of 1024 cells per subrange filled to
// capacity, the pairs of flows that share all K cells: such a pair never
// peels. With independent cells a table holds n²/2S³ ≈ 0.0025 of them; with
// plain double hashing (the control), n²/2S² ≈ 2.5, whatever S.
func TestCellsShared(t *testing.T) {
	const sub, tables = minSub, 50
	r := rand.New(rand.NewPCG(22, 22))
	plain := func(h keyHash) (c [K]int) {
		for j := range K {
			c[j] = int((h.a + uint64(deriveCell+j)*h.b) % sub)
		}
		return c
	}
	var shared, control int
	for range tables {
		seen := make(map[[K]int]int)
		seenPlain := make(map[[K]int]int)
		for _, k := range distinctKeys(r, capacity(K*sub)) {
			h := hashKey(&k)
			c, p := h.cells(sub), plain(h)
			shared += seen[c]
			control += seenPlain[p]
			seen[c]++
			seenPlain[p]++
		}
	}
	t.Logf("pairs sharing all cells in %d tables: %d (plain double hashing: %d)", tables, shared, control)
	// Expected 0.12 and 127.
	if shared > 3 {
		t.Errorf("%d pairs of flows share all their cells in %d tables, want about 0.12", shared, tables)
	}
	if control < 60 {
		t.Errorf("plain double hashing: %d pairs share all their cells in %d tables, want about 127", control, tables)
	}
}
