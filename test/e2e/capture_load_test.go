package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"loupe/internal/api"
	"loupe/internal/capability/capture"
	"loupe/internal/testutil"
)

// The capture under load and abuse: a follower that stops reading, more
// connections than the table holds, payload that is not HTTP, and the
// live stream read by tcpdump.

// TestCaptureStalledFollower opens the live stream on the control socket
// and never reads it, then captures far more packets than its queue and
// the socket hold. The follower's packets are dropped and counted; the
// agent keeps answering; the files hold every packet the agent received,
// which is every packet the kernel sent (any the perf buffer refused are
// counted on both sides alike); the agent stops cleanly.
func TestCaptureStalledFollower(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t)
	p.up(t)
	startNginx(t, p.b, p.b4)
	capDir := filepath.Join(t.TempDir(), "capture")
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir,
		"--trigger", "http.status=200-299 packets=0"}})

	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.control)
	}}
	req, err := http.NewRequest(http.MethodGet, "http://loupe"+capture.FollowPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close(); tr.CloseIdleConnections() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("follow: %s", resp.Status)
	}
	if got := pollMetric(t, a, "loupe_capture_followers", 1, 5*time.Second); got != 1 {
		t.Fatalf("%v followers, want 1", got)
	}

	// One keep-alive connection, a 200 after another: one trace, about
	// two packets a request.
	h := dialHTTP(t, p.a, p.b4)
	start, n := time.Now(), 0
	for ; n < 6000 && time.Since(start) < 20*time.Second; n++ {
		h.send("/foo")
	}
	h.close()
	t.Logf("%d requests in %v", n, time.Since(start).Round(time.Millisecond))

	asked := time.Now()
	var st api.Status
	if err := json.Unmarshal([]byte(loupeOutput(t, "status", "--json", "--control", a.control)), &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("loupe status answered in %v", time.Since(asked).Round(time.Microsecond))
	if c := capabilityNamed(st, "capture"); c == nil || c.State != "running" || c.Detail["followers"] != float64(1) {
		t.Errorf("capture status %+v, want running with 1 follower", c)
	}

	// Every packet the kernel sent read and written: the count settles.
	var m map[string]float64
	deadline := time.Now().Add(10 * time.Second)
	for prev := -1.0; ; {
		m = a.metrics()
		written := m["loupe_capture_packets_written_total"]
		if written == prev && written == captureEvent(m, "packets")+captureEvent(m, "kept_sent") || time.Now().After(deadline) {
			break
		}
		prev = written
		time.Sleep(200 * time.Millisecond)
	}
	written, dropped := m["loupe_capture_packets_written_total"], m["loupe_capture_follower_dropped_packets_total"]
	t.Logf("written %v, follower dropped %v; kernel: packets %v kept_sent %v packets_lost %v; reader lost %v",
		written, dropped, captureEvent(m, "packets"), captureEvent(m, "kept_sent"), captureEvent(m, "packets_lost"),
		m["loupe_capture_reader_lost_total"])
	if dropped <= 0 || dropped >= written {
		t.Errorf("follower dropped %v of %v packets: want some, not all", dropped, written)
	}
	if sent := captureEvent(m, "packets") + captureEvent(m, "kept_sent"); written != sent {
		t.Errorf("the agent wrote %v packets, the kernel sent %v", written, sent)
	}
	if lost, rl := captureEvent(m, "packets_lost"), m["loupe_capture_reader_lost_total"]; lost != rl {
		t.Errorf("the kernel counted %v packets lost, the reader %v", lost, rl)
	}
	if written+captureEvent(m, "packets_lost") < float64(2*n) {
		t.Errorf("%v packets written, %v lost, for %d requests and responses", written, captureEvent(m, "packets_lost"), n)
	}

	stopAt := time.Now()
	a.stop()
	// The handler blocked writing to the follower holds the control API's
	// shutdown for its close timeout (5 s), then its connection is closed.
	took := time.Since(stopAt)
	t.Logf("the agent stopped in %v with the follower still connected", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("the agent took %v to stop", took)
	}
	if !a.logged("a capture follower was too slow", fmt.Sprintf("dropped=%d", int(dropped))) {
		t.Errorf("no warning that the follower was too slow with dropped=%d", int(dropped))
	}
	if got := len(readCaptureDir(t, capDir)); float64(got) != written {
		t.Errorf("the files hold %d packets, the agent wrote %v", got, written)
	}
	if a.logged("level=ERROR") {
		t.Errorf("the agent logged an error")
	}
}

