package datapath

import "fmt"

// Counter is one of the datapath's failure and anomaly counters.
type Counter struct {
	// Name is the counter's stable, lower-case name (e.g. "map_full"),
	// used as a metric label.
	Name  string
	Value uint64
}

// counterNames follows enum counter in bpf/lib/counters.h, indexed by the
// generated constants; a test checks it against the generated code.
var counterNames = [flowsCounterCOUNTER_MAX]string{
	flowsCounterCOUNTER_MAP_FULL:      "map_full",
	flowsCounterCOUNTER_MAP_BUSY:      "map_busy",
	flowsCounterCOUNTER_RINGBUF_FULL:  "ringbuf_full",
	flowsCounterCOUNTER_LOST_PACKETS:  "lost_packets",
	flowsCounterCOUNTER_LOST_BYTES:    "lost_bytes",
	flowsCounterCOUNTER_TRUNCATED_L2:  "truncated_l2",
	flowsCounterCOUNTER_TRUNCATED_L3:  "truncated_l3",
	flowsCounterCOUNTER_TRUNCATED_L4:  "truncated_l4",
	flowsCounterCOUNTER_BAD_IPV4IHL:   "bad_ipv4_ihl",
	flowsCounterCOUNTER_VLAN_DEPTH:    "vlan_depth",
	flowsCounterCOUNTER_IPV6EXT_DEPTH: "ipv6_ext_depth",
	flowsCounterCOUNTER_FRAGMENTS:     "fragments",
	flowsCounterCOUNTER_PULLED:        "pulled",
}

// Counters reads and sums the per-CPU datapath counters.
func (d *Datapath) Counters() ([]Counter, error) {
	out := make([]Counter, len(counterNames))
	perCPU := make([]uint64, d.ncpu)
	for i, name := range counterNames {
		if err := d.objs.Counters.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("read counter %s: %w", name, err)
		}
		var sum uint64
		for _, v := range perCPU {
			sum += v
		}
		out[i] = Counter{Name: name, Value: sum}
	}
	return out, nil
}
