package e2e

import (
	"testing"
	"time"
)

// TestLatencyWithCapabilitiesOnly: per-hop latency's kernel half loads,
// scans and hands its trace contexts on in an agent that holds exactly
// CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON: one context per request that
// crossed the one hook it passed.
func TestLatencyWithCapabilitiesOnly(t *testing.T) {
	const requests = 3
	p := newPair(t)
	a := startAgent(t, p.a, agentOpts{caps: true, args: []string{"--latency", "--cache-active-timeout", "100ms"}})
	checkCapabilities(t, a.pid())
	a.waitLog(5*time.Second, "latency on")
	p.up(t)
	addr := p.b4.String() + ":8080"
	serveHTTP(t, p.b, addr)
	sendTraced(t, p.a, addr, requests)
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := a.metrics()
		if m["loupe_latency_up"] != 1 {
			t.Fatalf("loupe_latency_up = %v, want 1", m["loupe_latency_up"])
		}
		got := m[`loupe_latency_records_total{kind="context"}`]
		if got == requests {
			break
		}
		if got > requests || time.Now().After(deadline) {
			t.Fatalf("trace contexts read: %v, want %d (one per request at %s's egress)", got, requests, p.vethA)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
