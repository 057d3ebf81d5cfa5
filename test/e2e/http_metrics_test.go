package e2e

import (
	"testing"

	"loupe/internal/testutil"
)

// TestHTTPMetrics: nginx answers one request at a time on keep-alive
// connections over IPv4 and IPv6; the agent's HTTP metrics count exactly
// the requests and the responses by class the clients saw, and a latency
// for every response.
func TestHTTPMetrics(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t)
	p.up(t)
	startNginx(t, p.b, p.b4, p.b6)
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-follow"}})

	type count struct{ req, c2, c4, c5 float64 }
	want := map[string]*count{p.b4.String(): {}, p.b6.String(): {}}
	plan := []struct {
		to    string
		paths []string
	}{
		{p.b4.String(), []string{"/foo", "/foo", "/foo", "/foo"}},
		{p.b4.String(), []string{"/bar", "/bar", "/foo"}},
		{p.b6.String(), []string{"/foo", "/nope"}},
		{p.b6.String(), []string{"/bar"}},
	}
	for _, c := range plan {
		addr := p.b4
		if c.to == p.b6.String() {
			addr = p.b6
		}
		h := dialHTTP(t, p.a, addr)
		for _, path := range c.paths {
			h.send(path)
		}
		h.close()
		w := want[c.to]
		for _, s := range h.statuses {
			w.req++
			switch s / 100 {
			case 2:
				w.c2++
			case 4:
				w.c4++
			case 5:
				w.c5++
			}
		}
	}
	m := a.metrics()
	for server, w := range want {
		l := `port="80",server="` + server + `"`
		got := count{m[`loupe_http_requests_total{`+l+`}`], m[`loupe_http_responses_total{class="2xx",`+l+`}`],
			m[`loupe_http_responses_total{class="4xx",`+l+`}`], m[`loupe_http_responses_total{class="5xx",`+l+`}`]}
		if got != *w {
			t.Errorf("%s: metrics %+v, want %+v", server, got, *w)
		}
		if n := m[`loupe_http_response_latency_seconds_count{`+l+`}`]; n != w.c2+w.c4+w.c5 {
			t.Errorf("%s: %v latencies, want one per response (%v)", server, n, w.c2+w.c4+w.c5)
		}
		if s := m[`loupe_http_response_latency_seconds_sum{`+l+`}`]; s <= 0 || s > 5 {
			t.Errorf("%s: latency sum %v s", server, s)
		}
	}
	a.stop()
}
