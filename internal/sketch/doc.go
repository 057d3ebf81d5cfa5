// Package sketch is the userspace half of the datapath's sketch mode: when
// the exact per-flow table is full, new flows spill into fixed-size per-CPU
// sketches instead of being lost. This package defines their memory layout
// and hashing bit for bit, decodes them, sizes them from a byte budget, and
// holds a Go copy of the datapath's insert (Encoder) to build them in tests.
// It needs no BPF and no privileges.
//
// Each CPU has three structures, all written by that CPU only, so the
// datapath needs no atomics:
//
//   - a flow set: an invertible Bloom lookup table in the manner of FlowRadar
//     (Li et al., NSDI 2016; the IBLT of Goodrich and Mitzenmacher, 2011),
//     from which every flow's key, packets and bytes are recovered exactly
//     while the table holds fewer flows than its capacity;
//   - a flow filter: a Bloom filter that says whether the flow set already
//     holds a flow's key;
//   - a count-min sketch (Cormode and Muthukrishnan, 2005) that estimates any
//     flow's packets and bytes, so heavy hitters are still known when the
//     flow set is over capacity and does not decode.
//
// # Memory layout
//
// All integers are in the host's byte order, which is little-endian: the
// datapath is built for bpfel only.
//
// The flow set is Cells records of struct sketch_cell (88 bytes; type Cell):
//
//	struct sketch_cell {
//		__u8  key_xor[64]; // XOR of the keys of the cell's flows
//		__u32 flow_count;  // number of flows in the cell
//		__u32 check;       // Σ over the cell's packets of their flow's check term, mod 2^32
//		__u64 packets;
//		__u64 bytes;
//	};
//
// A key is the 60-byte struct flow_key followed by 4 zero bytes (type Key).
// The cells form K = 3 subranges of S = Cells/3 cells; subrange j is cells
// j·S to (j+1)·S-1, and a flow has one cell in each (a partitioned IBLT: a
// flow never hits a cell twice, so flow_count is its number of flows).
//
// The flow filter is FilterBits bits in ⌈FilterBits/64⌉ 64-bit words; bit b
// is bit b%64 of word b/64.
//
// The count-min sketch is Rows × Width pairs of (packets __u64, bytes __u64),
// row-major: row r, column c at byte (r·Width + c)·16.
//
// # The hash
//
// One full hash function, H(seed, key), over the key read as eight
// little-endian 64-bit words w0..w7, all arithmetic mod 2^64:
//
//	h = seed
//	for i in 0..7: h ^= w[i]; h *= 0x9E3779B97F4A7C15; h ^= h >> 29
//	H = fmix64(h)
//
//	fmix64(h): h ^= h >> 33; h *= 0xFF51AFD7ED558CCD; h ^= h >> 33; h *= 0xC4CEB9FE1A85EC53; h ^= h >> 33
//
// fmix64 is MurmurHash3's 64-bit finalizer, added to the loop the design
// proposed: without it one multiply stands between the last word and the
// output, and flipping one bit of a realistic key flips a given output bit
// with probability 0.5 ± 0.10 on average (a top bit of the last word flips
// exactly two output bits); with it, 0.5 ± 0.003 (TestHashAvalanche).
//
// A key is hashed twice, the seeds the first two outputs of SplitMix64 from
// state 0:
//
//	a = H(0xE220A8397B1DCDAF, key)
//	b = H(0x6E789E6AA1B965F4, key)
//
// and every other value comes from a and b through the finalizer alone:
//
//	g(i) = fmix64(a + i·b), i ≥ 1
//
// A value is brought into [0, n), 1 ≤ n ≤ 2^32, by multiply-shift (Lemire,
// "Fast random integer generation in an interval", 2019), which reads the
// high half of the hash:
//
//	reduce(h, n) = ((h >> 32) · n) >> 32
//
// The values derived from a key are:
//
//	cell in subrange j   j·S + reduce(g(1+j), S), j = 0..K-1
//	count-min column     reduce(g(1+K+r), Width) in row r, r = 0..Rows-1
//	filter probes        m = FilterBits: p0 = reduce(a, m), step = 1 + reduce(b, m-1),
//	                     p(i+1) = p(i) + step, minus m if ≥ m; i = 0..FilterHashes-1
//	check term           (__u32)a, the low half of a, which no reduction reads
//
// The filter uses double hashing (Kirsch and Mitzenmacher, 2006: the same
// false-positive rate as independent hashes, TestFilterFPR); m is prime, so
// the probes are distinct bits.
//
// Why two full hashes and finalizers: a full hash is a chain of ten
// dependent multiplies over the whole key, and a full hash per value (2 for
// the filter, 3 for the cells, 4 for the rows, the layout before this one)
// was most of a spilled packet's cost. Now a packet costs two full hashes
// and K + Rows finalizers of two multiplies each, independent of one
// another, so the CPU overlaps them.
//
// Why not plain double hashing for the cells and rows, a + i·b mod S with
// no finalizer: a flow's K cells would lie on a line fixed by a and b
// modulo S, so two flows sharing two cells would share all three, and two
// flows would share all their cells with probability 1/S² instead of 1/S³.
// Two such flows never peel. At capacity (n = 0.75·3S flows) a table would
// hold n²/2S² ≈ 2.5 such pairs whatever its size, so that about e^-2.5, one
// full table in twelve, would decode completely; with independent cells it
// is n²/2S³ pairs, 0.0025 for the smallest table and 4.6·10^-5 for the
// 16 MiB one below (TestCellsShared counts them in 50 tables of 1024 cells
// a subrange: none, and 123 for plain double hashing). Likewise the
// count-min bound multiplies the rows' probabilities of failing, which
// holds only if a flow's columns are independent across rows: on a line,
// two flows colliding in two rows would collide in all. The g(i) are the
// finalizer of distinct inputs (a + i·b ≠ a + i'·b unless b is one of a few
// of 2^64 values), and fmix64's avalanche makes them behave as
// independent: over realistic keys the joint values of a flow's three
// cells (in subranges of 7 and of 8 cells) and of its four count-min
// columns spread evenly over all the combinations by a chi-square test,
// which plain double hashing fails a hundredfold (TestDerivedIndependence);
// and the decoding threshold below is that of independent cells. This is a
// heuristic, as H itself is: neither is a family of provably independent
// functions.
//
// Why multiply-shift and not %: a division by a number the compiler cannot
// see costs ten to twenty cycles where a multiply costs three, and a packet
// takes K + Rows + 2 of them. The result is off uniform by at most n/2^32
// (a 2-million-bit filter: 0.05 %), nothing against the sketch's own
// errors.
//
// TestHashGolden, TestIndexesGolden and TestEncodeGolden hold values for
// three keys, computed by testdata/reference.py, an implementation written
// from this text alone; the datapath's tests compare its tables with
// Encoder's byte for byte.
//
// # The insert, per packet of len bytes
//
//	a, b = the key's two hashes
//	seen = every filter probe's bit already set; set every probe's bit
//	for each of the flow's K cells:
//		if !seen: key_xor ^= key; flow_count += 1
//		check += (__u32)a; packets += 1; bytes += len
//	for each row r: pair at column c(r): packets += 1; bytes += len
//
// # The flow cache
//
// In front of each CPU's sketch the datapath keeps a flow cache of Cache
// entries (Params.Cache; none if 0), in sets of CacheWays picked by the
// hash of the datapath's flow tables (not the one above: that one is
// computed anyway to look up the table). An entry is a cell record
// (CellSize bytes) holding a flow's 60-byte key in key_xor, the entry's tag
// in key_xor's last 4 bytes (0: a free entry), and the packets and bytes the
// flow spilled since it took the entry; flow_count and check are 0. A
// spilled packet whose flow holds an entry of its set adds to it; any other
// takes the entry of its set with fewer packets, and the flow that held it
// is inserted first, all its packets at once (AddN).
//
// An entry thus holds, exactly, the packets its flow spilled since it took
// the entry, and the flow set holds the rest of that flow's. Decoding takes
// the entries as they are (TakeCache) and adds their counts to what the
// flow set gives for the same keys (DecodeCached); it counts them in the
// count-min sketch, which then holds every spilled packet. A flow the cache
// held all interval takes none of the flow set's capacity, in 88 bytes
// where the flow set needs about 119, and no filter false positive can
// fall on it. FoldCache inserts the entries instead: the sketch is then
// what it would have been had every packet been inserted as it came (the
// insert's sums commute), but for which of two new flows a filter false
// positive falls on, which depends on the order of the inserts.
//
// What it saves: on traffic whose packets belong mostly to a few flows (any
// real link), a spilled packet costs a hash, a set of two entries and two
// adds, where the insert reads FilterHashes filter words, K cells and Rows
// count-min pairs.
//
// # Decoding
//
// CPUs decode separately and merge by key (a flow seen on two CPUs is in
// both tables). DecodeCPU peels in two phases.
//
// Keys: a cell with flow_count 1 whose key_xor hashes back to it holds one
// flow; the key is removed from its K cells (key_xor ^= key, flow_count -= 1),
// which may leave other cells with one flow; repeat until none. Only new
// flows write key_xor and flow_count, so this phase is exact whatever else
// happened.
//
// Counts: with the keys known, so is which flows each cell holds. A flow's
// packets and bytes are read from a cell where it is the one flow whose
// counts are still unknown (the others subtracted) and no undecoded key
// remains, and only if check == packets·(its check term) mod 2^32; then they
// are subtracted from its K cells, check included.
//
// The check is there because of the flow filter's false positives: a new
// flow the filter wrongly believes inserted adds packets and bytes to its K
// cells but no key (a "phantom"). A decoder trusting flow_count alone gives
// a phantom's packets to whichever flow it reads from a shared cell, and
// subtracts them from that flow's other cells. The check detects a phantom's
// traffic in a cell unless p·(g' - g) ≡ 0 mod 2^32 (p its packets, g' and g
// the two flows' check terms), which happens with probability 2^(t-32), t
// the trailing zero bits of p: at most 2^-27 below 64 packets, about 2^-28
// on average over p. The check lives where struct sketch_cell would have held
// 4 bytes of padding, so the cell stays 88 bytes.
//
// The result (Result):
//
//   - Flows: exact packets and bytes;
//   - Unverified: key decoded, but phantom traffic (or flows themselves
//     unverified or undecoded) sat in every cell the flow could be read
//     from; packets and bytes are upper bounds (one flow in
//     45,000 when the filter is run at fifty times its sized false-positive
//     rate, TestDecodeFalsePositives);
//   - Undecoded: flows whose key stayed in the table;
//   - Residual: packets and bytes in the table beyond Flows. Every packet
//     added to exactly one cell of each subrange, and every decoded flow is
//     subtracted from one cell of each, so the sum over any one subrange is
//     the exact residual (no division by K); the K sums must agree, and the
//     decoder returns ErrInconsistent when they do not (a table read while
//     being written, for one).
//   - Contaminated: cells left with traffic and no flow.
//
// Decode then recovers phantoms of known keys: a flow whose key one CPU
// decoded but another CPU's filter took for seen (its packets on that CPU in
// its cells without its key) is given its counts from a cell of that CPU
// holding no key and no flow of unknown counts whose check verifies them as
// that flow's alone, and subtracted from its other cells (recoverPhantoms).
//
// Decoding is complete when nothing is Undecoded or Unverified; the Residual
// is then exactly the phantoms' traffic, which Unattributed returns.
//
// # Capacity, measured
//
// A flow set of one-packet flows with distinct realistic keys (IPv4-mapped
// addresses, ephemeral ports), decoded (TestMeasureThreshold, run with
// -sketch.measure; fixed seeds):
//
//	flows per cell       0.70   0.75   0.78   0.80   0.81   0.82   0.83   0.85   0.90
//	  3,072 cells (2000) 99.9%  99.8%  99.8%  94.8%  69.2%  27.0%   3.0%     0%     0%
//	 49,152 cells  (200)  100%   100%   100%   100%   100%  14.0%     0%     0%     0%
//	186,000 cells  (100)  100%   100%   100%   100%   100%   5.0%     0%     0%     0%
//
// The threshold is the theory's 0.818 flows per cell for K = 3 (1.22 cells a
// flow), sharper as tables grow. Small tables fail now and then well below
// it, when two or more flows share all their cells (about n²/2S³ for two):
// hence SizeFlowSet's floor of 1024 cells per subrange. Past the threshold
// the peeling collapses: at 0.9 flows per cell about a third of the flows
// decode (TestDecodeOverCapacity). Capacity is 0.75 flows per cell.
//
// The table above is from the derived cells of "The hash"; with a full
// hash per cell (the layout before) every entry was within a point of it
// but one, past the threshold (3.0 % at 0.82 for 186,000 cells, out of 100
// trials): deriving the cells moved nothing measurable.
//
// # Sizing
//
// SizeFlowSet fills a per-CPU budget with the most cells (a multiple of 3)
// whose flow filter, sized for a false-positive rate of 0.1 % at capacity
// n, also fits: m = n·ln(1000)/ln²2 ≈ 14.4 bits a flow, rounded up to a
// prime, and FilterHashes = m/n·ln 2 = 10. A flow costs about 119 bytes.
// Measured at capacity: 0.095 % on 100,000 fresh keys (TestFilterFPR, a
// 1 MiB budget), 0.097 % on 10^6 for 16 MiB. The rate grows with the
// filter's fill, so a table filled to capacity holds far fewer phantoms: 13
// among 123,225 flows (0.011 %) for 16 MiB. SizeCountMin gives the
// count-min sketch its rows and the widest rows the budget allows; Size
// splits a budget, a sixteenth (up to MaxCache entries) to the flow cache and
// a sixteenth to the count-min sketch. 16 MiB per CPU: 164,301 cells
// (123,225 flows), a 1,771,687-bit filter, a count-min sketch of 4 × 16,384
// and a flow cache of 11,914 entries.
//
// # Count-min
//
// A CPU's estimate is its least counter over the rows, and the estimate is
// the sum over CPUs. It is never below the truth. Over it by more than ε·N,
// ε = e/Width and N all packets (or bytes) on all CPUs, has probability at
// most δ = e^-Rows: the rows hash alike on every CPU, so the sum over CPUs of
// the minima is at most, for any row, that row's counter summed over CPUs,
// which is a single sketch of the merged traffic with the classic bound.
// That bound takes each row's hash as pairwise independent over keys and
// the rows as independent of one another (δ is the product of the rows'
// chances of failing); the columns are the derived values g(1+K+r), which
// behave so ("The hash": why a finalizer and not plain double hashing).
// Estimate returns both bounds and 1-δ.
package sketch
