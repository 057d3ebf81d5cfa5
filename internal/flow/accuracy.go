package flow

import (
	"fmt"
	"math"
	"math/bits"
)

// Accuracy says how a record's counters were obtained, and so how far they
// can be trusted. The zero value is Exact: every record produced before the
// sketch existed, and every record of the flow table, is exact.
type Accuracy uint8

const (
	// Exact counters were counted packet by packet in the flow table.
	Exact Accuracy = iota
	// Decoded counters are exact as well, but were decoded from the
	// sketch's flow set (an invertible Bloom lookup table) rather than
	// counted in the flow table. They carry no error bound.
	Decoded
	// Estimated counters come from the count-min sketch. An estimate is
	// never below the truth, and exceeds it by at most MaxErrorPackets
	// packets and MaxErrorBytes bytes with probability at least
	// ErrorConfidence: the bound is one-sided.
	Estimated
	numAccuracies
)

// accuracyNames are the JSON names, which the CLI and every exporter use.
var accuracyNames = [numAccuracies]string{Exact: "exact", Decoded: "decoded", Estimated: "estimated"}

func (a Accuracy) String() string {
	if a < numAccuracies {
		return accuracyNames[a]
	}
	return fmt.Sprintf("accuracy(%d)", uint8(a))
}

// ParseAccuracy is the inverse of Accuracy.String.
func ParseAccuracy(s string) (Accuracy, error) {
	for a, n := range accuracyNames {
		if n == s {
			return Accuracy(a), nil
		}
	}
	return 0, fmt.Errorf("unknown accuracy %q (want exact, decoded or estimated)", s)
}

// MarshalText writes the accuracy's name, so that encoding/json writes
// "exact" rather than 0.
func (a Accuracy) MarshalText() ([]byte, error) {
	if a >= numAccuracies {
		return nil, fmt.Errorf("accuracy %d has no name", uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText reads what MarshalText writes.
func (a *Accuracy) UnmarshalText(b []byte) error {
	v, err := ParseAccuracy(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// ErrorSum is the accuracy and error bound of a sum of records' counters,
// for whatever adds records up (loupe top's groups). A sum is as exact as
// its least exact part: exact and decoded records add up exactly, and a
// sum with an estimate in it is an estimate. Each estimate exceeds the
// truth by at most its bound (with its confidence), so the sum exceeds the
// sum of the truths by at most the sum of the bounds, and all the bounds
// hold at once with probability at least 1 - Σ(1 - cᵢ) (the union bound,
// which assumes nothing about how the estimates' errors relate: they come
// from one sketch), or 0 when that is negative. The zero ErrorSum is the
// empty, exact sum.
type ErrorSum struct {
	Accuracy        Accuracy
	MaxErrorPackets uint64
	MaxErrorBytes   uint64
	// miss is Σ(1 - cᵢ) in units of 2^-missBits, each term rounded up and
	// the sum capped at 1: fixed point, so that the order in which records
	// are added (segments are read in parallel) never changes the answer,
	// and rounding only ever lowers the confidence.
	miss uint64
}

const (
	missBits = 62
	missOne  = uint64(1) << missBits
)

// Add adds one record's accuracy and bounds. The bounds of a record that
// is not an estimate are not read: it has none.
func (s *ErrorSum) Add(a Accuracy, maxErrorPackets, maxErrorBytes uint64, confidence float64) {
	s.Accuracy = max(s.Accuracy, a)
	if a != Estimated {
		return
	}
	s.MaxErrorPackets = addSat(s.MaxErrorPackets, maxErrorPackets)
	s.MaxErrorBytes = addSat(s.MaxErrorBytes, maxErrorBytes)
	s.miss = min(s.miss+missOf(confidence), missOne)
}

// AddRecord adds r's accuracy and bounds.
func (s *ErrorSum) AddRecord(r *Record) {
	s.Add(r.Accuracy, r.MaxErrorPackets, r.MaxErrorBytes, r.ErrorConfidence)
}

// Merge adds the records o summed.
func (s *ErrorSum) Merge(o *ErrorSum) {
	s.Accuracy = max(s.Accuracy, o.Accuracy)
	s.MaxErrorPackets = addSat(s.MaxErrorPackets, o.MaxErrorPackets)
	s.MaxErrorBytes = addSat(s.MaxErrorBytes, o.MaxErrorBytes)
	s.miss = min(s.miss+o.miss, missOne)
}

// Confidence is the probability that the sum exceeds the truth by no more
// than its bounds: 1 for a sum of no estimate.
func (s *ErrorSum) Confidence() float64 {
	return 1 - float64(s.miss)/float64(missOne)
}

// missOf is 1 - c in fixed point, rounded up; a confidence outside [0, 1]
// (or NaN) counts as 0.
func missOf(c float64) uint64 {
	if !(c >= 0 && c <= 1) {
		return missOne
	}
	return uint64(math.Ceil((1 - c) * float64(missOne)))
}

// addSat adds without wrapping: a bound that overflows is as good as
// unbounded.
func addSat(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}
