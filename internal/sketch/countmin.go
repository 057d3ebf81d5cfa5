package sketch

import (
	"fmt"
	"math"
)

// CountMin reads the count-min sketches of all CPUs.
type CountMin struct {
	p      CountMinParams
	tables [][]byte
	total  Counts
}

// NewCountMin reads per-CPU count-min sketches: tables[cpu] holds Rows × Width
// × CounterSize bytes. The tables are read in place, not copied.
func NewCountMin(p CountMinParams, tables [][]byte) (*CountMin, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	c := &CountMin{p: p, tables: tables}
	for cpu, t := range tables {
		if err := checkLen(fmt.Sprintf("count-min, cpu %d", cpu), t, p.Rows*p.Width, CounterSize); err != nil {
			return nil, err
		}
		// Every packet added to one counter of each row: row 0's sum is the
		// CPU's exact total.
		for i := range p.Width {
			c.total.Packets += byteOrder.Uint64(t[i*CounterSize:])
			c.total.Bytes += byteOrder.Uint64(t[i*CounterSize+8:])
		}
	}
	return c, nil
}

// Total returns the packets and bytes counted on all CPUs, exactly.
func (c *CountMin) Total() Counts { return c.total }

// Estimate returns the flow's packets and bytes, never less than the truth,
// and bounds on how much more: with probability at least confidence
// (1-e^-Rows), the overestimate is at most maxErrPackets (e/Width of all
// packets counted) and maxErrBytes (the same of bytes).
//
// Each CPU's estimate is its least counter over the rows; the CPUs' estimates
// are summed. Every row hashes alike on all CPUs, so for any row r the sum is
// at most the sum over CPUs of row r's counters, which is row r of the merged
// sketch: the single-sketch bound holds with N the total over all CPUs.
func (c *CountMin) Estimate(k *Key) (packets, bytes, maxErrPackets, maxErrBytes uint64, confidence float64) {
	var cols [MaxRows]int
	h := hashKey(k)
	for r := range c.p.Rows {
		cols[r] = (r*c.p.Width + h.column(r, c.p.Width)) * CounterSize
	}
	for _, t := range c.tables {
		mp, mb := ^uint64(0), ^uint64(0)
		for _, off := range cols[:c.p.Rows] {
			mp = min(mp, byteOrder.Uint64(t[off:]))
			mb = min(mb, byteOrder.Uint64(t[off+8:]))
		}
		packets += mp
		bytes += mb
	}
	return packets, bytes, c.errBound(c.total.Packets), c.errBound(c.total.Bytes), c.Confidence()
}

// Confidence is the probability that an estimate is within its bound.
func (c *CountMin) Confidence() float64 { return -math.Expm1(-float64(c.p.Rows)) }

// errBound is ε·n, ε = e/w, rounded up: the overestimate is a whole number
// and e irrational, so rounding up never loosens the bound by a whole count.
func (c *CountMin) errBound(n uint64) uint64 {
	b := math.Ceil(math.E * float64(n) / float64(c.p.Width))
	if b >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(b)
}
