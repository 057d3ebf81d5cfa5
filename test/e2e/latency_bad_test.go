package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// latencyRouter is client -veth- router -veth- server, the agent in the
// router: a request crosses two of its hooks (ingress of the client's
// veth, egress of the server's), so each is stamped twice and matched
// into one hop.
type latencyRouter struct {
	client, router, server *testutil.NS
	r1, r2                 string
}

const latencyRouterServer = "10.82.2.2:8080"

func newLatencyRouter(t *testing.T) *latencyRouter {
	t.Helper()
	n := &latencyRouter{
		client: testutil.NewNSPrefix(t, "ll2c"), router: testutil.NewNSPrefix(t, "ll2r"), server: testutil.NewNSPrefix(t, "ll2s"),
		r1: testutil.UniqueName("ll2a"), r2: testutil.UniqueName("ll2b"),
	}
	testutil.Veth(t, n.client, "eth0", n.router, n.r1)
	testutil.Veth(t, n.router, n.r2, n.server, "eth0")
	for _, s := range []struct {
		ns        *testutil.NS
		dev, addr string
	}{{n.client, "eth0", "10.82.1.2/24"}, {n.router, n.r1, "10.82.1.1/24"}, {n.router, n.r2, "10.82.2.1/24"}, {n.server, "eth0", "10.82.2.2/24"}} {
		s.ns.IP(t, "addr", "add", s.addr, "dev", s.dev)
		s.ns.IP(t, "link", "set", s.dev, "up")
	}
	n.client.IP(t, "route", "add", "default", "via", "10.82.1.1")
	n.server.IP(t, "route", "add", "default", "via", "10.82.2.1")
	n.router.Sysctl(t, "net.ipv4.ip_forward", "1")
	return n
}

