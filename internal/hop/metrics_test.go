package hop

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsBoundedPairs(t *testing.T) {
	m := NewMetrics(2, func() Stats { return Stats{Stamps: 7, Requests: 3, Evicted: 1, Open: 2} })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	r := &Request{Hops: []Hop{
		{FromIface: "lxc1", ToIface: "vxlan0", Direction: Out, LatencyNs: 3000},
		{FromIface: "vxlan0", ToIface: "eth0", Direction: Out, LatencyNs: 2_000_000},
	}}
	m.Observe(r)
	m.Observe(r)
	// A third pair is over the cap: counted, not a new label set.
	m.Observe(&Request{Hops: []Hop{{FromIface: "eth0", ToIface: "lxc2", Direction: In, LatencyNs: 1}}})
	if n := testutil.CollectAndCount(reg, "loupe_hop_latency_seconds"); n != 2 {
		t.Errorf("%d label sets, want 2", n)
	}
	want := `
# HELP loupe_hop_latency_pairs_overflow_total Hops not put in loupe_hop_latency_seconds because it already had latency.max_pairs interface pairs.
# TYPE loupe_hop_latency_pairs_overflow_total counter
loupe_hop_latency_pairs_overflow_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loupe_hop_latency_pairs_overflow_total"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	checked := false
	for _, mf := range mfs {
		if mf.GetName() != "loupe_hop_latency_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			h := mt.GetHistogram()
			if h.GetSampleCount() != 2 {
				t.Errorf("%v: %d samples, want 2", mt.GetLabel(), h.GetSampleCount())
			}
			if mt.GetLabel()[1].GetValue() == "lxc1" {
				checked = true
			}
			if mt.GetLabel()[1].GetValue() == "lxc1" && h.GetSampleSum() != 6e-6 {
				t.Errorf("lxc1 sum %v, want 6e-6", h.GetSampleSum())
			}
		}
	}
	if !checked {
		t.Error("no lxc1 -> vxlan0 histogram")
	}
	wantStats := `
# HELP loupe_hop_match_events_total What the matcher could not match, by event: incomplete (one hook only), duplicate (a hook seen twice), evicted (finished early, table full), context_unmatched (no segment within the window), context_dropped (table full).
# TYPE loupe_hop_match_events_total counter
loupe_hop_match_events_total{event="context_dropped"} 0
loupe_hop_match_events_total{event="context_unmatched"} 0
loupe_hop_match_events_total{event="duplicate"} 0
loupe_hop_match_events_total{event="evicted"} 1
loupe_hop_match_events_total{event="incomplete"} 0
# HELP loupe_hop_table_entries Segments and contexts the matcher holds now (bounded by latency.table_size).
# TYPE loupe_hop_table_entries gauge
loupe_hop_table_entries 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantStats), "loupe_hop_match_events_total", "loupe_hop_table_entries"); err != nil {
		t.Error(err)
	}
}

// TestMetricsManyPairs: more pairs than Observe keeps at hand, observed in
// turn, with names built afresh each time (equal strings, other memory):
// every histogram gets its own pair's hops, and only them.
func TestMetricsManyPairs(t *testing.T) {
	const pairs, rounds = 12, 5
	m := NewMetrics(64, nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	for r := range rounds {
		for p := range pairs {
			from := "v" + string(rune('a'+p)) // new memory each time
			m.Observe(&Request{Hops: []Hop{{FromIface: from, ToIface: "vxlan0", Direction: Out, LatencyNs: int64(1000 * (p + 1))}}})
			if r%2 == 0 { // the same pair in the other direction, now and then
				m.Observe(&Request{Hops: []Hop{{FromIface: from, ToIface: "vxlan0", Direction: In, LatencyNs: 1}}})
			}
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, mf := range mfs {
		if mf.GetName() != "loupe_hop_latency_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range mt.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			p := int(l["from_iface"][1] - 'a')
			wantN, wantSum := uint64(rounds), float64(rounds*1000*(p+1))/1e9
			if l["direction"] == In {
				wantN, wantSum = (rounds+1)/2, float64((rounds+1)/2)/1e9
			}
			h := mt.GetHistogram()
			if h.GetSampleCount() != wantN || h.GetSampleSum() < wantSum*0.999999 || h.GetSampleSum() > wantSum*1.000001 {
				t.Errorf("%v: %d samples summing to %g, want %d and %g", l, h.GetSampleCount(), h.GetSampleSum(), wantN, wantSum)
			}
			seen++
		}
	}
	if seen != 2*pairs {
		t.Errorf("%d histograms, want %d", seen, 2*pairs)
	}
}
