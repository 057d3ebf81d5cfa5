package promflow

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"loupe/internal/flow"
)

// TestSignalMetrics: the exposition of the signals' histograms and
// counters for records that measured them, a record on no interface
// labelled iface="none", and records without any adding nothing to them.
func TestSignalMetrics(t *testing.T) {
	s := New(Options{})
	sock := ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 40000, 443, 10, 1000)
	sock.SetRTT(100_000, 3_000_000, 2_000_000) // 2 ms: the 0.0025 bucket
	sock.SetRetransmits(3)
	lone := flow.Record{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: 6, Direction: flow.Egress}, Sampling: 1}
	lone.SetRTT(40_000, 40_000, 40_000) // 40 µs: the first bucket, on no interface
	lone.SetRetransmits(0)
	drops := ipRec("eth0", flow.Ingress, 17, "10.0.0.2", "10.0.0.1", 5000, 9301, 3, 300)
	drops.SetDrops(5, 260, flow.DropReasons{"NETFILTER_DROP": 3, "NO_SOCKET": 2})
	nx := ipRec("eth1", flow.Ingress, 17, "10.0.0.53", "10.0.0.1", 53, 33000, 1, 120)
	nx.SetDNS(&flow.DNSExchange{ID: 1, QName: "nosuch.test", HasRcode: true, Rcode: 3, HasLatency: true, LatencyNs: 700_000})
	lost := ipRec("eth1", flow.Egress, 17, "10.0.0.1", "10.0.0.53", 33001, 53, 1, 80)
	lost.SetDNS(&flow.DNSExchange{ID: 2, QName: "slow.test"})
	hs := ipRec("eth1", flow.Ingress, 6, "10.0.0.7", "10.0.0.8", 41000, 80, 2, 120)
	hs.SetHandshakeRTT(20_000_000)
	write(t, s, sock, lone, drops, nx, lost, hs, ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.3", 1, 2, 1, 60))
	want := `
# HELP loupe_flow_dns_queries_total DNS queries seen at the hooks, by response code (rcode="none": no response).
# TYPE loupe_flow_dns_queries_total counter
loupe_flow_dns_queries_total{iface="eth1",rcode="NXDOMAIN"} 1
loupe_flow_dns_queries_total{iface="eth1",rcode="none"} 1
# HELP loupe_flow_dropped_bytes_total IP length of the packets the kernel dropped (drop_bytes).
# TYPE loupe_flow_dropped_bytes_total counter
loupe_flow_dropped_bytes_total{direction="ingress",iface="eth0",proto="udp"} 260
# HELP loupe_flow_drops_total Packets the kernel dropped, by the flow record's interface, direction and protocol and the kernel's drop reason (drop_reasons).
# TYPE loupe_flow_drops_total counter
loupe_flow_drops_total{direction="ingress",iface="eth0",proto="udp",reason="NETFILTER_DROP"} 3
loupe_flow_drops_total{direction="ingress",iface="eth0",proto="udp",reason="NO_SOCKET"} 2
# HELP loupe_flow_retransmits_total TCP segments retransmitted (retransmits).
# TYPE loupe_flow_retransmits_total counter
loupe_flow_retransmits_total{iface="eth0"} 3
loupe_flow_retransmits_total{iface="none"} 0
# HELP loupe_flow_signal_series Label sets of the loupe_flow_* signal metrics now (their cap is max_series too).
# TYPE loupe_flow_signal_series gauge
loupe_flow_signal_series 11
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "loupe_flow_dns_queries_total", "loupe_flow_dropped_bytes_total",
		"loupe_flow_drops_total", "loupe_flow_retransmits_total", "loupe_flow_signal_series"); err != nil {
		t.Fatal(err)
	}
	m := gather(t, s)
	for k, v := range map[string]float64{
		`loupe_flow_rtt_seconds_count{iface="eth0"}`:                          1,
		`loupe_flow_rtt_seconds_sum{iface="eth0"}`:                            0.002,
		`loupe_flow_rtt_seconds_bucket{iface="eth0",le="0.001"}`:              0,
		`loupe_flow_rtt_seconds_bucket{iface="eth0",le="0.0025"}`:             1,
		`loupe_flow_rtt_seconds_bucket{iface="none",le="5e-05"}`:              1,
		`loupe_flow_handshake_rtt_seconds_sum{iface="eth1"}`:                  0.02,
		`loupe_flow_handshake_rtt_seconds_bucket{iface="eth1",le="0.01"}`:     0,
		`loupe_flow_handshake_rtt_seconds_bucket{iface="eth1",le="0.025"}`:    1,
		`loupe_flow_dns_latency_seconds_count{iface="eth1",rcode="NXDOMAIN"}`: 1,
		`loupe_flow_dns_latency_seconds_sum{iface="eth1",rcode="NXDOMAIN"}`:   0.0007,
		`loupe_traffic_series{}`:                                              5, // the record on no interface adds no traffic series
	} {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if _, ok := m[`loupe_flow_dns_latency_seconds_count{iface="eth1",rcode="none"}`]; ok {
		t.Error("a latency observed for a query without a response")
	}
	if problems, err := testutil.CollectAndLint(s); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}

// TestSignalSeriesCap: past max_series the signal metrics' new label sets
// fold into their metric's fold series, and every drop is still counted.
func TestSignalSeriesCap(t *testing.T) {
	now, advance := fixedClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	s := New(Options{MaxSeries: 4, Now: now})
	var recs []flow.Record
	for i := range 10 {
		r := ipRec("eth0", flow.Ingress, 17, "10.0.0.2", "10.0.0.1", 5000, 9301, 1, 100)
		r.SetDrops(2, 80, flow.DropReasons{"REASON_" + string(rune('A'+i)): 2})
		recs = append(recs, r)
	}
	write(t, s, recs...)
	// Each record adds its reason's drops and the dropped bytes: the
	// bytes' series and three reasons' fill the cap, and the other seven
	// reasons fold.
	m := gather(t, s)
	total, series := sumOf(m, "loupe_flow_drops_total")
	if total != 20 || m["loupe_flow_signal_series_folded_total{}"] != 7 || m["loupe_flow_signal_series{}"] != 5 ||
		m[`loupe_flow_drops_total{direction="other",iface="other",proto="other",reason="other"}`] != 14 || series != 4 {
		t.Errorf("drops %v over %d series, %v folded, %v series; want 20 over 3 and the fold series, 7 folded, 5 series",
			total, series, m["loupe_flow_signal_series_folded_total{}"], m["loupe_flow_signal_series{}"])
	}
	// Idle series go, as the traffic's do.
	advance(2 * time.Hour)
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, n := sumOf(gather(t, s), "loupe_flow_drops_total"); n != 0 {
		t.Errorf("%d drop series after the idle TTL, want 0", n)
	}
}
