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
// into "other", counted, and a connection keeps its server's number.
func TestHTTPStats(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp, _, _ := openCapture(t, CaptureSizes{Connections: 64, KeepPackets: 4, KeepSlotsPerCPU: 16, KeepSnap: MaxKeepSnap, HTTPSeries: 24},
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

	// 24 entries: four servers of six, "other" and a among them; two more
	// fit, the next ten fold, on every response.
	for i := 0; i < 12; i++ {
		c := capConn{port: 42000, server: netip.AddrFrom4([4]byte{10, 9, 0, byte(i)})}
		run(c, false, ok) // each its own server
		run(c, false, ok) // the connection's number, kept
	}
	stats, err = dp.HTTPStats()
	if err != nil {
		t.Fatal(err)
	}
	var other, others uint64
	entries := 0
	for _, s := range stats {
		switch {
		case s.Server == (HTTPServer{}):
			if s.Class == 2 {
				other = s.Count
			}
			others++
		case s.Server.Addr.Is4() && s.Server.Addr.As4()[1] == 9:
			if s.Class != 2 || s.Count != 2 {
				t.Errorf("server %+v: want two 2xx", s)
			}
			entries++
		}
	}
	c := captureCounterMap(t, dp)
	if entries != 2 || others != 6 || other != 20 || c["http_folded"] != 20 {
		t.Errorf("%d servers numbered, %d entries of other, other 2xx %d, %d folded: want 2 numbered, 6, 20 and 20",
			entries, others, other, c["http_folded"])
	}
	if c["http_requests"] != 2 || c["http_responses"] != 3+24 {
		t.Errorf("counters %v", c)
	}
}
