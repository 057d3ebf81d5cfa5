package sketch

import "encoding/binary"

// KeySize is the size of a flow key as the sketch hashes and stores it: the
// datapath's 60-byte struct flow_key followed by 4 zero bytes, so that it is
// a whole number of 64-bit words.
const KeySize = 64

// Key is a flow key. The package treats it as opaque bytes; only the datapath
// and internal/flow know its fields.
type Key [KeySize]byte

// hashMul is 2^64 divided by the golden ratio, odd: the multiplier of
// Fibonacci hashing, which spreads a word's low bits into its high bits.
const hashMul = 0x9E3779B97F4A7C15

// Hash is the one hash function of the sketch, shared bit for bit with the
// datapath: see the package documentation for its definition and why it has
// a finalizer.
func Hash(seed uint64, k *Key) uint64 {
	w := words(k)
	return hashWords(seed, &w)
}

// words reads a key as the eight little-endian words Hash mixes, once for
// all the hashes of a packet.
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
	// MurmurHash3's fmix64: the loop leaves the last word's high bits
	// reaching only a few output bits through a single multiply.
	h ^= h >> 33
	h *= 0xFF51AFD7ED558CCD
	h ^= h >> 33
	h *= 0xC4CEB9FE1A85EC53
	h ^= h >> 33
	return h
}

// seeds are the seeds of Hash, one per use, fixed forever: the datapath
// holds the same table. They are the first outputs of SplitMix64 started at
// 0, numbers with no structure in common with hashMul or with each other.
var seeds = [...]uint64{
	0xE220A8397B1DCDAF, // cell index, subrange 0
	0x6E789E6AA1B965F4, // cell index, subrange 1
	0x06C45D188009454F, // cell index, subrange 2
	0xF88BB8A8724C81EC, // flow filter, first probe and check term
	0x1B39896A51A8749B, // flow filter, probe step
	0x53CB9F0C747EA2EA, // count-min row 0
	0x2C829ABE1F4532E1, // count-min row 1
	0xC584133AC916AB3C, // count-min row 2
	0x3EE5789041C98AC3, // count-min row 3
	0xF3B8488C368CB0A6, // count-min row 4
	0x657EECDD3CB13D09, // count-min row 5
	0xC2D326E0055BDEF6, // count-min row 6
	0x8621A03FE0BBDB7B, // count-min row 7
}

const (
	seedCell    = 0
	seedFilterA = K
	seedFilterB = K + 1
	seedRow     = K + 2
)

// cells returns the flow's cell in each subrange of a flow set whose
// subranges hold sub cells each.
func cells(k *Key, sub int) [K]int {
	w := words(k)
	return cellsWords(&w, sub)
}

func cellsWords(w *[KeySize / 8]uint64, sub int) [K]int {
	var idx [K]int
	for j := range K {
		idx[j] = j*sub + int(hashWords(seeds[seedCell+j], w)%uint64(sub))
	}
	return idx
}

// filterHashes returns the two hashes the flow filter's probes come from.
func filterHashes(k *Key) (a, b uint64) {
	w := words(k)
	return filterWords(&w)
}

func filterWords(w *[KeySize / 8]uint64) (a, b uint64) {
	return hashWords(seeds[seedFilterA], w), hashWords(seeds[seedFilterB], w)
}

// checkTerm is what each packet of a flow adds to its cells' Check: the
// high half of the filter's first hash, which the datapath has already
// computed for the packet.
func checkTerm(filterA uint64) uint32 { return uint32(filterA >> 32) }

// column returns the flow's counter in count-min row r of width w.
func column(k *Key, r, width int) int {
	w := words(k)
	return columnWords(&w, r, width)
}

func columnWords(w *[KeySize / 8]uint64, r, width int) int {
	return int(hashWords(seeds[seedRow+r], w) % uint64(width))
}
