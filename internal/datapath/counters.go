package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Counter is one of the datapath's failure and anomaly counters.
type Counter struct {
	// Name is the counter's stable, lower-case name (e.g. "map_full"),
	// used as a metric label.
	Name  string
	Value uint64
}

// counterNames follows enum counter in bpf/lib/counters.h, indexed by the
// generated constants; a test checks it against the generated code.
var counterNames = [loupeCounterCOUNTER_MAX]string{
	loupeCounterCOUNTER_MAP_FULL:          "map_full",
	loupeCounterCOUNTER_MAP_BUSY:          "map_busy",
	loupeCounterCOUNTER_RINGBUF_FULL:      "ringbuf_full",
	loupeCounterCOUNTER_LOST_PACKETS:      "lost_packets",
	loupeCounterCOUNTER_LOST_BYTES:        "lost_bytes",
	loupeCounterCOUNTER_TRUNCATED_L2:      "truncated_l2",
	loupeCounterCOUNTER_TRUNCATED_L3:      "truncated_l3",
	loupeCounterCOUNTER_TRUNCATED_L4:      "truncated_l4",
	loupeCounterCOUNTER_BAD_IPV4IHL:       "bad_ipv4_ihl",
	loupeCounterCOUNTER_VLAN_DEPTH:        "vlan_depth",
	loupeCounterCOUNTER_IPV6EXT_DEPTH:     "ipv6_ext_depth",
	loupeCounterCOUNTER_FRAGMENTS:         "fragments",
	loupeCounterCOUNTER_PULLED:            "pulled",
	loupeCounterCOUNTER_TUNNEL_TRUNCATED:  "tunnel_truncated",
	loupeCounterCOUNTER_TUNNEL_BAD_HEADER: "tunnel_bad_header",
	loupeCounterCOUNTER_TUNNEL_DEPTH:      "tunnel_depth",
	loupeCounterCOUNTER_TUNNEL_TABLE_FULL: "tunnel_table_full",

	loupeCounterCOUNTER_SPILLED_PACKETS: "spilled_packets",
	loupeCounterCOUNTER_SPILLED_BYTES:   "spilled_bytes",
}

// Counters reads and sums the per-CPU datapath counters.
func (d *Datapath) Counters() ([]Counter, error) {
	return sumCounters(d.objs.Counters, counterNames[:], d.ncpu)
}

// sumCounters reads a per-CPU array of counters named by names, summing
// each over the ncpu possible CPUs.
func sumCounters(m *ebpf.Map, names []string, ncpu int) ([]Counter, error) {
	out := make([]Counter, len(names))
	perCPU := make([]uint64, ncpu)
	for i, name := range names {
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
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
