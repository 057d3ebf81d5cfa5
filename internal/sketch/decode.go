package sketch

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
)

// ErrInconsistent is returned for a flow set no sequence of inserts can
// produce: read while the datapath was writing it, or not written by the
// datapath's insert.
var ErrInconsistent = errors.New("flow set inconsistent")

// Flow is one decoded flow.
type Flow struct {
	Key     Key
	Packets uint64
	Bytes   uint64
}

// Counts are packets and bytes.
type Counts struct {
	Packets uint64
	Bytes   uint64
}

// Result is what a flow set tells. Every packet the sketch counted is either
// in Flows or in Residual; Residual is an exact total, not an estimate.
type Result struct {
	// Flows decoded with exact packets and bytes: read from a cell whose
	// checksum proved it held that flow's traffic and nothing else.
	Flows []Flow
	// Unverified flows: the key decoded, but every cell the flow's traffic
	// could be read from also held traffic recorded under no key, or of
	// flows whose counts are unknown. Packets and Bytes are upper bounds
	// (the least of its cells' remainders).
	Unverified []Flow
	// Undecoded is the number of flows whose key is still in the table:
	// decoding stopped with no pure cell left (the table was over capacity).
	Undecoded uint64
	// Residual is the traffic the table holds beyond Flows: that of
	// Undecoded and Unverified flows, and traffic recorded under no key.
	Residual Counts
	// Contaminated counts the cells left holding traffic once every flow in
	// them was subtracted: traffic recorded under no key, K cells for each
	// flow-filter false positive (fewer if two share a cell).
	Contaminated int
}

// Complete reports whether every flow decoded with exact counts. The
// Residual is then exactly the traffic recorded under no key.
func (r *Result) Complete() bool { return r.Undecoded == 0 && len(r.Unverified) == 0 }

// Unattributed returns the traffic the sketch counted under no key: packets
// of new flows the flow filter wrongly believed inserted. It is known only
// when decoding is complete; otherwise it is mixed into the Residual with
// the traffic of the flows that did not decode.
func (r *Result) Unattributed() (Counts, bool) {
	if !r.Complete() {
		return Counts{}, false
	}
	return r.Residual, true
}

// Decode decodes each CPU's flow set (tables[cpu], Cells × CellSize bytes)
// and merges the results by key: a flow seen on several CPUs has the sum of
// its counts, exact only if it decoded exactly on every CPU that saw it (a
// CPU on which its key did not decode keeps its traffic in the Residual).
// The CPUs decode in parallel.
func Decode(p FlowSetParams, tables [][]byte) (Result, error) {
	return DecodeFiltered(p, tables, nil)
}

// DecodeFiltered is Decode with each CPU's flow filter (filters[cpu], or
// nil): a flow decoded on some CPUs whose key another CPU's filter holds,
// where that CPU did not decode completely, may have packets there under no
// key (the filter, overloaded, took it for seen) or none (the filter's
// false positive): its counts are then not known, and it is Unverified with
// no upper bound (^0), for an estimate to take over.
func DecodeFiltered(p FlowSetParams, tables, filters [][]byte) (Result, error) {
	return DecodeCached(p, tables, filters, nil)
}

