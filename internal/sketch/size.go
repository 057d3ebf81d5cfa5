package sketch

import (
	"errors"
	"fmt"
	"math"
)

// K is the number of cells a flow occupies in a flow set, one per subrange.
// Three maximises the load at which peeling still succeeds (about 0.818 flows
// per cell; 0.772 for four, 0.702 for five).
const K = 3

// MaxRows bounds the rows of a count-min sketch: the datapath's insert is
// unrolled over that many (SKETCH_MAX_ROWS).
const MaxRows = 8

// loadReliable is the number of flows per cell at which a flow set still
// decodes reliably; see the package documentation for the measurements.
const loadReliable = 0.75

// filterFPR is the flow filter's false-positive rate when the flow set holds
// its capacity.
const filterFPR = 0.001

// FlowSetParams sizes one CPU's flow set and flow filter.
type FlowSetParams struct {
	Cells        int // cells of the flow set, a multiple of K: Cells/K per subrange
	FilterBits   int // bits of the flow filter, a prime
	FilterHashes int // bits a flow sets in the flow filter
}

// CountMinParams sizes one CPU's count-min sketch.
type CountMinParams struct {
	Rows  int // d: independent rows, 1..MaxRows
	Width int // w: counters per row
}

// Params sizes one CPU's sketch.
type Params struct {
	FlowSet  FlowSetParams
	CountMin CountMinParams
	// Cache is the number of entries of the flow cache in front of the
	// sketch (package documentation, "The flow cache"); 0: none, every
	// packet is inserted as it comes.
	Cache int
}

// Validate says what is wrong with p, if anything.
func (p FlowSetParams) Validate() error {
	switch {
	case p.Cells < K || p.Cells%K != 0:
		return fmt.Errorf("flow set: %d cells, want a positive multiple of %d", p.Cells, K)
	case p.Cells/K > math.MaxUint32:
		return fmt.Errorf("flow set: %d cells per subrange, want at most 2^32-1", p.Cells/K)
	case p.FilterBits < 2 || p.FilterBits > math.MaxUint32:
		return fmt.Errorf("flow set: %d filter bits, want 2..2^32-1", p.FilterBits)
	case p.FilterHashes < 1 || p.FilterHashes > p.FilterBits:
		return fmt.Errorf("flow set: %d filter hashes, want 1..%d", p.FilterHashes, p.FilterBits)
	}
	return nil
}

// Validate says what is wrong with p, if anything.
func (p CountMinParams) Validate() error {
	switch {
	case p.Rows < 1 || p.Rows > MaxRows:
		return fmt.Errorf("count-min: %d rows, want 1..%d", p.Rows, MaxRows)
	case p.Width < 1 || p.Width > math.MaxUint32:
		return fmt.Errorf("count-min: width %d, want 1..2^32-1", p.Width)
	}
	return nil
}

// Validate says what is wrong with p, if anything.
func (p Params) Validate() error {
	var cache error
	if p.Cache < 0 || p.Cache > math.MaxUint32 || p.Cache%CacheWays != 0 {
		cache = fmt.Errorf("flow cache: %d entries, want a multiple of %d in 0..2^32-1", p.Cache, CacheWays)
	}
	return errors.Join(p.FlowSet.Validate(), p.CountMin.Validate(), cache)
}

// TableBytes is the size of one CPU's flow set.
func (p FlowSetParams) TableBytes() int { return p.Cells * CellSize }

// FilterBytes is the size of one CPU's flow filter: whole 64-bit words.
func (p FlowSetParams) FilterBytes() int { return (p.FilterBits + 63) / 64 * 8 }

// Bytes is the memory one CPU's flow set and flow filter take.
func (p FlowSetParams) Bytes() int { return p.TableBytes() + p.FilterBytes() }

// Bytes is the memory one CPU's count-min sketch takes.
func (p CountMinParams) Bytes() int { return p.Rows * p.Width * CounterSize }

// CacheBytes is the memory one CPU's flow cache takes: an entry is a cell.
func (p Params) CacheBytes() int { return p.Cache * CellSize }

// Bytes is the memory one CPU's sketch takes, its flow cache included.
func (p Params) Bytes() int { return p.FlowSet.Bytes() + p.CountMin.Bytes() + p.CacheBytes() }

