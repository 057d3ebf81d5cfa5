package sketch

import "encoding/binary"

// KeySize is the size of a flow key as the sketch hashes and stores it: the
// datapath's 60-byte struct flow_key followed by 4 zero bytes, so that it is
// a whole number of 64-bit words.
const KeySize = 64

// Key is a flow key. The package treats it as opaque bytes; only the datapath
// and internal/flow know its fields.
type Key [KeySize]byte

// HashVersion names the hashing the package documentation defines ("The
// hash"): a sketch is decoded only by a build of the same version. Version
// 1 hashed the whole key once per index; version 2 derives every index
// from two full hashes.
const HashVersion = 2

// hashMul is 2^64 divided by the golden ratio, odd: the multiplier of
// Fibonacci hashing, which spreads a word's low bits into its high bits.
const hashMul = 0x9E3779B97F4A7C15

// The seeds of a key's two full hashes, fixed forever (the datapath holds
// the same): the first two outputs of SplitMix64 started at 0, numbers with
// no structure in common with hashMul or with each other.
const (
	seedA = 0xE220A8397B1DCDAF
	seedB = 0x6E789E6AA1B965F4
)

// Hash is the one full hash function of the sketch, shared bit for bit with
// the datapath: see the package documentation for its definition and why it
// has a finalizer. A key is hashed twice (hashKey); every index comes from
// those two hashes.
func Hash(seed uint64, k *Key) uint64 {
	w := words(k)
	return hashWords(seed, &w)
}

// words reads a key as the eight little-endian words Hash mixes, once for
// both hashes of a packet.
func words(k *Key) [KeySize / 8]uint64 {
	var w [KeySize / 8]uint64
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(k[8*i:])
	}
	return w
}

func hashWords(seed uint64, w *[KeySize / 8]uint64) uint64 {
	h := seed
	for _, x := range w {
		h ^= x
		h *= hashMul
		h ^= h >> 29
	}
	// The loop leaves the last word's high bits reaching only a few output
	// bits through a single multiply.
	return fmix64(h)
}

// fmix64 is MurmurHash3's 64-bit finalizer: Hash's last step, and the whole
// of the derivation of every value past the two full hashes.
func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xFF51AFD7ED558CCD
	h ^= h >> 33
	h *= 0xC4CEB9FE1A85EC53
	h ^= h >> 33
	return h
}

// keyHash is a key's two full hashes, a = Hash(seedA, key) and b =
// Hash(seedB, key): everything the sketch derives from a key comes from
// them.
type keyHash struct{ a, b uint64 }

func hashKey(k *Key) keyHash {
	w := words(k)
	return keyHash{hashWords(seedA, &w), hashWords(seedB, &w)}
}

// derived is g(i) = fmix64(a + i·b), the i-th value derived from the two
// hashes (i ≥ 1). The finalizer is what keeps a flow's cells, and a flow's
// count-min columns, as good as independent: a + i·b reduced as it is
// would put a flow's K cells on a line fixed by two numbers, and two flows
// sharing one cell pair would share all K (the package documentation
// counts what that does to decoding).
func (h keyHash) derived(i int) uint64 { return fmix64(h.a + uint64(i)*h.b) }

// reduce maps a hash to [0, n), 1 ≤ n ≤ 2^32, by multiply-shift (Lemire,
// 2019): the high half of the hash times n, divided by 2^32. A multiply
// where % would be a division, the datapath's dearest instruction.
func reduce(h uint64, n int) int { return int((h >> 32) * uint64(n) >> 32) }

// Which derived value each use takes: g(1..K) the cells, g(K+1..) the
// count-min rows.
const (
	deriveCell = 1
	deriveRow  = 1 + K
)

// cells returns the flow's cell in each subrange of a flow set whose
// subranges hold sub cells each.
func (h keyHash) cells(sub int) [K]int {
	var idx [K]int
	for j := range K {
		idx[j] = j*sub + reduce(h.derived(deriveCell+j), sub)
	}
	return idx
}

// column returns the flow's counter in count-min row r of width w.
func (h keyHash) column(r, width int) int {
	return reduce(h.derived(deriveRow+r), width)
}

// probes returns the flow filter's first probe and the step between probes,
// in a filter of m bits: pos in 0..m-1, step in 1..m-1.
func (h keyHash) probes(m int) (pos, step int) {
	return reduce(h.a, m), 1 + reduce(h.b, m-1)
}

// check is what each packet of a flow adds to its cells' Check: the low half
// of a, which none of the reductions reads.
func (h keyHash) check() uint32 { return uint32(h.a) }