// DecodeCached is DecodeFiltered with, per CPU, the flows TakeCache took
// from that CPU's flow cache (cached[cpu], or nil): exact counts, added to
// what the flow sets decode for the same keys. A cached flow whose key a
// CPU's filter holds, on a CPU that neither decoded it nor decoded
// completely, may have more packets in that CPU's residual: it is
// Unverified without a bound, as a flow decoded on another CPU would be.
// Cached keys help recover phantoms (recoverPhantoms) on every CPU.
func DecodeCached(p FlowSetParams, tables, filters [][]byte, cached [][]Flow) (Result, error) {
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	if cached != nil && len(cached) != len(tables) {
		return Result{}, fmt.Errorf("%d flow caches for %d flow sets", len(cached), len(tables))
	}
	results := make([]Result, len(tables))
	rests := make([]*residual, len(tables))
	errs := make([]error, len(tables))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for cpu, t := range tables {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[cpu], rests[cpu], errs[cpu] = decodeCPU(p, t)
			if errs[cpu] != nil {
				errs[cpu] = fmt.Errorf("cpu %d: %w", cpu, errs[cpu])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	all := results
	if cached != nil {
		// The caches as one more result, with nothing left to decode:
		// their keys are known to recoverPhantoms on every CPU, and
		// Merge adds their counts to the flow sets'.
		var c Result
		for _, fs := range cached {
			c.Flows = append(c.Flows, fs...)
		}
		all = append(results[:len(results):len(results)], c)
		rests = append(rests, nil)
	}
	recoverPhantoms(all, rests)
	results = all[:len(results)] // as recoverPhantoms left them
	merged := Merge(all...)
	if filters != nil {
		if err := unsure(p, &merged, results, filters); err != nil {
			return Result{}, err
		}
	}
	return merged, nil
}

// unsure moves to Unverified, without a bound, the decoded flows that an
// incompletely decoded CPU's filter holds but that CPU did not decode.
func unsure(p FlowSetParams, merged *Result, results []Result, filters [][]byte) error {
	if len(filters) != len(results) {
		return fmt.Errorf("%d flow filters for %d flow sets", len(filters), len(results))
	}
	doubt := make(map[int]map[Key]struct{})
	for cpu, r := range results {
		if r.Residual == (Counts{}) || filters[cpu] == nil {
			continue
		}
		keys := make(map[Key]struct{}, len(r.Flows)+len(r.Unverified))
		for _, fl := range r.Flows {
			keys[fl.Key] = struct{}{}
		}
		for _, fl := range r.Unverified {
			keys[fl.Key] = struct{}{}
		}
		doubt[cpu] = keys
	}
	if len(doubt) == 0 {
		return nil
	}
	f, err := NewFilter(p, filters)
	if err != nil {
		return err
	}
	kept := merged.Flows[:0]
	for _, fl := range merged.Flows {
		if f.doubted(&fl.Key, doubt) {
			merged.Unverified = append(merged.Unverified, Flow{Key: fl.Key, Packets: ^uint64(0), Bytes: ^uint64(0)})
			continue
		}
		kept = append(kept, fl)
	}
	merged.Flows = kept
	sortFlows(merged.Unverified)
	return nil
}

// Merge sums per-CPU results by key. A key exact on every CPU stays exact;
// one unverified on any CPU is unverified, its counts an upper bound.
func Merge(results ...Result) Result {
	type acc struct {
		c     Counts
		exact bool
	}
	flows := make(map[Key]*acc)
	add := func(f Flow, exact bool) {
		a := flows[f.Key]
		if a == nil {
			a = &acc{exact: true}
			flows[f.Key] = a
		}
		a.c.Packets += f.Packets
		a.c.Bytes += f.Bytes
		a.exact = a.exact && exact
	}
	var m Result
	for _, r := range results {
		for _, f := range r.Flows {
			add(f, true)
		}
		for _, f := range r.Unverified {
			add(f, false)
		}
		m.Undecoded += r.Undecoded
		m.Residual.Packets += r.Residual.Packets
		m.Residual.Bytes += r.Residual.Bytes
		m.Contaminated += r.Contaminated
	}
	for k, a := range flows {
		f := Flow{Key: k, Packets: a.c.Packets, Bytes: a.c.Bytes}
		if a.exact {
			m.Flows = append(m.Flows, f)
		} else {
			m.Unverified = append(m.Unverified, f)
		}
	}
	sortFlows(m.Flows)
	sortFlows(m.Unverified)
	return m
}

func sortFlows(fs []Flow) {
	slices.SortFunc(fs, func(a, b Flow) int { return bytes.Compare(a.Key[:], b.Key[:]) })
}

// decoded is a flow whose key the first phase recovered.
type decoded struct {
	key   Key
	cells [K]int
	check uint32 // the flow's check term
	known bool   // its counts were read from a verified cell
	c     Counts
}

// DecodeCPU decodes one CPU's flow set, table holding Cells × CellSize bytes.
// Flows come in the order they decoded (Decode and Merge sort by key).
//
// It peels in two phases. The first recovers the keys from flow_count and
// key_xor alone, which only inserts write, so flow-filter false positives
// cannot disturb it. The second knows which decoded flows each cell holds and
// reads a flow's counts from a cell where it is the only one left once known
// flows are subtracted, and no undecoded key remains, accepting them only if
// the cell's checksum matches; a cell that fails holds traffic recorded under
// no key and is left alone, and the flow waits for another of its cells.
func DecodeCPU(p FlowSetParams, table []byte) (Result, error) {
	res, _, err := decodeCPU(p, table)
	return res, err
}

// residual is what a CPU's flow set holds once decoded: per cell, the keys
// still in it (counts), the decoded flows whose counts are unknown (left),
// and the traffic no decoded flow accounts for.
type residual struct {
	sub    int
	counts []uint32
	left   []uint32
	pk, by []uint64
	chk    []uint32
}

func decodeCPU(p FlowSetParams, table []byte) (Result, *residual, error) {
	if err := p.Validate(); err != nil {
		return Result{}, nil, err
	}
	if err := checkLen("flow set", table, p.Cells, CellSize); err != nil {
		return Result{}, nil, err
	}
	sub := p.Cells / K
	keys := make([]Key, p.Cells)
	counts := make([]uint32, p.Cells)
	var inserted uint64 // flows inserted, from subrange 0: a bound on peeling
	for c := range p.Cells {
		b := table[c*CellSize:]
		copy(keys[c][:], b[offKeyXor:offKeyXor+KeySize])
		counts[c] = byteOrder.Uint32(b[offFlowCount:])
		if c < sub {
			inserted += uint64(counts[c])
		}
	}

	// Phase 1: keys. A cell is pure when it holds one flow and that flow's
	// key, hashed, lands on it (the hash check rejects cells no insert sequence
	// leaves holding one flow).
	flows := make([]decoded, 0, min(inserted, uint64(p.Cells)))
	queue := make([]int, 0, p.Cells)
	for c := range p.Cells {
		if counts[c] == 1 {
			queue = append(queue, c)
		}
	}
	for len(queue) > 0 {
		c := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if counts[c] != 1 {
			continue
		}
		k := keys[c]
		h := hashKey(&k)
		idx := h.cells(sub)
		if idx[c/sub] != c {
			continue
		}
		if uint64(len(flows)) == inserted {
			return Result{}, nil, fmt.Errorf("%w: more flows peel than were inserted (%d)", ErrInconsistent, inserted)
		}
		flows = append(flows, decoded{key: k, cells: idx, check: h.check()})
		for _, d := range idx {
			xorKey(&keys[d], &k)
			counts[d]--
			if counts[d] == 1 {
				queue = append(queue, d)
			}
		}
	}

	// Phase 2: counts.
	pk := make([]uint64, p.Cells)
	by := make([]uint64, p.Cells)
	chk := make([]uint32, p.Cells)
	left := make([]uint32, p.Cells) // decoded flows of the cell whose counts are unknown
	who := make([]uint32, p.Cells)  // XOR of their indexes in flows
	for c := range p.Cells {
		b := table[c*CellSize:]
		pk[c] = byteOrder.Uint64(b[offPackets:])
		by[c] = byteOrder.Uint64(b[offBytes:])
		chk[c] = byteOrder.Uint32(b[offCheck:])
	}
	for i := range flows {
		for _, c := range flows[i].cells {
			left[c]++
			who[c] ^= uint32(i)
		}
	}
	ready := func(c int) bool { return left[c] == 1 && counts[c] == 0 }
	for c := range p.Cells {
		if ready(c) {
			queue = append(queue, c)
		}
	}
	var res Result
	for len(queue) > 0 {
		c := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if !ready(c) {
			continue
		}
		i := who[c]
		f := &flows[i]
		if chk[c] != uint32(pk[c])*f.check {
			// Traffic under no key shares the cell: f waits for another
			// of its cells.
			continue
		}
		f.known = true
		f.c = Counts{Packets: pk[c], Bytes: by[c]}
		for _, d := range f.cells {
			pk[d] -= f.c.Packets
			by[d] -= f.c.Bytes
			chk[d] -= uint32(f.c.Packets) * f.check
			left[d]--
			who[d] ^= i
			if ready(d) {
				queue = append(queue, d)
			}
		}
	}

	for c := range p.Cells {
		if counts[c] == 0 && left[c] == 0 && (pk[c] != 0 || by[c] != 0) {
			res.Contaminated++
		}
	}
	res.Flows = make([]Flow, 0, len(flows))
	for i := range flows {
		f := &flows[i]
		if f.known {
			res.Flows = append(res.Flows, Flow{Key: f.key, Packets: f.c.Packets, Bytes: f.c.Bytes})
			continue
		}
		// What is left in each of its cells is its traffic plus that of
		// other unverified or undecoded flows and of no key: the least is
		// an upper bound.
		u := Flow{Key: f.key, Packets: ^uint64(0), Bytes: ^uint64(0)}
		for _, c := range f.cells {
			u.Packets = min(u.Packets, pk[c])
			u.Bytes = min(u.Bytes, by[c])
		}
		res.Unverified = append(res.Unverified, u)
	}

	// Every packet and every insert added to exactly one cell of each
	// subrange, and every known flow was subtracted from one cell of each:
	// each subrange's sums are the exact residual totals, and must agree.
	for j := range K {
		var n uint64
		var r Counts
		for c := j * sub; c < (j+1)*sub; c++ {
			n += uint64(counts[c])
			r.Packets += pk[c]
			r.Bytes += by[c]
		}
		if j == 0 {
			res.Undecoded, res.Residual = n, r
		} else if n != res.Undecoded || r != res.Residual {
			return Result{}, nil, fmt.Errorf("%w: subrange %d holds %d flows, %d packets, %d bytes; subrange 0 %d, %d, %d",
				ErrInconsistent, j, n, r.Packets, r.Bytes, res.Undecoded, res.Residual.Packets, res.Residual.Bytes)
		}
	}
	if res.Undecoded == 0 {
		for c := range keys {
			if keys[c] != (Key{}) {
				return Result{}, nil, fmt.Errorf("%w: cell %d holds a key and no flow", ErrInconsistent, c)
			}
		}
	}
	return res, &residual{sub: sub, counts: counts, left: left, pk: pk, by: by, chk: chk}, nil
}

// recoverPhantoms gives back the traffic a CPU recorded under no key for a
// flow whose key another CPU decoded. A CPU's flow filter can take a flow it
// never saw for one it did (a false positive): the flow's packets on that
// CPU then go into its cells without its key, and that CPU cannot decode
// them. When the flow's key decoded elsewhere, it is known: on that CPU its
// cells are computed, and a cell holding no key and no flow of unknown
// counts, whose checksum says all of its traffic is that flow's, gives the
// flow's packets and bytes there, exactly, as decoding's second phase reads
// a flow's counts. Repeated until nothing more is recovered.
func recoverPhantoms(results []Result, rests []*residual) {
	if len(results) < 2 {
		return
	}
	known := make(map[Key]struct{})
	for _, r := range results {
		for _, f := range r.Flows {
			known[f.Key] = struct{}{}
		}
		for _, f := range r.Unverified {
			known[f.Key] = struct{}{}
		}
	}
	for cpu, res := range results {
		rest := rests[cpu]
		if rest == nil || (res.Residual == Counts{}) {
			continue
		}
		here := make(map[Key]struct{}, len(res.Flows)+len(res.Unverified))
		for _, f := range res.Flows {
			here[f.Key] = struct{}{}
		}
		for _, f := range res.Unverified {
			here[f.Key] = struct{}{}
		}
		var cands []Key
		for k := range known {
			if _, ok := here[k]; !ok {
				cands = append(cands, k)
			}
		}
		for progress := true; progress && len(cands) > 0; {
			progress = false
			for i := 0; i < len(cands); i++ {
				f, ok := rest.claim(&cands[i])
				if !ok {
					continue
				}
				res.Flows = append(res.Flows, f)
				res.Residual.Packets -= f.Packets
				res.Residual.Bytes -= f.Bytes
				cands[i] = cands[len(cands)-1]
				cands = cands[:len(cands)-1]
				i--
				progress = true
			}
		}
		res.Contaminated = 0
		for c := range rest.pk {
			if rest.counts[c] == 0 && rest.left[c] == 0 && (rest.pk[c] != 0 || rest.by[c] != 0) {
				res.Contaminated++
			}
		}
		results[cpu] = res
	}
}

// claim takes k's traffic out of the residual if one of its cells verifies
// it holds that flow's traffic alone, and every one of its cells holds that
// much with no key or unknown flow in it.
func (r *residual) claim(k *Key) (Flow, bool) {
	h := hashKey(k)
	cells, term := h.cells(r.sub), h.check()
	for _, c := range cells {
		if r.counts[c] != 0 || r.left[c] != 0 || r.pk[c] == 0 {
			return Flow{}, false
		}
	}
	for _, c := range cells {
		if r.chk[c] != uint32(r.pk[c])*term {
			continue
		}
		f := Flow{Key: *k, Packets: r.pk[c], Bytes: r.by[c]}
		for _, d := range cells {
			if r.pk[d] < f.Packets || r.by[d] < f.Bytes {
				return Flow{}, false
			}
		}
		for _, d := range cells {
			r.pk[d] -= f.Packets
			r.by[d] -= f.Bytes
			r.chk[d] -= uint32(f.Packets) * term
		}
		return f, true
	}
	return Flow{}, false
}

// xorKey XORs src into dst a word at a time (the compiler makes each line
// one load, one XOR and one store).
func xorKey(dst, src *Key) {
	for i := 0; i < KeySize; i += 8 {
		byteOrder.PutUint64(dst[i:], byteOrder.Uint64(dst[i:])^byteOrder.Uint64(src[i:]))
	}
}
