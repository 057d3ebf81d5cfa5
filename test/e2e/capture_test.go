package e2e

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"loupe/internal/testutil"
)

// TestCaptureTriggeredHTTPErrors runs the thesis's set-up (nginx with /foo
// answering 200 and /bar 500, clients in another namespace) under the agent
// with --capture-dir and --mirror, and holds the capture to tcpdump on the
// same interface:
//   - the connections captured are exactly those that received a 500:
//     keep-alive connections mixing 200s and 500s, a 500 pipelined behind a
//     200, behind a 256 KB response (GSO super-packets on the veth), over
//     IPv6; none of the clean connections;
//   - every packet of a failed connection from the one that carried the
//     status line on is in the pcapng, and nothing before it but the
//     packets kept before the trigger, which include the failing request;
//   - the mirror interface received exactly the packets captured live;
//   - tshark reads the files without a complaint and finds the 500s.
func TestCaptureTriggeredHTTPErrors(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t) // a: clients, b: nginx and the agent
	p.up(t)
	mir, mirPeer := testutil.UniqueName("lpm"), testutil.UniqueName("lpn")
	p.b.IP(t, "link", "add", mir, "type", "veth", "peer", "name", mirPeer)
	p.b.IP(t, "link", "set", mir, "up")
	p.b.IP(t, "link", "set", mirPeer, "up")
	startNginx(t, p.b, p.b4, p.b6)

	ref := startTcpdump(t, p.b, p.vethB, "tcp port 80")
	mirrored := startTcpdump(t, p.b, mirPeer, "tcp port 80")
	capDir := filepath.Join(t.TempDir(), "capture")
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir, "--mirror", mir}})

	var conns []*httpConn
	run := func(h *httpConn, sends ...[]string) {
		for _, paths := range sends {
			h.send(paths...)
		}
		h.close()
		conns = append(conns, h)
	}
	run(dialHTTP(t, p.a, p.b4), []string{"/foo"}, []string{"/foo"})                   // clean, keep-alive
	run(dialHTTP(t, p.a, p.b4), []string{"/foo"}, []string{"/bar"}, []string{"/foo"}) // fails midway
	run(dialHTTP(t, p.a, p.b4), []string{"/foo", "/bar"}, []string{"/foo"})           // pipelined: 500 behind a 200
	run(dialHTTP(t, p.a, p.b4), []string{"/big", "/bar"})                             // 500 behind 256 KB
	run(dialHTTP(t, p.a, p.b6), []string{"/bar"})                                     // IPv6
	run(dialHTTP(t, p.a, p.b6), []string{"/foo"}, []string{"/big"})                   // clean, IPv6, big
	run(dialHTTP(t, p.a, p.b4), []string{"/big"}, []string{"/foo", "/foo", "/foo"})   // clean, pipelined
	run(dialHTTP(t, p.a, p.b4), []string{"/foo"}, []string{"/bar"}, []string{"/bar"}) // two 500s
	run(dialHTTP(t, p.a, p.b6), []string{"/foo", "/foo", "/bar"}, []string{"/foo"})   // pipelined, IPv6

	m := a.metrics()
	for _, ev := range []string{"triggers", "packets", "kept_sent", "mirrored", "mirror_errors", "packets_lost", "kept_overwritten"} {
		t.Logf("%s: %v", ev, m[`loupe_capture_datapath_events_total{event="`+ev+`"}`])
	}
	a.stop()
	ref.stop(t)
	mirrored.stop(t)

	files, err := filepath.Glob(filepath.Join(capDir, "*.pcapng"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pcapng file in %s (%v)", capDir, err)
	}
	var captured []pkt
	for _, f := range files {
		captured = append(captured, readPackets(t, f)...)
	}
	reference := readPackets(t, ref.file)
	mirror := readPackets(t, mirrored.file)

	failed := map[uint16]bool{}
	for _, h := range conns {
		if h.failed() {
			failed[h.port] = true
		}
	}
	capturedPorts := map[uint16]bool{}
	for _, c := range captured {
		capturedPorts[c.clientPort()] = true
	}
	for port := range failed {
		if !capturedPorts[port] {
			t.Errorf("connection from port %d received a 500 but was not captured", port)
		}
	}
	for port := range capturedPorts {
		if !failed[port] {
			t.Errorf("connection from port %d never failed but was captured", port)
		}
	}

	var live []string
	for port := range failed {
		var want, got, kept []string
		// The client's packets that tcpdump saw before the status line,
		// pure ACKs and the next request alike: one can cross the
		// client's hook on one CPU while the response crosses the
		// server's on the other, so that the trigger has fired when it
		// is captured, though tcpdump, which stamps packets elsewhere,
		// orders it first.
		clientBefore := map[string]bool{}
		triggered := false
		var lastRequest *pkt
		var tail []byte // the end of the server's last segment: a status line may straddle two
		for i := range reference {
			r := &reference[i]
			if r.clientPort() != port {
				continue
			}
			if !triggered && r.srcPort == 80 && len(r.payload) > 0 {
				joined := append(tail, r.payload...)
				triggered = bytes.Contains(joined, []byte("HTTP/1.1 500"))
				tail = bytes.Clone(joined[max(0, len(joined)-11):])
			}
			if triggered {
				want = append(want, r.key())
			} else if r.dstPort == 80 {
				clientBefore[r.key()] = true
				if r.len > 0 {
					lastRequest = r
				}
			}
		}
		for _, c := range captured {
			if c.clientPort() != port {
				continue
			}
			if strings.Contains(c.comment, "kept-before-trigger") {
				kept = append(kept, c.key())
				continue
			}
			if clientBefore[c.key()] && !slices.Contains(want, c.key()) {
				// Live all the same: the mirror, deciding at the same
				// hook, sends it too.
				live = append(live, c.key())
				continue
			}
			got = append(got, c.key())
			if !strings.Contains(c.comment, "status=500") || !strings.Contains(c.comment, "trigger=http.status=500-599") {
				t.Errorf("port %d: comment %q does not name the trigger and status", port, c.comment)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(want, got) {
			t.Errorf("port %d: captured from the trigger on:\n%s\ntcpdump from the status line on:\n%s",
				port, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if lastRequest == nil || !slices.Contains(kept, lastRequest.key()) {
			t.Errorf("port %d: the failing request %v is not among the packets kept before the trigger: %v", port, lastRequest, kept)
		}
		live = append(live, got...)
		t.Logf("port %d: %d packets from the trigger on, %d kept before it", port, len(got), len(kept))
	}

	var mirrorKeys []string
	for _, m := range mirror {
		mirrorKeys = append(mirrorKeys, m.key())
	}
	slices.Sort(live)
	slices.Sort(mirrorKeys)
	if !slices.Equal(live, mirrorKeys) {
		t.Errorf("mirror interface saw %d packets, the capture %d live ones:\nmirror:\n%s\ncapture:\n%s",
			len(mirrorKeys), len(live), strings.Join(mirrorKeys, "\n"), strings.Join(live, "\n"))
	}

	// tshark's HTTP dissector finds the 500s in the files, for every
	// failed connection whose 500 is in a segment that begins with a
	// status line (the 500's or a pipelined 200's), on a connection of
	// which no packet was truncated. Behind the 256 KB response, kept
	// truncated before the trigger, it cannot: the dissector waits for a
	// body it will never have, and no dissector resynchronises in
	// mid-segment; tcpdump -s 2048 would leave the same file. The
	// packet's comment names the status there (checked above).
	dissectable, truncated := map[uint16]bool{}, map[uint16]bool{}
	for _, c := range captured {
		if len(c.payload) < c.len {
			truncated[c.clientPort()] = true
		}
	}
	for _, r := range reference {
		if r.srcPort == 80 && !truncated[r.clientPort()] &&
			bytes.HasPrefix(r.payload, []byte("HTTP/1.1 ")) && bytes.Contains(r.payload, []byte("HTTP/1.1 500")) {
			dissectable[r.clientPort()] = true
		}
	}
	codes := map[uint16]bool{}
	for _, f := range files {
		out := runTshark(t, "-r", f, "-n", "-Y", "http.response.code == 500", "-T", "fields", "-e", "tcp.dstport")
		for _, l := range strings.Fields(out) {
			codes[parsePort(t, l)] = true
		}
	}
	for port := range failed {
		if dissectable[port] && !codes[port] {
			var dump []string
			for _, f := range files {
				dump = append(dump, runTshark(t, "-r", f, "-n", "-Y", fmt.Sprintf("tcp.port == %d", port)))
			}
			t.Errorf("tshark finds no 500 response for port %d in the capture files:\n%s", port, strings.Join(dump, ""))
		}
	}
	if len(dissectable) < len(failed)-1 {
		t.Errorf("only %d of the %d failed connections had a 500 at the start of a segment", len(dissectable), len(failed))
	}
	if len(failed) != 6 {
		t.Errorf("%d connections failed, want 6: the traffic plan changed", len(failed))
	}
}
