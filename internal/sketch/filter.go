package sketch

import "fmt"

// Filter is the flow filters of one sketch half, every CPU's: whether a key
// was inserted in the interval, with the filter's false-positive rate.
type Filter struct {
	p       FlowSetParams
	filters [][]byte
}

// NewFilter reads the per-CPU flow filters of a half laid out as the
// package doc says.
func NewFilter(p FlowSetParams, filters [][]byte) (*Filter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	for cpu, f := range filters {
		if len(f) != p.FilterBytes() {
			return nil, fmt.Errorf("cpu %d: flow filter of %d bytes, want %d", cpu, len(f), p.FilterBytes())
		}
	}
	return &Filter{p: p, filters: filters}, nil
}

// Contains reports whether some CPU's filter has every bit of k set: k
// spilled in the interval, or (at the filter's false-positive rate) not.
func (f *Filter) Contains(k *Key) bool {
	m := f.p.FilterBits
	start, step := hashKey(k).probes(m)
	for _, filter := range f.filters {
		pos, all := start, true
		for range f.p.FilterHashes {
			if filter[pos/64*8+pos%64/8]&(1<<(pos%8)) == 0 {
				all = false
				break
			}
			pos += step
			if pos >= m {
				pos -= m
			}
		}
		if all {
			return true
		}
	}
	return false
}
