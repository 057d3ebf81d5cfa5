package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/hop"
	"loupe/internal/store"
	"loupe/internal/testutil"
)

// uiShots is where the browser test leaves its screenshots; with
// E2E_UI_SCREENSHOTS=1 they are also copied into docs/ui for the README.
const uiShotsEnv = "E2E_UI_SCREENSHOTS"

// TestUIInBrowser runs the agent with known traffic over a veth pair and
// drives its UI in Debian's chromium (web/test/ui.mjs, playwright-core):
// every page loads without a console error; the totals, the top talkers,
// a flow's packets and bytes and the topology's endpoints are what `loupe
// flows --json` and `loupe top --json` print for the same store; the
// flows table's filters (those on the kernel signals and accuracy too),
// sorting on every column, paging and both exports (the CSV holding the
// JSON lines' values) work; records with Kubernetes names show them; the
// Latency page shows the trace ids and hops of `loupe latency --json`; a
// rule added on the Captures page is in `loupe rules list --json`; a
// capture started from the UI is a pcapng tshark reads, with the count
// asked; and the pages fit a 380 px window. The named records, those
// with signals and the latency records are written into the agent's
// store before it starts: no cluster or second node is needed to show
// them, and their values are known exactly.
func TestUIInBrowser(t *testing.T) {
	testutil.RequirePrivileged(t)
	chromium := testutil.RequirePeer(t, "chromium")
	node := testutil.RequirePeer(t, "node")
	tshark := testutil.RequirePeer(t, "tshark")
	web, err := filepath.Abs(filepath.Join("..", "..", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(web, "node_modules", "playwright-core")); err != nil {
		if os.Getenv(testutil.RequirePrivilegedEnv) == "1" {
			t.Fatalf("web/node_modules: %v (scripts/deps.sh test runs npm ci)", err)
		}
		t.Skipf("web/node_modules: %v (cd web && npm ci)", err)
	}
	_ = chromium

	p := &pair{
		a: testutil.NewNSPrefix(t, "lui"), b: testutil.NewNSPrefix(t, "lui"),
		vethA: testutil.UniqueName("luia"), vethB: testutil.UniqueName("luib"),
		a4: netip.MustParseAddr("10.78.0.1"), b4: netip.MustParseAddr("10.78.0.2"),
		a6: netip.MustParseAddr("fd78::1"), b6: netip.MustParseAddr("fd78::2"),
	}
	testutil.Veth(t, p.a, p.vethA, p.b, p.vethB)
	p.up(t)
	tcpServer(t, p.b, hostPort(p.b4, 80), 2000)
	tcpServer(t, p.b, hostPort(p.b6, 8080), 300)

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	const token = "lui-test-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "rules")
	if err := os.WriteFile(rulesFile, []byte("# rules come from the UI\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agentDir, err := os.MkdirTemp("", "loupe-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(agentDir) })
	start := time.Now().Add(-time.Second).UTC()
	prefillStore(t, filepath.Join(agentDir, "store"), p.vethB)
	// The UI's listener is the default port, but in the test's own
	// namespace, where no other agent listens.
	const uiAddr = "127.0.0.1:9463"
	a := startAgent(t, p.b, agentOpts{dir: agentDir, args: []string{"--iface", p.vethB, "--cache-active-timeout", "500ms",
		"--capture-follow", "--control-token-file", tokenFile, "--ui-listen", uiAddr, "--rules", rulesFile}})
	a.waitLog(10*time.Second, "serving the UI")

	// Known traffic: 70 TCP connections over IPv4 (two records each, a
	// new source port every time: more than a page of the table), 10
	// over IPv6, and pings.
	for i := 0; i < 70; i++ {
		tcpExchange(t, p.a, hostPort(p.b4, 80), 100+10*i, 2000)
	}
	for i := 0; i < 10; i++ {
		tcpExchange(t, p.a, hostPort(p.b6, 8080), 500, 300)
	}
	ping(t, p.a, p.b4, 5, 200)
	settle(t, a)
	// A fixed window, so that what the link carries later (IPv6
	// neighbour and multicast chatter) changes neither side: settle saw
	// nothing new stored for longer than an eviction interval, so every
	// record of the window is stored by now.
	until := time.Now().Add(-time.Second).UTC()
	window := []string{"--since", start.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano)}
	flowsIn := func(args ...string) string {
		return a.run(append(append([]string{"flows", "--json"}, window...), args...)...)
	}

	// What the CLI says of the store, for the page to show.
	recs := flowsIn()
	lines := strings.SplitAfter(recs, "\n")
	lines = lines[:len(lines)-1]
	var tot struct{ Bytes, Packets, Flows uint64 }
	for _, l := range lines {
		var r struct{ Bytes, Packets uint64 }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		tot.Bytes, tot.Packets, tot.Flows = tot.Bytes+r.Bytes, tot.Packets+r.Packets, tot.Flows+1
	}
	first := func(args ...string) map[string]any {
		out := flowsIn(args...)
		var r map[string]any
		if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &r); err != nil {
			t.Fatalf("flows %v: %v", args, err)
		}
		return r
	}
	top := map[string][]map[string]any{}
	for _, by := range []string{"src", "dst", "pair", "port"} {
		var rows []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(a.run(append([]string{"top", "--json", "--by", by, "-n", "10", "--flows=false"}, window...)...)), "\n") {
			var r map[string]any
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, r)
		}
		top[by] = rows
	}
	allPairs := strings.Split(strings.TrimSpace(a.run(append([]string{"top", "--json", "--by", "pair", "-n", "300"}, window...)...)), "\n")
	nodes := map[string]bool{}
	for _, l := range allPairs {
		var r map[string]string
		_ = json.Unmarshal([]byte(l), &r)
		nodes[r["src_addr"]], nodes[r["dst_addr"]] = true, true
	}
	count := func(args ...string) int { return strings.Count(flowsIn(args...), "\n") }
	// The names the table shows under each address, in its order.
	var names []string
	named := flowsIn("--namespace", "shop")
	for _, l := range strings.Split(strings.TrimSpace(named), "\n") {
		var r map[string]string
		_ = json.Unmarshal([]byte(l), &r)
		for _, side := range []string{"src", "dst"} {
			n := cmp.Or(r[side+"_workload"], r[side+"_pod"], r[side+"_service"])
			if n == "" {
				continue
			}
			if ns := r[side+"_namespace"]; ns != "" {
				n = ns + "/" + n
			}
			names = append(names, n)
		}
	}
	var latency []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(a.run("latency", "--json", "--since", "1h")), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("loupe latency --json: %v: %s", err, l)
		}
		latency = append(latency, r)
	}
	if len(latency) != len(uiHopRecords(time.Now())) {
		t.Fatalf("loupe latency --json: %d records, want the %d written", len(latency), len(uiHopRecords(time.Now())))
	}
	// The page keeps the table's order (bytes) for the export.
	filtered := flowsIn("--src", p.a4.String(), "--proto", "tcp", "--sort", "bytes")
	want := map[string]any{
		"token":     token,
		"window":    "since=" + start.Format(time.RFC3339Nano) + "&until=" + until.Format(time.RFC3339Nano),
		"iface":     p.vethB,
		"totals":    map[string]uint64{"bytes": tot.Bytes, "packets": tot.Packets, "flows": tot.Flows},
		"top":       top,
		"flows":     lines,
		"byBytes":   first("--sort", "bytes"),
		"byPackets": first("--sort", "packets"),
		"nodes":     len(nodes),
		"filter": map[string]any{"src": p.a4.String(), "proto": "tcp", "matched": strings.Count(filtered, "\n"),
			"jsonl": filtered},
		"capture":       map[string]any{"filter": "tcp port 80", "iface": p.vethB, "count": 12},
		"byRTT":         first("--sort", "rtt"),
		"byRetransmits": first("--sort", "retransmits"),
		"byDrops":       first("--sort", "drops"),
		"byDNS":         first("--sort", "dns_latency"),
		"byAccuracy":    first("--sort", "accuracy"),
		"byIface":       first("--sort", "iface"),
		"byDirection":   first("--sort", "direction"),
		"measured": map[string]int{"drops": count("--has", "drops"), "dns": count("--has", "dns"),
			"estimated": count("--accuracy", "estimated"), "minRTT": count("--min-rtt", "500us")},
		"k8s":     map[string]any{"namespace": "shop", "matched": strings.Count(named, "\n"), "names": names},
		"latency": latency,
		"rule":    uiRule,
		"ruleID":  "lu2-ui",
	}
	// The 101st record by bytes, for the second page.
	byBytes := strings.Split(flowsIn("--sort", "bytes"), "\n")
	if len(byBytes) > 101 {
		var r map[string]any
		if err := json.Unmarshal([]byte(byBytes[100]), &r); err != nil {
			t.Fatal(err)
		}
		want["flows101"] = r
	}
	expected := filepath.Join(dir, "expected.json")
	b, _ := json.Marshal(want)
	if err := os.WriteFile(expected, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(os.TempDir(), "loupe-ui-artefacts")
	os.RemoveAll(out)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots and downloads in %s", out)

	// While the browser waits for its capture, connections to port 80
	// (bounded: at most 300, and only until the browser is done).
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		started := filepath.Join(out, "capture-started")
		for i := 0; i < 300; i++ {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := os.Stat(started); err == nil {
				tcpExchange(t, p.a, hostPort(p.b4, 80), 100, 2000)
			}
		}
	}()
	cmd := p.b.Command(node, filepath.Join(web, "test", "ui.mjs"), "http://"+uiAddr, expected, out)
	cmd.Dir = web
	cmd.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
	res, err := cmd.CombinedOutput()
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatalf("browser test: %v\n%s", err, res)
	}

	// The rule the page added is in force, as the page listed it.
	var result struct{ Seen struct{ Rule string } }
	if b, err := os.ReadFile(filepath.Join(out, "result.json")); err != nil || json.Unmarshal(b, &result) != nil {
		t.Fatalf("result.json: %v", err)
	}
	rules, err := exec.Command(loupeBin, "rules", "list", "--json", "--control", a.control).CombinedOutput()
	if err != nil {
		t.Fatalf("loupe rules list --json: %v: %s", err, rules)
	}
	var list struct {
		Rules []struct {
			Rule struct{ ID, Text string }
		}
	}
	if err := json.Unmarshal(rules, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Rules) != 1 || list.Rules[0].Rule.ID != "lu2-ui" || list.Rules[0].Rule.Text != result.Seen.Rule {
		t.Errorf("loupe rules list --json after the page added %q (listed as %q):\n%s", uiRule, result.Seen.Rule, rules)
	}

	// The capture the UI started: tshark reads it, every packet TCP
	// port 80, as many as asked.
	pcap := filepath.Join(out, "capture.pcapng")
	ts := exec.Command(tshark, "-r", pcap, "-T", "fields", "-e", "tcp.port")
	var tsErr strings.Builder
	ts.Stderr = &tsErr
	tsOut, err := ts.Output()
	if err != nil || strings.Contains(tsErr.String(), "alformed") {
		t.Fatalf("tshark -r %s: %v: %s", pcap, err, tsErr.String())
	}
	ports := strings.Split(strings.TrimSpace(string(tsOut)), "\n")
	if len(ports) != 12 {
		t.Errorf("capture from the UI: %d packets, want 12:\n%s", len(ports), tsOut)
	}
	for _, pp := range ports {
		if !strings.Contains(","+pp+",", ",80,") {
			t.Errorf("captured a packet of ports %q, outside the filter", pp)
		}
	}
	if os.Getenv(uiShotsEnv) == "1" {
		docs := filepath.Join("..", "..", "docs", "ui")
		os.MkdirAll(docs, 0o755)
		for _, n := range []string{"overview", "flows", "flows-k8s", "flows-narrow", "topology", "captures", "latency"} {
			if b, err := os.ReadFile(filepath.Join(out, n+".jpg")); err == nil {
				os.WriteFile(filepath.Join(docs, n+".jpg"), b, 0o644)
			}
		}
	}
}

