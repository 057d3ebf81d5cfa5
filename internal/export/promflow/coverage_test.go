package promflow

import (
	"log/slog"
	"strconv"
	"testing"

	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
)

// TestCoverage is the traffic counters' field-coverage test, with every
// aggregation key on. The counters aggregate: every counter field is
// summed, and the exclusions are the fields they do not label by.
func TestCoverage(t *testing.T) {
	var keys []Key
	for k := Key(1); k < keyCount; k++ {
		keys = append(keys, k)
	}
	groups, err := ParseGroups([]string{"lab=192.0.2.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	const summed = "summed over: no label carries it"
	const perFlow = "a per-flow value, which no bounded label can carry: the records carry it"
	const k8s = "summed over: only the namespace and workload of the record's pod label it, which stay bounded"
	const perPod = "a pod comes and goes with every rollout: a label would make a series per pod (the records carry it)"
	const local = "the labels are the local pod's (here the source, the interface's pod): the other end's names are summed over"
	flowtest.Coverage{
		Encode: func(t testing.TB, r *flow.Record) flowtest.Parts {
			s := New(Options{Keys: keys, Groups: groups, Logger: slog.New(slog.DiscardHandler)})
			if err := s.Write(t.Context(), []flow.Record{*r}); err != nil {
				t.Fatal(err)
			}
			p := flowtest.Parts{}
			for k, v := range gather(t, s) {
				p[k] = strconv.FormatFloat(v, 'g', -1, 64)
			}
			return p
		},
		Excluded: map[string]string{
			"ifindex": "the iface label is the interface's name", "src_mac": summed, "dst_mac": summed,
			"src_addr":           "only through CIDR groups (src_group), never per address: per-flow labels are refused by design",
			"dst_addr":           "only through CIDR groups (dst_group), never per address: per-flow labels are refused by design",
			"src_port@ipv4-icmp": "ICMP type and code are not ports: src_port is none", "dst_port@ipv4-icmp": "ICMP type and code are not ports: dst_port is none",
			"src_port@ipv6-icmpv6": "ICMPv6 type and code are not ports", "dst_port@ipv6-icmpv6": "ICMPv6 type and code are not ports",
			"tcp_flags": "not a count: a union of flags does not add up", "sampling": "not a count: counters are summed as counted",
			"aggregate_prefix": summed + ": an aggregate's packets add to the totals as a flow's do",
			"accuracy": summed + ": an estimate's counts add to the totals as counted (as sampled counts do, unscaled); " +
				"a label would split every series in up to three whose sum is what a query wants",
			"max_error_packets": "not a count of traffic: a bound on an estimate's overcount",
			"max_error_bytes":   "not a count of traffic: a bound on an estimate's overcount",
			"error_confidence":  "not a count: a probability",
			"first_seen":        "counters are cumulative since the agent started", "last_seen": "counters are cumulative since the agent started",
			"rtt_min_ns":   "loupe_flow_rtt_seconds observes each socket's last RTT of the interval; the records keep its minimum and maximum",
			"rtt_max_ns":   "loupe_flow_rtt_seconds observes each socket's last RTT of the interval; the records keep its minimum and maximum",
			"drop_packets": "loupe_flow_drops_total counts the same packets by reason (drop_reasons), which sum to it",
			"dns_id":       perFlow, "dns_qname": perFlow,
			"tunnel_type": "not a count: the traffic of a tunnelled flow adds to its interface's as any flow's does (the records carry the tunnel)",
			"tunnel_id":   perFlow, "outer_src_addr": perFlow, "outer_dst_addr": perFlow, "outer_src_port": perFlow, "outer_dst_port": perFlow,
			"src_kind": k8s, "src_pod": perPod, "src_workload_kind": k8s, "src_service": k8s, "src_node": k8s,
			"dst_kind": k8s, "dst_namespace": local, "dst_pod": perPod, "dst_workload": local, "dst_workload_kind": k8s,
			"dst_service": k8s, "dst_node": k8s, "iface_pod": local, "iface_namespace": local,
		},
	}.Check(t)
}