// Capacity is the number of flows one CPU's flow set decodes reliably: the
// measured load (package documentation) times the cells.
func (p FlowSetParams) Capacity() int { return capacity(p.Cells) }

func capacity(cells int) int { return int(loadReliable * float64(cells)) }

// FilterFPR is the flow filter's false-positive rate once it holds n flows:
// the probability that a new flow finds all of its bits already set.
func (p FlowSetParams) FilterFPR(n int) float64 {
	kf, m := float64(p.FilterHashes), float64(p.FilterBits)
	return math.Pow(-math.Expm1(-kf*float64(n)/m), kf)
}

// flowSetFor returns the flow set of sub cells per subrange, its filter sized
// for filterFPR at its capacity: m = n·ln(1/p)/ln²2 bits rounded up to a
// prime (so that every probe step visits distinct bits), kf = m/n·ln 2.
func flowSetFor(sub int) FlowSetParams {
	cells := K * sub
	n := max(capacity(cells), 1)
	bits := nextPrime(max(int(math.Ceil(float64(n)*math.Log(1/filterFPR)/(math.Ln2*math.Ln2))), 2))
	kf := max(int(math.Round(float64(bits)/float64(n)*math.Ln2)), 1)
	return FlowSetParams{Cells: cells, FilterBits: bits, FilterHashes: kf}
}

// minSub is the smallest subrange SizeFlowSet builds: below it, two flows
// sharing all three cells (probability about n²/2s³) makes decoding fail too
// often for the capacity to mean anything.
const minSub = 1024

// SizeFlowSet returns the largest flow set (with its flow filter) that fits
// in budget bytes per CPU.
func SizeFlowSet(budget int) (FlowSetParams, error) {
	if flowSetFor(minSub).Bytes() > budget {
		return FlowSetParams{}, fmt.Errorf("flow set: budget %d bytes below the smallest flow set (%d bytes)", budget, flowSetFor(minSub).Bytes())
	}
	// Bytes grows with sub: search for the last sub that fits.
	lo, hi := minSub, max(budget/(K*CellSize), minSub)
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if flowSetFor(mid).Bytes() <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return flowSetFor(lo), nil
}

// SizeCountMin returns the widest count-min sketch of the given rows that
// fits in budget bytes per CPU.
func SizeCountMin(budget, rows int) (CountMinParams, error) {
	p := CountMinParams{Rows: rows, Width: budget / (max(rows, 1) * CounterSize)}
	if err := p.Validate(); err != nil {
		return CountMinParams{}, fmt.Errorf("budget %d bytes: %w", budget, err)
	}
	return p, nil
}

// DefaultRows is the count-min depth Size picks: the estimate is within its
// bound with probability 1-e^-4 ≈ 98.2 %.
const DefaultRows = 4

// MaxCache is the most entries Size gives the flow cache: 1.4 MiB a CPU. On
// a trace of 25 500 flows of Zipf sizes (exponent 1.1), 16 384 entries in
// sets of two hold the flow of 93 % of the packets, 4 096 of 84 %
// (simulated with the cache's policy; bench/RESULTS.md, section 11, has
// what it saves).
const MaxCache = 16384

// CacheWays is the number of entries of a flow cache set.
const CacheWays = 2

// Size splits a per-CPU budget: a sixteenth, up to MaxCache entries, to the
// flow cache, a sixteenth to a count-min sketch of DefaultRows rows, the
// rest to the flow set. A flow costs the flow set about 119 bytes, so the
// flow set needs the memory. The count-min sketch estimates the flows that
// do not decode, the heavy ones above all, which the flow cache now keeps
// exact: a sixteenth of 16 MiB still gives it rows of 16384 counters, an
// error bound of e/16384 = 0.017 % of the traffic counted.
func Size(budget int) (Params, error) {
	cache := min(budget/16/CellSize, MaxCache) / CacheWays * CacheWays
	cm, err := SizeCountMin(budget/16, DefaultRows)
	if err != nil {
		return Params{}, err
	}
	fs, err := SizeFlowSet(budget - cm.Bytes() - cache*CellSize)
	if err != nil {
		return Params{}, err
	}
	return Params{FlowSet: fs, CountMin: cm, Cache: cache}, nil
}

// nextPrime returns the smallest prime at least n (n ≥ 2).
func nextPrime(n int) int {
	for ; ; n++ {
		if isPrime(n) {
			return n
		}
	}
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
