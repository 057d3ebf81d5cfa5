package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"loupe/internal/hop"
	"loupe/internal/store"
	"loupe/internal/testutil"
	"loupe/internal/testutil/delayline"
)

// twoNodes is two "nodes" with a "pod" each: pod A -veth- node A -VXLAN
// over a veth underlay- node B -veth- pod B, the underlay running through
// a delay line in a namespace of its own.
type twoNodes struct {
	podA, nodeA, wire, nodeB, podB *testutil.NS
	line                           *delayline.Line
}

func newTwoNodes(t *testing.T) *twoNodes {
	t.Helper()
	n := &twoNodes{
		podA: testutil.NewNSPrefix(t, "lhp-pa"), nodeA: testutil.NewNSPrefix(t, "lhp-na"),
		wire:  testutil.NewNSPrefix(t, "lhp-w"),
		nodeB: testutil.NewNSPrefix(t, "lhp-nb"), podB: testutil.NewNSPrefix(t, "lhp-pb"),
	}
	testutil.Veth(t, n.podA, "eth0", n.nodeA, "vpa")
	testutil.Veth(t, n.podB, "eth0", n.nodeB, "vpb")
	testutil.Veth(t, n.nodeA, "ula", n.wire, "dla")
	testutil.Veth(t, n.nodeB, "ulb", n.wire, "dlb")
	for _, s := range []struct {
		pod, node            *testutil.NS
		veth, under          string
		pod4, gw, u4, remote string
		vx, peerVx, peerPods string
	}{
		{n.podA, n.nodeA, "vpa", "ula", "10.81.1.2/24", "10.81.1.1", "192.168.81.1", "192.168.81.2", "10.81.0.1/32", "10.81.0.2", "10.81.2.0/24"},
		{n.podB, n.nodeB, "vpb", "ulb", "10.81.2.2/24", "10.81.2.1", "192.168.81.2", "192.168.81.1", "10.81.0.2/32", "10.81.0.1", "10.81.1.0/24"},
	} {
		s.pod.IP(t, "addr", "add", s.pod4, "dev", "eth0")
		s.pod.IP(t, "link", "set", "eth0", "up")
		s.pod.IP(t, "route", "add", "default", "via", s.gw)
		s.node.IP(t, "addr", "add", s.gw+"/24", "dev", s.veth)
		s.node.IP(t, "addr", "add", s.u4+"/24", "dev", s.under)
		// The delay line forwards frames of at most one MTU: a GSO
		// buffer of tunnelled TCP does not survive its round trip
		// through a packet socket (the send fails, ENOMEM), so the
		// underlay segments in software, after its own TC hook: that
		// hook still sees the buffer whole, and the matcher joins it
		// with the segments the far end sees.
		s.node.IP(t, "link", "set", s.under, "gso_max_segs", "1")
		s.node.IP(t, "link", "add", "vxlan0", "type", "vxlan", "id", "81", "dstport", "4789", "local", s.u4, "remote", s.remote, "dev", s.under)
		s.node.IP(t, "addr", "add", s.vx, "dev", "vxlan0")
		for _, l := range []string{s.veth, s.under, "vxlan0"} {
			s.node.IP(t, "link", "set", l, "up")
		}
		s.node.IP(t, "route", "add", s.peerPods, "via", s.peerVx, "dev", "vxlan0", "onlink")
		s.node.Sysctl(t, "net.ipv4.ip_forward", "1")
	}
	n.wire.IP(t, "link", "set", "dla", "up")
	n.wire.IP(t, "link", "set", "dlb", "up")
	n.setDelay(t, 0)
	t.Cleanup(func() { n.line.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for n.podA.Command("ping", "-c", "1", "-W", "1", "10.81.2.2").Run() != nil {
		if time.Now().After(deadline) {
			under, _ := n.nodeA.Command("ping", "-c", "1", "-W", "1", "192.168.81.2").CombinedOutput()
			ab, ba := n.line.Forwarded()
			t.Fatalf("pod B not reachable from pod A through the overlay (delay line forwarded %d and %d frames, dropped %d; underlay ping: %s)",
				ab, ba, n.line.Dropped(), under)
		}
	}
	return n
}

// setDelay replaces the delay line by one of delay d.
func (n *twoNodes) setDelay(t *testing.T, d time.Duration) {
	t.Helper()
	if n.line != nil {
		n.line.Close()
	}
	if err := n.wire.Do(func() (err error) {
		n.line, err = delayline.Start("dla", "dlb", d)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// tracedRequest is a request sent with its trace context.
type tracedRequest struct{ trace, span string }

// serveHTTP runs a real HTTP server in pod B.
func serveHTTP(t *testing.T, ns *testutil.NS, addr string) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "foofoofoofoofoofoo")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// sendTraced sends n requests from pod A on one keep-alive connection,
// each with traceparent after 2 KB of other headers; every other one is
// written in two writes (TCP_NODELAY, Go's default) cut inside the
// headers, with a pause between them so that they leave as two segments.
func sendTraced(t *testing.T, ns *testutil.NS, addr string, n int) []tracedRequest {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	var sent []tracedRequest
	for i := range n {
		tr := tracedRequest{trace: randomHex(16), span: randomHex(8)}
		var b strings.Builder
		fmt.Fprintf(&b, "GET /foo HTTP/1.1\r\nHost: %s\r\n", addr)
		for j := 0; b.Len() < 2048; j++ {
			fmt.Fprintf(&b, "X-Pad-%d: %s\r\n", j, strings.Repeat("p", 100))
		}
		fmt.Fprintf(&b, "traceparent: 00-%s-%s-01\r\n\r\n", tr.trace, tr.span)
		req := []byte(b.String())
		parts := [][]byte{req}
		if i%2 == 1 {
			parts = [][]byte{req[:1000], req[1000:]}
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		for j, p := range parts {
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
			if j == 0 && len(parts) > 1 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		sent = append(sent, tr)
	}
	return sent
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// hasLatency reports whether the binary under test has the kernel half
// of per-hop latency.
func hasLatency() bool {
	out, _ := exec.Command(loupeBin, "run", "--help").CombinedOutput()
	return regexp.MustCompile(`(?m)^\s+-latency(\s|$)`).Match(out)
}

type latencyHop struct {
	From      string `json:"from_iface"`
	To        string `json:"to_iface"`
	Direction string `json:"direction"`
	LatencyNs int64  `json:"latency_ns"`
	FromNode  string `json:"from_node"`
	ToNode    string `json:"to_node"`
}

type latencyRecord struct {
	TraceID string       `json:"trace_id"`
	SpanID  string       `json:"span_id"`
	Hops    []latencyHop `json:"hops"`
}

// Every request from pod A to pod B is timed at each hook of both nodes,
// in path order, with its trace context found after 2 KB of headers (in
// one segment or across two); the stores of the two nodes' agents joined
// give the hop between the nodes, and a delay line on the underlay moves
// that hop, and only that one, by its delay.
func TestLatencyAcrossTwoNodes(t *testing.T) {
	const requests = 20
	const delay = 10 * time.Millisecond
	n := newTwoNodes(t)
	serveHTTP(t, n.podB, "10.81.2.2:8080")
	// The topology carries real HTTP through the overlay and the line.
	sendTraced(t, n.podA, "10.81.2.2:8080", 2)
	if !hasLatency() {
		t.Skip("loupe run has no --latency: the kernel half of per-hop latency has not landed")
	}
	ifaces := []string{"--latency", "--iface", "vp*", "--iface", "vxlan0", "--iface", "ul*"}
	a := startAgent(t, n.nodeA, agentOpts{args: ifaces})
	b := startAgent(t, n.nodeB, agentOpts{args: ifaces})

	rounds := map[time.Duration][]tracedRequest{}
	for _, d := range []time.Duration{0, delay} {
		n.setDelay(t, d)
		rounds[d] = sendTraced(t, n.podA, "10.81.2.2:8080", requests)
		if dropped := n.line.Dropped(); dropped != 0 {
			t.Errorf("delay %v: the delay line lost %d frames", d, dropped)
		}
	}
	time.Sleep(time.Second) // the matcher's window and the store's flush
	a.stop()
	b.stop()
	out, err := exec.Command(loupeBin, "latency", "--store", filepath.Join(a.dir, "store"), "--store", filepath.Join(b.dir, "store"),
		"--since", "0", "--json", "--clock-sync").Output()
	if err != nil {
		t.Fatalf("loupe latency: %v", err)
	}
	byTrace := map[string]latencyRecord{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r latencyRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if r.TraceID != "" {
			byTrace[r.TraceID] = r
		}
	}
	wantPath := []string{"vpa>vxlan0", "vxlan0>ula", "ula>ulb", "ulb>vxlan0", "vxlan0>vpb"}
	cross := map[time.Duration][]int64{}
	for d, sent := range rounds {
		for _, s := range sent {
			r, ok := byTrace[s.trace]
			if !ok {
				t.Errorf("request of trace %s (delay %v) not found", s.trace, d)
				continue
			}
			var path []string
			for _, h := range r.Hops {
				path = append(path, h.From+">"+h.To)
				if h.LatencyNs <= 0 {
					t.Errorf("trace %s: hop %s>%s of %d ns", s.trace, h.From, h.To, h.LatencyNs)
				}
				if h.From == "ula" && h.To == "ulb" {
					cross[d] = append(cross[d], h.LatencyNs)
				}
			}
			if !slices.Equal(path, wantPath) || r.SpanID != s.span {
				t.Errorf("trace %s: path %v span %s, want %v span %s", s.trace, path, r.SpanID, wantPath, s.span)
			}
		}
	}
	med := func(xs []int64) time.Duration {
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return time.Duration(xs[len(xs)/2])
	}
	moved := med(cross[delay]) - med(cross[0])
	t.Logf("cross-node hop: median %v without delay, %v with %v: moved %v", med(cross[0]), med(cross[delay]), delay, moved)
	if moved < delay-2*time.Millisecond || moved > delay+5*time.Millisecond {
		t.Errorf("the cross-node hop moved by %v, want about %v", moved, delay)
	}
}

// TestLatencySampledAndNonLinear: with --latency-sampling 1 every TCP
// segment with payload is stamped at every hook, so the replies, which
// carry no request, are matched too: reported without a trace id, their
// hops in path order inwards, and, the two nodes' stores joined, each
// request gets the round trip between the nodes from the reply seen by
// both (no clock sync needed). The requests carry traceparent after
// almost 8 KB of headers, each written at once: pod A's TCP hands its
// veth one GSO buffer of the whole request, whose payload lies in page
// fragments (TCP copies what it sends into pages on a device that does
// scatter-gather), and node A's hooks see that buffer whole; the trace
// context must still be found there (BPF_PROG_TEST_RUN makes only linear
// buffers). Node B, behind the delay line, sees the same bytes as
// separate segments, scanned across.
func TestLatencySampledAndNonLinear(t *testing.T) {
	const requests = 10
	n := newTwoNodes(t)
	serveHTTP(t, n.podB, "10.81.2.2:8080")
	// Pod A learns the overlay's path MTU (its own is the veth's 1500)
	// before the agents start: the first full-sized segments are
	// refused with ICMP and sent again smaller, so that the requests
	// under test cross the nodes once each.
	sendTraced(t, n.podA, "10.81.2.2:8080", 2)
	args := []string{"--latency", "--latency-sampling", "1", "--iface", "vp*", "--iface", "vxlan0", "--iface", "ul*"}
	a := startAgent(t, n.nodeA, agentOpts{args: args})
	b := startAgent(t, n.nodeB, agentOpts{args: args})

	var c net.Conn
	if err := n.podA.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", "10.81.2.2:8080", 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	sent := map[string]string{}
	for range requests {
		trace, span := randomHex(16), randomHex(8)
		var req bytes.Buffer
		fmt.Fprintf(&req, "GET /foo HTTP/1.1\r\nHost: 10.81.2.2:8080\r\n")
		for j := 0; req.Len() < 7900; j++ {
			fmt.Fprintf(&req, "X-Pad-%d: %s\r\n", j, strings.Repeat("p", 100))
		}
		fmt.Fprintf(&req, "traceparent: 00-%s-%s-01\r\n\r\n", trace, span)
		sent[trace] = span
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(req.Bytes()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(20 * time.Millisecond) // one request at a time on the wire
	}
	client := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	c.Close()
	time.Sleep(time.Second) // the matcher's window and the store's flush
	if dropped := n.line.Dropped(); dropped != 0 {
		t.Errorf("the delay line lost %d frames", dropped)
	}
	a.stop()
	b.stop()

	type rec struct {
		TraceID   string       `json:"trace_id"`
		SpanID    string       `json:"span_id"`
		Kind      string       `json:"kind"`
		SrcPort   uint16       `json:"src_port"`
		DstPort   uint16       `json:"dst_port"`
		Hops      []latencyHop `json:"hops"`
		RoundTrip *struct {
			FromIface string `json:"from_iface"`
			ToIface   string `json:"to_iface"`
			LatencyNs int64  `json:"latency_ns"`
		} `json:"round_trip"`
	}
	query := func(stores ...*agent) []rec {
		args := []string{"latency", "--since", "0", "--json"}
		for _, s := range stores {
			args = append(args, "--store", filepath.Join(s.dir, "store"))
		}
		out, err := exec.Command(loupeBin, args...).Output()
		if err != nil {
			t.Fatalf("loupe %v: %v", args, err)
		}
		var rs []rec
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var x rec
			if err := json.Unmarshal([]byte(l), &x); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			rs = append(rs, x)
		}
		return rs
	}
	path := func(x rec) (p []string) {
		for _, h := range x.Hops {
			p = append(p, h.From+">"+h.To+":"+h.Direction)
			if h.LatencyNs <= 0 {
				t.Errorf("hop %s>%s of %d ns", h.From, h.To, h.LatencyNs)
			}
		}
		return p
	}
	for _, node := range []struct {
		a            *agent
		out, replies []string
	}{
		{a, []string{"vpa>vxlan0:out", "vxlan0>ula:out"}, []string{"ula>vxlan0:in", "vxlan0>vpa:in"}},
		{b, []string{"ulb>vxlan0:in", "vxlan0>vpb:in"}, []string{"vpb>vxlan0:out", "vxlan0>ulb:out"}},
	} {
		found, replies := 0, 0
		for _, x := range query(node.a) {
			switch {
			case x.SrcPort == client && x.TraceID != "":
				found++
				if sent[x.TraceID] != x.SpanID || x.Kind != "request" || !slices.Equal(path(x), node.out) {
					t.Errorf("%s: request %+v: want span %s, path %v", node.a.ns.Name, x, sent[x.TraceID], node.out)
				}
			case x.DstPort == client:
				replies++
				if x.TraceID != "" || x.Kind != "sampled" || !slices.Equal(path(x), node.replies) {
					t.Errorf("%s: reply %+v: want a sampled record without a trace id, path %v", node.a.ns.Name, x, node.replies)
				}
			}
		}
		// Each request's response is one segment (headers and body).
		if found != requests || replies != requests {
			t.Errorf("%s: %d requests with their trace id and %d replies matched, want %d of each", node.a.ns.Name, found, replies, requests)
		}
	}
	// The two stores joined: every request has its round trip between
	// node A's underlay and node B's, from its reply.
	rts := 0
	for _, x := range query(a, b) {
		if x.SrcPort != client || x.TraceID == "" {
			continue
		}
		if x.RoundTrip == nil || x.RoundTrip.FromIface != "ula" || x.RoundTrip.ToIface != "ulb" || x.RoundTrip.LatencyNs <= 0 {
			t.Errorf("joined request %s: round trip %+v, want ula to ulb, positive", x.TraceID, x.RoundTrip)
			continue
		}
		rts++
	}
	if rts != requests {
		t.Errorf("%d of %d requests have a round trip", rts, requests)
	}

	// Node A's pod veth saw requests as one buffer of the whole request
	// (TCP may also cut one into two buffers, as it did the first of a
	// connection here): each of those has its trace context.
	whole := 0
	if _, err := store.ReadHops(filepath.Join(a.dir, "store"), time.Time{}, func(r *hop.Request) error {
		for _, p := range r.Path {
			if p.Iface == "vpa" && p.Len > 7900 {
				whole++
				if sent[r.TraceID] == "" {
					t.Errorf("a request seen whole at vpa without its trace context: %+v", r)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d requests seen at vpa as one buffer of the whole request, each with its trace id", whole, requests)
	if whole == 0 {
		t.Error("no request seen at vpa as one buffer of the whole request")
	}
}
