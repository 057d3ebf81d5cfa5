package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"loupe/internal/capability/capture"
	"loupe/internal/testutil"
)

// TestCaptureSplitStatusLine has a server write its status line in two
// segments 50 ms apart (TCP_NODELAY: each write is a segment), split at
// several points, and requires for each connection: the trace fires on
// the second segment with status 503 and split_status_line=true; the
// first segment, and the request before it, are in the pcapng as kept
// before the trigger; the second is captured live.
func TestCaptureSplitStatusLine(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t) // a: the client, b: the server and the agent
	p.up(t)
	const resp = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	cases := []struct {
		name, path, first, rest string
		responses               int // the client reads the last one's status
	}{
		{"at 10", "/split/10", resp[:10], resp[10:], 1}, // "HTTP/1.1 5" | "03 Service Unavailable..."
		{"at 11", "/split/11", resp[:11], resp[11:], 1}, // "HTTP/1.1 50" | "3 ..."
		{"at 8", "/split/8", resp[:8], resp[8:], 1},     // "HTTP/1.1" | " 503 ..."
		{"at 1", "/split/1", resp[:1], resp[1:], 1},     // "H" | "TTP/1.1 503 ..."
		// The second of two responses, split at 10 bytes into it.
		{"behind a 200", "/behind", ok + resp[:10], resp[10:], 2},
	}
	server := netip.AddrPortFrom(p.b4, 8080)
	serveTCP(t, p.b, server, func(c *net.TCPConn) {
		c.SetNoDelay(true)
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		for _, k := range cases {
			if k.path == req.URL.Path {
				c.Write([]byte(k.first))
				time.Sleep(50 * time.Millisecond)
				c.Write([]byte(k.rest))
			}
		}
		io.Copy(io.Discard, c) // until the client closes
	})
	capDir := filepath.Join(t.TempDir(), "capture")
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir}})

	ports := make([]uint16, len(cases))
	for i, k := range cases {
		var c net.Conn
		if err := p.a.Do(func() (err error) {
			c, err = net.DialTimeout("tcp", server.String(), 5*time.Second)
			return err
		}); err != nil {
			t.Fatalf("dial %s: %v", server, err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		ports[i] = uint16(c.LocalAddr().(*net.TCPAddr).Port)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: loupe.test\r\n\r\n", k.path)
		r := bufio.NewReader(c)
		status := 0
		for range k.responses {
			res, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("%s: read response: %v", k.name, err)
			}
			io.Copy(io.Discard, res.Body)
			status = res.StatusCode
		}
		c.Close()
		if status != 503 {
			t.Fatalf("%s: status %d, want 503", k.name, status)
		}
	}
	if got := pollMetric(t, a, "loupe_capture_traces_total", float64(len(cases)), 5*time.Second); got != float64(len(cases)) {
		t.Errorf("%v traces, want %d", got, len(cases))
	}
	m := a.metrics()
	t.Logf("traces %v, status_lines %v, split_status_lines %v, kept_sent %v, packets %v",
		m["loupe_capture_traces_total"], captureEvent(m, "status_lines"), captureEvent(m, "split_status_lines"),
		captureEvent(m, "kept_sent"), captureEvent(m, "packets"))
	// Every case's status line is split; the 200 is one more, whole.
	if got := captureEvent(m, "split_status_lines"); got != float64(len(cases)) {
		t.Errorf("split_status_lines %v, want %d", got, len(cases))
	}
	if got := captureEvent(m, "status_lines"); got != float64(len(cases)+1) {
		t.Errorf("status_lines %v, want %d", got, len(cases)+1)
	}
	a.stop()
	captured := readCaptureDir(t, capDir)

	for i, k := range cases {
		port := ports[i]
		t.Run(k.name, func(t *testing.T) {
			if !a.logged("trace started", fmt.Sprintf("dst=%s:%d ", p.a4, port), "status=503", "split_status_line=true") {
				t.Errorf("no log line: trace started on port %d with status=503 split_status_line=true", port)
			}
			var first, rest, request *pkt
			traces := map[string]bool{}
			for j := range captured {
				c := &captured[j]
				if c.srcPort != port && c.dstPort != port {
					continue
				}
				trace, _, _ := strings.Cut(c.comment, " ")
				traces[trace] = true
				switch {
				case c.srcPort == 8080 && string(c.payload) == k.first:
					first = c
				case c.srcPort == 8080 && string(c.payload) == k.rest:
					rest = c
				case c.dstPort == 8080 && bytes.HasPrefix(c.payload, []byte("GET "+k.path+" ")):
					request = c
				}
			}
			if len(traces) != 1 {
				t.Errorf("packets of port %d in %d traces %v, want 1", port, len(traces), traces)
			}
			for _, w := range []struct {
				what string
				p    *pkt
				kept bool
			}{{"the request", request, true}, {"the first segment", first, true}, {"the second segment", rest, false}} {
				switch {
				case w.p == nil:
					t.Errorf("%s is not in the capture", w.what)
				case !strings.Contains(w.p.comment, "status=503"):
					t.Errorf("%s: comment %q lacks status=503", w.what, w.p.comment)
				case strings.Contains(w.p.comment, "kept-before-trigger") != w.kept:
					t.Errorf("%s: comment %q, want kept-before-trigger %v", w.what, w.p.comment, w.kept)
				}
			}
		})
	}
}

