package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// LoadBaseline loads a TC program that does nothing but let the packet
// continue. Benchmarks attach it to measure the cost of the hook itself
// (and of bpf_stats), which is not the flow program's cost.
func LoadBaseline() (*ebpf.Program, error) {
	var objs baselineObjects
	if err := loadBaselineObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("load baseline program: %w", err)
	}
	return objs.Baseline, nil
}
