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
	for cpu := range f.filters {
		if f.containsOn(cpu, k) {
			return true
		}
	}
	return false
}

// containsOn is Contains for one CPU's filter.
func (f *Filter) containsOn(cpu int, k *Key) bool {
	filter := f.filters[cpu]
	m := f.p.FilterBits
	pos, step := hashKey(k).probes(m)
	for range f.p.FilterHashes {
		if filter[pos/64*8+pos%64/8]&(1<<(pos%8)) == 0 {
			return false
		}
		pos += step
		if pos >= m {
			pos -= m
		}
	}
	return true
}

// doubted reports whether one of the CPUs of decodedOn holds k in its
// filter without having decoded it.
func (f *Filter) doubted(k *Key, decodedOn map[int]map[Key]struct{}) bool {
	for cpu, keys := range decodedOn {
		if _, ok := keys[*k]; !ok && f.containsOn(cpu, k) {
			return true
		}
	}
	return false
}