// dial opens a TCP connection from the client to the server.
func (n *latencyRouter) dial(t *testing.T) net.Conn {
	t.Helper()
	var c net.Conn
	if err := n.client.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", latencyRouterServer, 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// exchange writes the request in parts, each its own segment (a pause
// between them), reads the response, and returns the client's port.
func exchange(t *testing.T, c net.Conn, r *bufio.Reader, parts ...[]byte) uint16 {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for i, p := range parts {
		if i > 0 {
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("response: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return uint16(c.LocalAddr().(*net.TCPAddr).Port)
}

// requestWith is GET /foo with 1 KB of other headers, then header (a
// whole line without its CRLF; none if empty).
func requestWith(header string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "GET /foo HTTP/1.1\r\nHost: %s\r\n", latencyRouterServer)
	for j := 0; b.Len() < 1024; j++ {
		fmt.Fprintf(&b, "X-Pad-%d: %s\r\n", j, strings.Repeat("p", 100))
	}
	if header != "" {
		b.WriteString(header + "\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// latencyCounters are the agent's latency and matcher counters.
type latencyCounters map[string]float64

func (a *agent) latencyCounters() latencyCounters {
	a.t.Helper()
	m := a.metrics()
	out := latencyCounters{}
	for k, v := range m {
		if strings.HasPrefix(k, "loupe_latency_") || strings.HasPrefix(k, "loupe_hop_") {
			out[k] = v
		}
	}
	return out
}

func (c latencyCounters) event(name string) float64 {
	return c[`loupe_latency_events_total{event="`+name+`"}`]
}

func (c latencyCounters) read(kind string) float64 {
	return c[`loupe_latency_records_total{kind="`+kind+`"}`]
}

func (c latencyCounters) match(name string) float64 {
	return c[`loupe_hop_match_events_total{event="`+name+`"}`]
}

// settle scrapes until the counters stop moving (the ring read, the
// matcher's window over) and the matcher's table is empty, within 10 s.
func (a *agent) settle() latencyCounters {
	a.t.Helper()
	prev := a.latencyCounters()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(400 * time.Millisecond) // two match windows
		cur := a.latencyCounters()
		if fmt.Sprint(cur) == fmt.Sprint(prev) && cur["loupe_hop_table_entries"] == 0 {
			return cur
		}
		prev = cur
	}
	a.t.Fatalf("latency counters still moving after 10s: %v", prev)
	return nil
}

// sub is what moved between two scrapes.
func (c latencyCounters) sub(before latencyCounters) latencyCounters {
	out := latencyCounters{}
	for k, v := range c {
		out[k] = v - before[k]
	}
	return out
}

// storedLatency reads every record of the agent's latency log.
func storedLatency(t *testing.T, a *agent) []map[string]any {
	t.Helper()
	out, err := exec.Command(loupeBin, "latency", "--store", filepath.Join(a.dir, "store"), "--since", "0", "--json").Output()
	if err != nil {
		t.Fatalf("loupe latency: %v", err)
	}
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestLatencyBadInput runs the agent with its smallest matching table and
// ring against what a node meets that is no well-formed traced request:
// malformed and oversized trace headers (counted as malformed, recorded
// without a trace id), a traceparent line cut by the segment end and
// continued in the next (found), bytes that are no HTTP on the HTTP port
// (no request stamp), a flood of traced requests larger than the matching
// table (bounded, every stamp accounted for as matched or incomplete),
// and the ring full while the agent's reader is stopped (every lost
// record counted). The agent stays up through all of it.
func TestLatencyBadInput(t *testing.T) {
	n := newLatencyRouter(t)
	serveHTTP(t, n.server, latencyRouterServer)
	raw := n.dial(t) // the server answers through the router
	exchange(t, raw, bufio.NewReader(raw), requestWith(""))
	raw.Close()
	const table = 64
	a := startAgent(t, n.router, agentOpts{args: []string{"--latency", "--iface", n.r1, "--iface", n.r2,
		"--latency-table-size", fmt.Sprint(table), "--latency-ring-size", "64KiB",
		"--latency-untraced-sampling", "1"}}) // the malformed headers' requests are recorded
	base := a.settle()

	// Malformed and oversized trace headers: each request scanned at two
	// hooks, each time counted as malformed and not found; its record
	// has no trace id.
	malformed := []string{
		"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  // short trace id
		"traceparent: 00-" + strings.Repeat("0", 32) + "-00f067aa0ba902b7-01",  // zero trace id
		"traceparent: ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
		"traceparent: " + strings.Repeat("0", 300),                             // oversized
		"TraceParent: 00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper-case digits
		"b3: 4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz",                // b3, bad digit
	}
	badPorts := map[float64]bool{}
	for _, h := range malformed {
		c := n.dial(t)
		badPorts[float64(exchange(t, c, bufio.NewReader(c), requestWith(h)))] = true
		c.Close()
	}
	d := a.settle().sub(base)
	if m := float64(len(malformed)); d.event("requests") != 2*m || d.event("malformed") != 2*m || d.event("not_found") != 2*m ||
		d.event("found_traceparent")+d.event("found_b3") != 0 {
		t.Errorf("malformed headers: counters moved by %v, want requests, malformed and not_found %v each, nothing found", d, 2*m)
	}

	// A traceparent line cut by the segment's end, in its name and in its
	// value, then continued: found at both hooks.
	base = a.settle()
	split := map[float64]string{}
	for _, cut := range []int{5, 30} {
		tr := randomHex(16)
		req := requestWith("traceparent: 00-" + tr + "-" + randomHex(8) + "-01")
		at := bytes.Index(req, []byte("traceparent")) + cut
		c := n.dial(t)
		split[float64(exchange(t, c, bufio.NewReader(c), req[:at], req[at:]))] = tr
		c.Close()
	}
	d = a.settle().sub(base)
	if d.event("requests") != 4 || d.event("found_traceparent") != 4 || d.event("malformed") != 0 {
		t.Errorf("split headers: counters moved by %v, want 4 requests and 4 traceparent found", d)
	}

	// Bytes that are no HTTP request on the HTTP port: a TLS hello's
	// start, a method without its space, a lower-case method. No request
	// stamp, no scan.
	base = a.settle()
	var notHTTP []float64
	for _, p := range [][]byte{{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0, 0, 'G', 'E', 'T', ' '}, []byte("GETX / HTTP/1.1\r\n\r\n"), []byte("get / HTTP/1.1\r\n\r\n")} {
		c := n.dial(t)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, c) // the server's 400, then its close
		notHTTP = append(notHTTP, float64(c.LocalAddr().(*net.TCPAddr).Port))
		c.Close()
	}
	d = a.settle().sub(base)
	if d.event("requests") != 0 || d.read("stamp") != 0 || d.event("not_http") != 0 {
		t.Errorf("non-HTTP bytes on the HTTP port: counters moved by %v, want no request and no stamp", d)
	}

	// A flood of traced requests, many more within one match window
	// than the table holds: the table stays within its size, evicts, and
	// every stamp read is in a record or counted incomplete.
	base = a.settle()
	const conns, per = 4, 250
	var wg sync.WaitGroup
	for range conns {
		c := n.dial(t)
		r := bufio.NewReader(c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for range per {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(requestWith("traceparent: 00-" + randomHex(16) + "-" + randomHex(8) + "-01")); err != nil {
					t.Error(err)
					return
				}
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	flooded := make(chan struct{})
	go func() { wg.Wait(); close(flooded) }()
	// The table's size, scraped while the flood runs.
	maxEntries := 0.0
	for waiting := true; waiting; {
		select {
		case <-flooded:
			waiting = false
		case <-time.After(20 * time.Millisecond):
			maxEntries = max(maxEntries, a.latencyCounters()["loupe_hop_table_entries"])
		}
	}
	d = a.settle().sub(base)
	sent := float64(conns * per)
	lost := d.event("ring_full_request") + d.event("ring_full_sampled")
	if d.event("requests") != 2*sent || d.read("stamp")+lost != 2*sent || d["loupe_hop_stamps_total"] != d.read("stamp") {
		t.Errorf("flood: counters moved by %v, want %v request starts, every stamp read or counted lost", d, 2*sent)
	}
	recs := d[`loupe_hop_records_total{kind="request"}`] + d[`loupe_hop_records_total{kind="sampled"}`]
	if got := 2*recs + d.match("incomplete"); got != d["loupe_hop_stamps_total"] {
		t.Errorf("flood: %v records of 2 stamps and %v incomplete account for %v stamps, the matcher got %v", recs, d.match("incomplete"), got, d["loupe_hop_stamps_total"])
	}
	if d.match("evicted")+d.match("context_dropped") == 0 || maxEntries > table {
		t.Errorf("flood of %v requests through a table of %d: evicted %v, contexts dropped %v, at most %v entries seen",
			sent, table, d.match("evicted"), d.match("context_dropped"), maxEntries)
	}
	t.Logf("flood: %v requests, %v records, %v incomplete, %v evicted, %v contexts dropped, %v lost in the ring, at most %v entries",
		sent, recs, d.match("incomplete"), d.match("evicted"), d.match("context_dropped"), lost, maxEntries)

	// The ring full: the agent stopped (SIGSTOP) while requests pass,
	// so that its reader takes nothing; every record the kernel could not
	// write is counted, by kind, and what was written is read once the
	// agent runs again.
	base = a.settle()
	if err := syscall.Kill(a.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c := n.dial(t)
	r := bufio.NewReader(c)
	const stalled = 800 // 1 600 stamps and as many contexts: 64 KiB holds about 600 records
	for range stalled {
		exchange(t, c, r, requestWith("traceparent: 00-"+randomHex(16)+"-"+randomHex(8)+"-01"))
	}
	c.Close()
	if err := syscall.Kill(a.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	d = a.settle().sub(base)
	if d.event("requests") != 2*stalled || d.read("stamp")+d.event("ring_full_request") != 2*stalled ||
		d.read("context")+d.event("ring_full_context") != d.event("found_traceparent") || d.event("found_traceparent") != 2*stalled {
		t.Errorf("ring full: counters moved by %v, want %d request starts and contexts, each read or counted lost", d, 2*stalled)
	}
	if d.event("ring_full_request")+d.event("ring_full_context") == 0 {
		t.Errorf("ring full: nothing counted lost in a 64 KiB ring for %d records", 4*stalled)
	}
	t.Logf("ring full: %v stamps and %v contexts read, %v and %v counted lost", d.read("stamp"), d.read("context"),
		d.event("ring_full_request"), d.event("ring_full_context"))
	if v := a.latencyCounters()["loupe_latency_up"]; v != 1 {
		t.Errorf("loupe_latency_up %v after the bad input, want 1", v)
	}
	a.stop()

	// The records: the malformed requests without a trace id, the split
	// ones with theirs, none of the connections that sent no HTTP.
	seen := map[float64]bool{}
	for _, rec := range storedLatency(t, a) {
		port := rec["src_port"].(float64)
		switch {
		case badPorts[port]:
			seen[port] = true
			if rec["trace_id"] != "" || rec["kind"] != "request" {
				t.Errorf("malformed header's record %v: want a request without a trace id", rec)
			}
		case split[port] != "":
			seen[port] = true
			if rec["trace_id"] != split[port] {
				t.Errorf("split header's record %v: want trace id %s", rec, split[port])
			}
		}
		for _, p := range notHTTP {
			if port == p {
				t.Errorf("a record of the connection that sent no HTTP: %v", rec)
			}
		}
	}
	if len(seen) != len(badPorts)+len(split) {
		t.Errorf("records of %d of the %d malformed and split requests", len(seen), len(badPorts)+len(split))
	}
}

// TestLatencyDegrades: when the kernel refuses the entry programs with the
// latency capability (the fault build refuses them, as a verifier would),
// the agent loads them without it, says latency is off and why, serves
// loupe_latency_up 0 (latency is no kernel signal: it is not among
// loupe_signal_up's), and measures flows as ever.
func TestLatencyDegrades(t *testing.T) {
	n := newLatencyRouter(t)
	serveHTTP(t, n.server, latencyRouterServer)
	a := startAgent(t, n.router, agentOpts{bin: faultAgent(t), env: []string{"TEST_DATAPATH_REFUSE=latency"},
		args: []string{"--latency", "--iface", n.r1, "--iface", n.r2}})
	if !a.logged("latency off", "TEST_DATAPATH_REFUSE=latency") {
		t.Errorf("no latency off line with its reason:\n%s", a.logs.String())
	}
	c := n.dial(t)
	exchange(t, c, bufio.NewReader(c), requestWith("traceparent: 00-"+randomHex(16)+"-"+randomHex(8)+"-01"))
	c.Close()
	m := a.metrics()
	if v, ok := m["loupe_latency_up"]; !ok || v != 0 {
		t.Errorf("loupe_latency_up = %v (served: %v), want 0", v, ok)
	}
	for k := range m {
		if strings.HasPrefix(k, "loupe_latency_events_total") || strings.HasPrefix(k, "loupe_hop_") || k == `loupe_signal_up{signal="latency"}` {
			t.Errorf("refused latency serves %s", k)
		}
	}
	if st := loupeOutput(t, "status", "--json", "--control", a.control); !strings.Contains(st, `"latency": "unavailable: `) {
		t.Errorf("loupe status does not say latency is unavailable: %s", st)
	}
	a.stop()
	if len(a.exported()) == 0 {
		t.Error("no flow records: the agent should measure flows without latency")
	}
}
