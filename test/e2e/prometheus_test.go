package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"loupe/internal/export/promflow/promtest"
	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// TestPrometheusScrapesAgent: a real Prometheus, in the agent's namespace,
// scrapes the agent while the test sends TCP, UDP and ICMP over IPv4 and
// IPv6. After the traffic stops, the traffic counters must equal the
// interface's kernel counters per direction, Prometheus must hold exactly
// what the agent serves, label set for label set, and the per-protocol
// split must equal the agent's own flow records.
func TestPrometheusScrapesAgent(t *testing.T) {
	testutil.RequirePeer(t, "prometheus") // before any set-up
	p := newPair(t)
	a := startAgent(t, p.a, agentOpts{args: []string{"--cache-active-timeout", "200ms"}})
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	// Prometheus talks to the agent over the namespace's loopback, which
	// the agent does not watch; the test reaches it the same way.
	prom := promtest.Start(t, promtest.Config{
		Targets: []string{a.listen},
		Listen:  "127.0.0.1:9090",
		Command: p.a.Command,
		Dial:    dialIn(p.a),
	})
	p.up(t)

	tcpServer(t, p.b, hostPort(p.b4, 5001), 4000)
	tcpServer(t, p.b, hostPort(p.b6, 5001), 900)
	for i := range 3 {
		tcpExchange(t, p.a, hostPort(p.b4, 5001), 20000*(i+1), 4000)
		tcpExchange(t, p.a, hostPort(p.b6, 5001), 7000*(i+1), 900)
	}
	sink := newUDPSink(t, p.b, hostPort(p.b4, 5002))
	send := udpSender(t, p.a, hostPort(p.b4, 5002))
	const datagrams = 40
	for i := range datagrams {
		if _, err := send.Write(make([]byte, 10+i*31)); err != nil {
			t.Fatal(err)
		}
	}
	sink.waitFor(t, datagrams)
	ping(t, p.a, p.b4, 3, 200)
	ping(t, p.b, p.a6, 2, 100)

	p.down(t)
	kernel := p.a.Stats(t, p.vethA)
	// Two evictions that began after the link went down have drained
	// every packet it carried; nothing changes the counters after that.
	waitEvictions(t, a, 2, 10*time.Second)
	t0 := time.Now()
	served := a.metrics()

	agentBytes := byDirProto(t, served, "loupe_traffic_bytes_total", p.vethA)
	agentPackets := byDirProto(t, served, "loupe_traffic_packets_total", p.vethA)
	in, out := sumDir(agentPackets, "ingress"), sumDir(agentPackets, "egress")
	inB, outB := sumDir(agentBytes, "ingress"), sumDir(agentBytes, "egress")
	t.Logf("kernel: rx %d/%dB tx %d/%dB; agent /metrics: in %v/%vB out %v/%vB", kernel.RxPackets, kernel.RxBytes,
		kernel.TxPackets, kernel.TxBytes, in, inB, out, outB)
	if in != float64(kernel.RxPackets) || inB != float64(kernel.RxBytes) {
		t.Errorf("ingress: agent serves %v packets %v bytes; the interface received %d packets %d bytes", in, inB, kernel.RxPackets, kernel.RxBytes)
	}
	if out != float64(kernel.TxPackets) || outB != float64(kernel.TxBytes) {
		t.Errorf("egress: agent serves %v packets %v bytes; the interface sent %d packets %d bytes", out, outB, kernel.TxPackets, kernel.TxBytes)
	}
	t.Logf("agent bytes by direction/proto:\n%s", formatMap(agentBytes))
	if kernel.TxBytes < 100_000 || agentBytes["egress/tcp"] == 0 || agentBytes["egress/udp"] == 0 || agentBytes["egress/icmp"] == 0 || agentBytes["ingress/icmpv6"] == 0 {
		t.Errorf("traffic missing: kernel %+v, agent %v", kernel, agentBytes)
	}

	// Prometheus, after a scrape that began once the counters were final.
	prom.WaitScraped(t0, 30*time.Second)
	for _, m := range []struct {
		name string
		want map[string]float64
	}{{"loupe_traffic_bytes_total", agentBytes}, {"loupe_traffic_packets_total", agentPackets}} {
		got := map[string]float64{}
		for _, s := range prom.Query(fmt.Sprintf(`sum by (direction, proto) (%s{iface=%q})`, m.name, p.vethA)) {
			got[s.Labels["direction"]+"/"+s.Labels["proto"]] = s.Value
		}
		if !equalMaps(got, m.want) {
			t.Errorf("%s in Prometheus:\n%s\nthe agent serves:\n%s", m.name, formatMap(got), formatMap(m.want))
		}
	}
	series := prom.Scalar(`count(loupe_traffic_packets_total)`)
	if series != served["loupe_traffic_series"] || series > 4096 {
		t.Errorf("Prometheus has %v packet series; the agent reports %v (limit 4096)", series, served["loupe_traffic_series"])
	}
	if got := prom.Scalar(`loupe_traffic_series_folded_total`); got != 0 {
		t.Errorf("loupe_traffic_series_folded_total = %v, want 0", got)
	}

	// The protocol split equals the agent's own flow records.
	a.stop()
	records := map[string]float64{}
	for _, r := range a.exported() {
		if r.Iface == p.vethA {
			records[r.Direction.String()+"/"+protoName(t, &r)] += float64(r.Bytes)
		}
	}
	if !equalMaps(records, agentBytes) {
		t.Errorf("bytes by direction/proto: flow records\n%s\nPrometheus counters\n%s", formatMap(records), formatMap(agentBytes))
	}
}

// dialIn dials from inside ns.
func dialIn(ns *testutil.NS) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() (err error) {
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// waitEvictions waits until the agent has completed n more evictions.
func waitEvictions(t *testing.T, a *agent, n float64, timeout time.Duration) {
	t.Helper()
	count := func() float64 {
		var sum float64
		for k, v := range a.metrics() {
			if strings.HasPrefix(k, "loupe_evictions_total{") {
				sum += v
			}
		}
		return sum
	}
	start := count()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if count() >= start+n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("fewer than %v evictions within %v", n, timeout)
}

// byDirProto sums one traffic metric of iface from /metrics samples by
// "direction/proto".
func byDirProto(t *testing.T, samples map[string]float64, name, iface string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, v := range samples {
		if !strings.HasPrefix(k, name+"{") || !strings.Contains(k, fmt.Sprintf("iface=%q", iface)) {
			continue
		}
		out[label(t, k, "direction")+"/"+label(t, k, "proto")] += v
	}
	return out
}

func label(t *testing.T, sample, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(sample, name+`="`)
	if !ok {
		t.Fatalf("%s has no label %s", sample, name)
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func sumDir(m map[string]float64, dir string) float64 {
	var sum float64
	for k, v := range m {
		if strings.HasPrefix(k, dir+"/") {
			sum += v
		}
	}
	return sum
}

// protoName is the proto label promflow documents, for the protocols this
// test's traffic carries.
func protoName(t *testing.T, r *flow.Record) string {
	t.Helper()
	if r.EtherType != flow.EtherTypeIPv4 && r.EtherType != flow.EtherTypeIPv6 {
		return "none"
	}
	switch r.Proto {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	}
	t.Fatalf("unexpected protocol %d in %+v", r.Proto, r)
	return ""
}

func equalMaps(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func formatMap(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s %v\n", k, m[k])
	}
	return b.String()
}