// TestCaptureVLANTaggedStatusLine sends, from the client's side, one
// Ethernet frame tagged with VLAN 7 that carries IPv4/TCP with a 500
// status line. The receiving veth moves the tag into the skb's metadata
// before TC ingress; the agent must find the status line behind it: one
// trace, one packet captured, its bytes the frame's.
func TestCaptureVLANTaggedStatusLine(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t)
	p.up(t)
	capDir := filepath.Join(t.TempDir(), "capture")
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir}})

	payload := []byte("HTTP/1.1 500 Internal Server Error\r\n\r\n")
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: 4242, Protocol: layers.IPProtocolTCP,
		SrcIP: p.a4.AsSlice(), DstIP: p.b4.AsSlice()}
	tcp := &layers.TCP{SrcPort: 80, DstPort: 40007, Seq: 1000, Ack: 2000, PSH: true, ACK: true, Window: 502}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: macOf(t, p.a, p.vethA), DstMAC: macOf(t, p.b, p.vethB), EthernetType: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeIPv4},
		ip, tcp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	frame := buf.Bytes()
	p.a.SendFrames(t, p.vethA, [][]byte{frame}, testutil.SendOptions{})

	a.waitLog(5*time.Second, "trace started", fmt.Sprintf("src=%s:80 dst=%s:40007 ", p.a4, p.b4), "status=500")
	pollMetric(t, a, "loupe_capture_packets_written_total", 1, 5*time.Second)
	m := a.metrics()
	for name, want := range map[string]float64{
		"loupe_capture_traces_total": 1, "loupe_capture_packets_written_total": 1,
		`loupe_capture_datapath_events_total{event="triggers"}`:     1,
		`loupe_capture_datapath_events_total{event="status_lines"}`: 1,
		`loupe_capture_datapath_events_total{event="packets"}`:      1,
		`loupe_capture_datapath_events_total{event="kept_sent"}`:    0,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	a.stop()

	captured := readCaptureDir(t, capDir)
	if len(captured) != 1 {
		t.Fatalf("%d packets captured, want 1: %+v", len(captured), captured)
	}
	c := captured[0]
	if c.srcPort != 80 || c.dstPort != 40007 || c.seq != 1000 || c.ack != 2000 || !bytes.Equal(c.payload, payload) {
		t.Errorf("captured %s payload %q; sent 80>40007 seq=1000 ack=2000 payload %q", c.key(), c.payload, payload)
	}
	if !strings.Contains(c.comment, "trigger=http.status=500-599 status=500") || strings.Contains(c.comment, "kept") {
		t.Errorf("comment %q", c.comment)
	}
	// The frame as written is the frame sent, its tag included: the hook
	// saw the tag in the skb's metadata, and the agent puts it back after
	// the MAC addresses, as libpcap does for tcpdump.
	files, _ := filepath.Glob(filepath.Join(capDir, "*.pcapng"))
	out := strings.TrimSpace(runTshark(t, "-r", files[0], "-T", "fields", "-E", "separator=|",
		"-e", "vlan.id", "-e", "frame.len", "-e", "ip.id", "-e", "ip.len"))
	ipLen, ipID := len(frame)-18, fmt.Sprintf("0x%04x", ip.Id)
	if want := fmt.Sprintf("7|%d|%s|%d", len(frame), ipID, ipLen); out != want {
		t.Errorf("captured frame vlan.id|frame.len|ip.id|ip.len = %q, want the frame sent, %q", out, want)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ng, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	data, ci, err := ng.ReadPacketData()
	if err != nil || !bytes.Equal(data, frame) || ci.Length != len(frame) {
		t.Errorf("captured bytes %x (length %d, %v), sent %x", data, ci.Length, err, frame)
	}
}

// TestCaptureTriggersChangedUnderTraffic alternates 500s and 404s on new
// connections while `loupe triggers add 'http.status=404 name=nf'` then
// `loupe triggers delete http.status=500-599` run: a connection wholly
// before the change is captured if and only if it got a 500, one wholly
// after it if and only if it got a 404; every packet captured names the
// trigger that matches its connection's status, including packets of a
// 5xx trace read after the 5xx trigger was deleted.
func TestCaptureTriggersChangedUnderTraffic(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t)
	p.up(t)
	startNginx(t, p.b, p.b4)
	capDir := filepath.Join(t.TempDir(), "capture")
	// No trigger rate limit: this test starts more than 100 a second.
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir, "--capture-max-triggers", "0"}})

	type change struct {
		start, end time.Time
		added      string
		err        error
	}
	begin, changed, quit := make(chan struct{}), make(chan change, 1), make(chan struct{})
	t.Cleanup(func() { close(quit) })
	go func() {
		select {
		case <-begin:
		case <-quit:
			return
		}
		c := change{start: time.Now()}
		out, err := exec.Command(loupeBin, "triggers", "add", "http.status=404 name=nf", "--control", a.control, "--json").CombinedOutput()
		c.added = string(out)
		if err != nil {
			c.err = fmt.Errorf("loupe triggers add: %v: %s", err, out)
		} else if out, err := exec.Command(loupeBin, "triggers", "delete", "http.status=500-599", "--control", a.control).CombinedOutput(); err != nil {
			c.err = fmt.Errorf("loupe triggers delete: %v: %s", err, out)
		}
		c.end = time.Now()
		changed <- c
	}()

	type conn struct {
		port       uint16
		status     int
		start, end time.Time
	}
	var conns []conn
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 400 && time.Now().Before(deadline); i++ {
		if i == 150 {
			close(begin)
		}
		path := "/bar"
		if i%2 == 1 {
			path = "/nf" // nginx has no such file: 404
		}
		start := time.Now()
		h := get(t, p.a, p.b4, path)
		conns = append(conns, conn{port: h.port, status: h.statuses[0], start: start, end: time.Now()})
		time.Sleep(10 * time.Millisecond)
	}
	var ch change
	select {
	case ch = <-changed:
	case <-time.After(20 * time.Second):
		t.Fatal("the trigger change did not finish")
	}
	if ch.err != nil {
		t.Fatal(ch.err)
	}
	var added capture.Trigger
	if err := json.Unmarshal([]byte(ch.added), &added); err != nil {
		t.Fatalf("loupe triggers add --json: %v: %s", err, ch.added)
	}
	if added.Name != "nf" || added.Event != "http.status" || !slices.Equal(added.Codes, []capture.CodeRange{{Lo: 404, Hi: 404}}) {
		t.Errorf("added %+v, want nf on 404", added)
	}
	var list capture.TriggerList
	if err := json.Unmarshal([]byte(loupeOutput(t, "triggers", "list", "--json", "--control", a.control)), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Triggers) != 1 || list.Triggers[0].Name != "nf" ||
		list.Triggers[0].Text != "http.status=404 packets=10000 bytes=67108864 duration=5m0s" {
		t.Errorf("triggers at the end: %+v, want nf alone", list.Triggers)
	}

	m := a.metrics()
	a.stop()
	captured := map[uint16][]string{} // port -> the triggers its packets name
	for _, c := range readCaptureDir(t, capDir) {
		for _, f := range strings.Fields(c.comment) {
			if name, ok := strings.CutPrefix(f, "trigger="); ok && !slices.Contains(captured[c.clientPort()], name) {
				captured[c.clientPort()] = append(captured[c.clientPort()], name)
			}
		}
	}
	want := map[int]string{500: "http.status=500-599", 404: "nf"}
	var n struct{ before500, before404, during, after404, after500, traced int }
	seen := map[uint16]bool{}
	for _, c := range conns {
		if seen[c.port] {
			t.Fatalf("port %d used twice: connections cannot be told apart", c.port)
		}
		seen[c.port] = true
		trig, got := captured[c.port]
		if got {
			n.traced++
			if !slices.Equal(trig, []string{want[c.status]}) {
				t.Errorf("port %d got %d; its packets name the triggers %q", c.port, c.status, trig)
			}
		}
		switch {
		case c.end.Before(ch.start) && c.status == 500:
			n.before500++
			if !got {
				t.Errorf("port %d got a 500 before the change and was not captured", c.port)
			}
		case c.end.Before(ch.start):
			n.before404++
			if got {
				t.Errorf("port %d got a 404 before the change and was captured", c.port)
			}
		case c.start.After(ch.end) && c.status == 404:
			n.after404++
			if !got {
				t.Errorf("port %d got a 404 after the change and was not captured", c.port)
			}
		case c.start.After(ch.end):
			n.after500++
			if got {
				t.Errorf("port %d got a 500 after the change and was captured", c.port)
			}
		default:
			n.during++
		}
	}
	t.Logf("%d connections; change took %v; before: %d 500s, %d 404s; during: %d; after: %d 404s, %d 500s; %d captured",
		len(conns), ch.end.Sub(ch.start), n.before500, n.before404, n.during, n.after404, n.after500, n.traced)
	if min(n.before500, n.before404, n.after404, n.after500) < 20 {
		t.Errorf("too few connections on one side of the change to tell: %+v", n)
	}
	if got := m["loupe_capture_traces_total"]; got != float64(n.traced) || captureEvent(m, "triggers") != got {
		t.Errorf("traces %v, datapath triggers %v; %d connections captured", got, captureEvent(m, "triggers"), n.traced)
	}
	if a.logged("level=ERROR") {
		t.Errorf("the agent logged an error")
	}
}