// TestCaptureConnectionFlood runs 1500 connections through a table of 64,
// then one that fails: the table stays within its size, every connection
// was entered, and the failing one is captured, its request with it.
func TestCaptureConnectionFlood(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t)
	p.up(t)
	startNginx(t, p.b, p.b4)
	capDir := filepath.Join(t.TempDir(), "capture")
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir, "--capture-connections", "64"}})

	start, n := time.Now(), 0
	for ; n < 1500 && time.Since(start) < 30*time.Second; n++ {
		get(t, p.a, p.b4, "/foo")
	}
	t.Logf("%d connections in %v", n, time.Since(start).Round(time.Millisecond))
	last := get(t, p.a, p.b4, "/bar")
	if got := pollMetric(t, a, "loupe_capture_traces_total", 1, 5*time.Second); got != 1 {
		t.Errorf("%v traces, want 1", got)
	}
	loupeOutput(t, "status", "--json", "--control", a.control) // alive and answering
	m := a.metrics()
	t.Logf("connections %v (capacity %v); conns_new %v, conns_table_full %v, conns_expired %v, kept_overwritten %v",
		m["loupe_capture_connections"], m["loupe_capture_connections_capacity"], captureEvent(m, "conns_new"),
		captureEvent(m, "conns_table_full"), captureEvent(m, "conns_expired"), captureEvent(m, "kept_overwritten"))
	if got := m["loupe_capture_connections"]; got > 64 || got < 1 {
		t.Errorf("%v connections in the table of 64", got)
	}
	if got := m["loupe_capture_connections_capacity"]; got != 64 {
		t.Errorf("capacity %v, want 64", got)
	}
	if got := captureEvent(m, "conns_new"); got < float64(n+1) {
		t.Errorf("conns_new %v, want at least the %d connections", got, n+1)
	}
	if got := captureEvent(m, "conns_table_full"); got != 0 {
		t.Errorf("conns_table_full %v: the LRU table refused connections instead of evicting", got)
	}
	a.stop()

	var request, response bool
	for _, c := range readCaptureDir(t, capDir) {
		if c.clientPort() != last.port {
			t.Errorf("captured a packet of port %d; only %d failed", c.clientPort(), last.port)
			continue
		}
		request = request || c.dstPort == 80 && bytes.HasPrefix(c.payload, []byte("GET /bar ")) && bytes.Contains([]byte(c.comment), []byte("kept-before-trigger"))
		response = response || c.srcPort == 80 && bytes.HasPrefix(c.payload, []byte("HTTP/1.1 500 "))
	}
	if !request || !response {
		t.Errorf("the failing connection (port %d): request kept %v, 500 captured %v", last.port, request, response)
	}
}

