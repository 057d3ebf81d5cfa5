package datapath

import (
	"net/netip"
	"testing"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// TestHTTPStats runs requests and responses through the capture function
// and reads the HTTP metrics: requests per server, responses by class,
// latencies for the responses whose request was seen; a response with no
// request before it counts without a latency; a request pipelined behind
// another in one segment counts once; past the series cap, servers fold
// into "other", counted.
func TestHTTPStats(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp, _, _ := openCapture(t, CaptureSizes{Connections: 64, KeepPackets: 4, KeepSlotsPerCPU: 16, KeepSnap: MaxKeepSnap, HTTPSeries: 16},
		CaptureConfig{Rules: []Rule{{Kind: RuleHTTPStatus, StatusLo: 500, StatusHi: 599, Sample: 1}}})
	run := func(c capConn, toServer bool, payload string) {
		dir := flow.Ingress
		if !toServer {
			dir = flow.Egress
		}
		runProg(t, dp, dir, c.frame(t, toServer, 1, false, []byte(payload)))
	}
	a := capConn{port: 41000}
	run(a, true, request)
	run(a, false, ok)
	run(a, true, request+request) // pipelined: one request counted
	run(a, false, failure)
	b := capConn{port: 41001}
	run(b, false, ok) // no request seen: no latency

	stats, err := dp.HTTPStats()
	if err != nil {
		t.Fatal(err)
	}
	_, server := a.ends()
	got := map[uint8]HTTPStat{}
	for _, s := range stats {
		if s.Server == (HTTPServer{}) {
			if s.Count != 0 {
				t.Errorf("other, class %d: %+v", s.Class, s)
			}
			continue
		}
		if s.Server != (HTTPServer{Addr: server.Addr(), Port: 80}) {
			t.Errorf("unexpected server %+v", s.Server)
		}
		got[s.Class] = s
	}
	var hist uint64
	for _, n := range got[2].Hist {
		hist += n
	}
	if got[0].Count != 2 || got[2].Count != 2 || got[5].Count != 1 || got[2].LatencyCount != 1 || got[5].LatencyCount != 1 ||
		hist != 1 || got[2].LatencySum == 0 || len(got) != 3 {
		t.Errorf("stats %+v: want 2 requests, 2 2xx (1 with latency), 1 5xx with latency", got)
	}

	// 16 entries, 6 of them "other": 10 more fit, the next servers fold.
	for i := 0; i < 12; i++ {
		c := capConn{port: 42000, server: netip.AddrFrom4([4]byte{10, 9, 0, byte(i)})}
		run(c, false, ok) // each its own server
	}
	stats, err = dp.HTTPStats()
	if err != nil {
		t.Fatal(err)
	}
	var other uint64
	for _, s := range stats {
		if s.Server == (HTTPServer{}) && s.Class == 2 {
			other = s.Count
		}
	}
	c := captureCounterMap(t, dp)
	if len(stats) != 16 || c["http_folded"] == 0 || other != c["http_folded"] {
		t.Errorf("%d entries, %d folded, other 2xx %d: want 16 entries and the folded counted in other", len(stats), c["http_folded"], other)
	}
	if c["http_requests"] != 2 || c["http_responses"] != 3+12 {
		t.Errorf("counters %v", c)
	}
}