// TestCaptureDeletedTriggerEndsItsTraces starts a trace on a keep-alive
// connection (a 500), replaces the 5xx trigger by a 404 one as
// TestCaptureTriggersChangedUnderTraffic does, and goes on using the
// connection. docs/capture.md: "a trace whose trigger was deleted ends at
// its next packet": nothing sent after the deletion may be captured.
func TestCaptureDeletedTriggerEndsItsTraces(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t)
	p.up(t)
	startNginx(t, p.b, p.b4)
	capDir := filepath.Join(t.TempDir(), "capture")
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir}})

	h := dialHTTP(t, p.a, p.b4)
	h.send("/bar")
	if got := pollMetric(t, a, "loupe_capture_traces_total", 1, 5*time.Second); got != 1 {
		t.Fatalf("%v traces after a 500, want 1", got)
	}
	loupeOutput(t, "triggers", "add", "http.status=404 name=nf", "--control", a.control)
	loupeOutput(t, "triggers", "delete", "http.status=500-599", "--control", a.control)
	h.send("/foo")
	h.send("/foo", "/foo")
	h.close()
	m := a.metrics()
	a.stop()
	var live, after int
	for _, c := range readCaptureDir(t, capDir) {
		if c.clientPort() != h.port || strings.Contains(c.comment, "kept-before-trigger") {
			continue
		}
		live++
		if bytes.Contains(c.payload, []byte("GET /foo")) || bytes.Contains(c.payload, []byte("HTTP/1.1 200")) {
			after++
			t.Errorf("captured after its trigger was deleted: %s %q, comment %q", c.key(), c.payload, c.comment)
		}
	}
	t.Logf("%d packets captured live, %d of them after the trigger was deleted; traces_limited %v",
		live, after, captureEvent(m, "traces_limited"))
	if live == 0 {
		t.Errorf("the 500 was not captured")
	}
}

// pollMetric waits up to timeout for the agent's metric to reach want, and
// returns its last value.
func pollMetric(t *testing.T, a *agent, name string, want float64, timeout time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := a.metrics()[name]
		if got >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}
