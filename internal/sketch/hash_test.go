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

// TestHashGolden pins Hash under every seed. The values were checked against
// an independent implementation written from the package documentation.
func TestHashGolden(t *testing.T) {
	want := [][len(seeds)]uint64{
		{0x153B5F777DF46326, 0x513BF45AB12055F9, 0x336518BD1E79506B, 0x18A9CAB43A0E6CBE, 0xF4C3E861B8032932, 0x90EEAB0AF3A68870, 0xDE9853E3C49E38BC, 0xD5A919ECEBE5DB76, 0x1FBE7860D32D1668, 0x9B3BE811CE553554, 0x06D5D11F7245A97D, 0xC9EEEF203EFD7D91, 0xD9C749D0711A28EA},
		{0x223ED2E6F8A83102, 0xB12F1956CAA8065B, 0xF8CCC22CFF4FECD5, 0xF3586F04751F7827, 0x4F61C59E93B5F93A, 0x9863D24678FF4707, 0x3CC18FB438CC7C7A, 0xC9CEE0D0DB196240, 0x9C7AD7D10A840224, 0x041D76D4B6AE86C5, 0x738CE94CDA1D3FE0, 0x58140BF7EB65ACE2, 0x2D055CEB895BD031},
		{0xF87DCAD689EDDD50, 0x12FE75D0CDC6211F, 0xEF1476ABF6584730, 0x9E1CB8EE17F9DA23, 0x7A1703054ADB7368, 0xBE22D62563AC737C, 0x82B0C3DD1A83498C, 0x345408C765128174, 0xDEBE862CBC675111, 0xAB65C827123BBB46, 0x529C2302C4378032, 0x9D958B3F957CA393, 0xC658B07E71967DDF},
	}
	for i, k := range goldenKeys() {
		for s, seed := range seeds {
			if got := Hash(seed, &k); got != want[i][s] {
				t.Errorf("key %d, seed %d (%#016x): Hash = %#016x, want %#016x", i, s, seed, got, want[i][s])
			}
		}
	}
}

// TestIndexesGolden pins the reductions of the hashes for a reference shape:
// 1000 cells per subrange, a 1009-bit filter probed 10 times, count-min rows
// 1000 wide.
func TestIndexesGolden(t *testing.T) {
	want := []struct {
		cells  [K]int
		probes [10]int
		check  uint32
		cols   [4]int
	}{
		{[K]int{470, 1897, 2483}, [10]int{918, 776, 634, 492, 350, 208, 66, 933, 791, 649}, 0x18A9CAB4, [4]int{960, 652, 174, 624}},
		{[K]int{698, 1667, 2573}, [10]int{291, 269, 247, 225, 203, 181, 159, 137, 115, 93}, 0xF3586F04, [4]int{679, 322, 520, 212}},
		{[K]int{504, 1719, 2536}, [10]int{14, 263, 512, 761, 1, 250, 499, 748, 997, 237}, 0x9E1CB8EE, [4]int{300, 532, 492, 9}},
	}
	p := Params{
		FlowSet:  FlowSetParams{Cells: K * 1000, FilterBits: 1009, FilterHashes: 10},
		CountMin: CountMinParams{Rows: 4, Width: 1000},
	}
	for i, k := range goldenKeys() {
		if got := cells(&k, 1000); got != want[i].cells {
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
		fa, _ := filterHashes(&k)
		if got := checkTerm(fa); got != want[i].check {
			t.Errorf("key %d: check term %#08x, want %#08x", i, got, want[i].check)
		}
		for r := range 4 {
			if got := column(&k, r, 1000); got != want[i].cols[r] {
				t.Errorf("key %d: row %d column %d, want %d", i, r, got, want[i].cols[r])
			}
		}
	}
}

// TestEncodeGolden pins the bytes of a whole sketch after a fixed sequence of
// packets, for the reference shape: the datapath's insert must leave the same
// memory. The values were checked against an independent implementation
// written from the package documentation.
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
		"flow set":  "d97799ec53b56171a3f407b88421506734031db1c2b912f93076b0f57f7cb0ce",
		"filter":    "d5ea663debb6d42a0104212fd7897cc17d1db2cc1e3337e28ffe2ddecd966682",
		"count-min": "24232deb56ec08541d28720ff20b302516225e241f73d5ec503fee3b4b14f868",
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
		hashes[i] = Hash(seeds[0], &keys[i])
	}
	var sumDev float64
	for in := range KeySize * 8 {
		var flips [64]int
		for i := range keys {
			k := keys[i]
			k[in/8] ^= 1 << (in % 8)
			d := hashes[i] ^ Hash(seeds[0], &k)
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