// TestCaptureNotHTTP runs a server on port 80 that answers random bytes,
// TLS records and text that looks like a status line but is not one
// (HTTP/1.1 5x0, HTTP/1.1 600, HTTP/2 500, lower case, one split over two
// segments), to clients that send binary: with a trigger on every status
// code, no status line is found and nothing is captured, while every
// segment is scanned.
func TestCaptureNotHTTP(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t)
	p.up(t)
	rng := rand.New(rand.NewPCG(7, 80))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	record := func(typ byte, body []byte) []byte { // a TLS 1.2 record
		return cat([]byte{typ, 3, 3, byte(len(body) >> 8), byte(len(body))}, body)
	}
	clientHello := cat([]byte{0x16, 3, 1, 0x01, 0xfc, 0x01, 0, 0x01, 0xf8, 3, 3}, random(0x1f8-2))
	exchanges := []struct {
		client []byte
		server [][]byte // written 20 ms apart: a segment each
	}{
		{random(700), [][]byte{random(1300)}},
		{clientHello, [][]byte{cat(record(0x16, cat([]byte{2, 0, 0, 82, 3, 3}, random(80))), record(0x14, []byte{1}), record(0x17, random(600)))}},
		{record(0x17, random(300)), [][]byte{record(0x15, []byte{2, 40})}},
		{random(64), [][]byte{[]byte("HTTP/1.1 5x0 Bad\r\nContent-Length: 0\r\n\r\n")}},
		{random(64), [][]byte{[]byte("HTTP/1.1 600 Nope\r\nContent-Length: 0\r\n\r\n")}},
		{random(64), [][]byte{[]byte("HTTP/2 500\r\ncontent-length: 0\r\n\r\n")}},
		{random(64), [][]byte{[]byte("http/1.1 500 Internal Server Error\r\n\r\n")}},
		{random(64), [][]byte{cat(random(200), []byte("HTTP/1.x 500 HTTP/1.1 5 00 HTTP/1.1 -50 HTTP/1.1 099 HTTP/1.1\t500 HTTP/1.1  500"), random(200))}},
		{random(64), [][]byte{cat(random(50), []byte("HTTP/1.1 50")), []byte("x Bad Gateway\r\n\r\n")}},
		{cat([]byte("HTTP/1.1 6"), random(40)), [][]byte{random(1400), random(1400)}},
	}
	var segments, scanned int
	for _, x := range exchanges {
		segments += 1 + len(x.server)
		scanned += len(x.client)
		for _, w := range x.server {
			scanned += len(w)
		}
	}
	next := 0
	serveTCP(t, p.b, netip.AddrPortFrom(p.b4, 80), func(c *net.TCPConn) {
		if next >= len(exchanges) {
			return
		}
		x := exchanges[next]
		next++
		if _, err := io.ReadFull(c, make([]byte, len(x.client))); err != nil {
			return
		}
		for i, w := range x.server {
			if i > 0 {
				time.Sleep(20 * time.Millisecond)
			}
			c.Write(w)
		}
	})
	capDir := filepath.Join(t.TempDir(), "capture")
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir, "--trigger", "http.status=100-599"}})

	for i, x := range exchanges {
		var c net.Conn
		if err := p.a.Do(func() (err error) {
			c, err = net.DialTimeout("tcp", netip.AddrPortFrom(p.b4, 80).String(), 5*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(x.client); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.Equal(got, bytes.Join(x.server, nil)) {
			t.Fatalf("exchange %d: read %d bytes (%v), want the server's %d", i, len(got), err, len(bytes.Join(x.server, nil)))
		}
	}
	m := a.metrics()
	loupeOutput(t, "status", "--json", "--control", a.control)
	a.stop()
	t.Logf("segments_scanned %v bytes_scanned %v (sent %d segments, %d bytes); status_lines %v, traces %v",
		captureEvent(m, "segments_scanned"), captureEvent(m, "bytes_scanned"), segments, scanned,
		captureEvent(m, "status_lines"), m["loupe_capture_traces_total"])
	for name, want := range map[string]float64{
		"loupe_capture_traces_total":                                        0,
		"loupe_capture_packets_written_total":                               0,
		`loupe_capture_datapath_events_total{event="triggers"}`:             0,
		`loupe_capture_datapath_events_total{event="status_lines"}`:         0,
		`loupe_capture_datapath_events_total{event="split_status_lines"}`:   0,
		`loupe_capture_datapath_events_total{event="segments_scanned"}`:     float64(segments),
		`loupe_capture_datapath_events_total{event="bytes_scanned"}`:        float64(scanned),
		`loupe_capture_datapath_events_total{event="not_scanned_parse"}`:    0,
		`loupe_capture_datapath_events_total{event="not_scanned_load"}`:     0,
		`loupe_capture_datapath_events_total{event="not_scanned_too_long"}`: 0,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(capDir, "*.pcapng")); len(files) > 0 {
		if got := readCaptureDir(t, capDir); len(got) != 0 {
			t.Errorf("%d packets captured, want none", len(got))
		}
	}
}

// TestCaptureFollowIntoTcpdump pipes `loupe capture --follow -w -` into
// tcpdump -r - and makes one connection fail: tcpdump reads exactly the
// packets the agent's file holds for it, kept ones included, in order.
func TestCaptureFollowIntoTcpdump(t *testing.T) {
	testutil.RequirePrivileged(t)
	tcpdumpBin := testutil.RequirePeer(t, "tcpdump")
	p := newPair(t)
	p.up(t)
	startNginx(t, p.b, p.b4)
	capDir := filepath.Join(t.TempDir(), "capture")
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir}})

	out := filepath.Join(t.TempDir(), "follow.pcap")
	follow := exec.Command(loupeBin, "capture", "--follow", "-w", "-", "--duration", "60s", "--control", a.control)
	td := exec.Command(tcpdumpBin, "-n", "-U", "-r", "-", "-w", out)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	followErr, tdErr := &testutil.Buffer{}, &testutil.Buffer{}
	follow.Stdout, follow.Stderr = w, followErr
	td.Stdin, td.Stdout, td.Stderr = r, tdErr, tdErr
	if err := td.Start(); err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	w.Close()
	followDone, tdDone := make(chan error, 1), make(chan error, 1)
	go func() { followDone <- follow.Wait() }()
	go func() { tdDone <- td.Wait() }()
	t.Cleanup(func() {
		follow.Process.Kill()
		td.Process.Kill()
	})
	if got := pollMetric(t, a, "loupe_capture_followers", 1, 5*time.Second); got != 1 {
		t.Fatalf("%v followers, want 1", got)
	}

	h := dialHTTP(t, p.a, p.b4)
	h.send("/foo")
	h.send("/bar")
	h.send("/foo", "/foo")
	h.close()
	clean := get(t, p.a, p.b4, "/foo")
	written := pollStable(t, a, "loupe_capture_packets_written_total")
	// tcpdump -U writes each packet as it reads it: wait for them all.
	deadline := time.Now().Add(10 * time.Second)
	for countPcap(t, out) < int(written) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	follow.Process.Signal(syscall.SIGINT)
	for name, done := range map[string]chan error{"loupe capture": followDone, "tcpdump": tdDone} {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v\n%s%s", name, err, followErr.String(), tdErr.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not end", name)
		}
	}
	a.stop()

	var inFile []string
	for _, c := range readCaptureDir(t, capDir) {
		if c.clientPort() == clean.port {
			t.Errorf("the clean connection was captured: %s", c.key())
		}
		if c.clientPort() == h.port {
			inFile = append(inFile, c.key())
		}
	}
	var read []string
	for _, c := range readPackets(t, out) {
		read = append(read, c.key())
	}
	t.Logf("tcpdump read %d packets, the file holds %d for port %d (written %v); tcpdump said %q",
		len(read), len(inFile), h.port, written, tdErr.String())
	if len(inFile) == 0 || !slices.Equal(read, inFile) {
		t.Errorf("tcpdump read:\n%v\nthe file holds:\n%v", read, inFile)
	}
}

// pollStable waits until the agent's metric is the same in two scrapes
// 300 ms apart (at most 10 s), and returns it.
func pollStable(t *testing.T, a *agent, name string) float64 {
	t.Helper()
	prev := a.metrics()[name]
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		got := a.metrics()[name]
		if got == prev {
			return got
		}
		prev = got
	}
	t.Fatalf("%s still moving after 10s", name)
	return 0
}

// countPcap counts the packets of a pcap file being written (0 before its
// header is).
func countPcap(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return 0
	}
	n := 0
	for {
		if _, _, err := r.ReadPacketData(); err != nil {
			return n
		}
		n++
	}
}