// uiRule is the rule the browser adds on the Captures page: traffic the
// test never sends, so that it changes nothing the test measures.
const uiRule = "id=lu2-ui dst=10.99.0.0/16 proto=tcp dport=873 skip"

// prefillStore writes into the store at dir, before the agent opens it,
// records that a veth pair without a cluster cannot make: Kubernetes
// names, kernel signals, DNS and an estimate, on addresses the test's
// traffic does not use; and the latency log's per-hop records.
func prefillStore(t *testing.T, dir, iface string) {
	t.Helper()
	now := time.Now().UTC()
	rec := func(src, dst string, sport, dport uint16, proto uint8, packets uint64) flow.Record {
		r := flow.Record{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: proto, SrcPort: sport, DstPort: dport}}
		r.SrcAddr, r.DstAddr = netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
		r.Iface, r.IfIndex, r.Direction, r.Sampling = iface, 1, flow.Ingress, 1
		r.Packets, r.Bytes = packets, packets*100
		r.FirstSeen, r.LastSeen = now.Add(-200*time.Millisecond), now
		return r
	}
	pod := func(ns, name, workload, kind string) flow.K8sEnd {
		return flow.K8sEnd{Kind: flow.K8sPod, Namespace: ns, Pod: name, Workload: workload, WorkloadKind: kind, Node: "node-1"}
	}
	web := rec("10.79.0.1", "10.79.0.2", 40001, 8080, 6, 40)
	web.K8s = &flow.K8s{Src: pod("shop", "web-6d4f9-abcde", "web", "Deployment"), Dst: pod("shop", "db-0", "db", "StatefulSet")}
	web.SetRTT(100_000, 900_000, 400_000)
	web.SetRetransmits(3)
	dns := rec("10.79.0.3", "10.79.0.9", 53001, 53, 17, 2)
	dns.K8s = &flow.K8s{Src: pod("shop", "cli-7c9d-xyz12", "cli", "Deployment"),
		Dst: flow.K8sEnd{Kind: flow.K8sService, Namespace: "kube-system", Service: "kube-dns"}}
	dns.SetDNS(&flow.DNSExchange{ID: 4242, QName: "db.shop.svc.cluster.local", HasRcode: true, HasLatency: true, LatencyNs: 1_500_000})
	dns.SetDrops(2, 160, flow.DropReasons{"NETFILTER_DROP": 2})
	est := rec("10.79.0.4", "10.79.0.5", 40002, 443, 6, 700)
	est.Accuracy, est.MaxErrorPackets, est.MaxErrorBytes, est.ErrorConfidence = flow.Estimated, 5, 500, 0.95

	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(context.Background(), []flow.Record{web, dns, est}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := store.OpenHopLog(dir, store.HopOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(uiHopRecords(now)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// uiHopRecords are two traced requests across three hops each.
func uiHopRecords(at time.Time) []*hop.Request {
	req := func(trace string, sport uint16, lat ...int64) *hop.Request {
		r := &hop.Request{TraceID: trace, SpanID: "00f067aa0ba902b7", Kind: "request", Proto: 6, Seq: uint32(sport),
			SrcAddr: netip.MustParseAddr("10.79.0.1"), DstAddr: netip.MustParseAddr("10.79.0.2"), SrcPort: sport, DstPort: 8080,
			Time: at, Node: "node-1"}
		ifaces := []string{"veth-web", "eth0", "vxlan0", "veth-db"}
		for i, l := range lat {
			r.Hops = append(r.Hops, hop.Hop{FromIface: ifaces[i], ToIface: ifaces[i+1], Direction: []string{hop.Out, hop.Out, hop.In}[i], LatencyNs: l})
		}
		return r
	}
	return []*hop.Request{
		req("4bf92f3577b34da6a3ce929d0e0e4736", 40001, 12_000, 48_000, 31_000),
		req("0af7651916cd43dd8448eb211c80319c", 40003, 9_000, 250_000, 27_000),
	}
}

// settle waits until the store stops changing: every record of the
// traffic evicted and stored, so that the CLI and the page read the same.
func settle(t *testing.T, a *agent) {
	t.Helper()
	last := ""
	for i := 0; i < 40; i++ {
		time.Sleep(750 * time.Millisecond)
		out := a.run("flows", "--json", "--since", "1h")
		n := strconv.Itoa(strings.Count(out, "\n")) + fmt.Sprint(len(out))
		if n == last && out != "" {
			return
		}
		last = n
	}
	t.Fatal("the store never settled")
}
