package store

import (
	"math/rand/v2"
	"testing"
)

// TestCanonIsCanonical: canon's shortcut gives what canonical gives, for
// IPv4-mapped, malformed IPv4, IPv6 and non-IP entries.
func TestCanonIsCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	mapped := [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}
	keys := []addrKey{{}, {mapped, famV4}, {mapped, famV6}, {mapped, famOther}, {[16]byte{10, 0, 0, 1}, famV4}}
	for range 1000 {
		var k addrKey
		for i := range k.a {
			k.a[i] = byte(rng.IntN(3)) * 0x7f // zeros, 0x7f and 0xfe: near-misses of the mapped form
		}
		if rng.IntN(2) == 0 {
			copy(k.a[:12], mapped[:12])
		}
		k.fam = []uint8{famOther, famV4, famV6, 9}[rng.IntN(4)]
		keys = append(keys, k)
	}
	for _, k := range keys {
		if got, want := canon(k), canonical(k); got != want {
			t.Fatalf("canon(%v) = %v, canonical says %v", k, got, want)
		}
	}
}
