package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
)

// TestRulesKeepTotalsExact runs the agent with a rules file, changes the
// rules twice while traffic flows (through the control API, then by
// rewriting the file, which the agent reloads), and holds every packet the
// interface counted to be in a flow record or in a rule's count of packets
// it kept out of flows (skipped, or sampled out): packets and bytes, both
// directions together. Sampled flows say their rate.
func TestRulesKeepTotalsExact(t *testing.T) {
	p := newPair(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "rules")
	write := func(text string) {
		t.Helper()
		// A new file renamed over the old: the agent never reads half.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("# phase 1\nid=skip-5002 proto=udp dport=5002 skip\nid=sample-5003 proto=udp dport=5003 sample 1:5\n")
	a := startAgent(t, p.a, agentOpts{args: []string{"--rules", file, "--rules-reload-interval", "100ms",
		"--cache-active-timeout", "200ms"}})
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	p.up(t)
	p.quiet(t)

	rules := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(loupeBin, append(append([]string{"rules"}, args...), "--control", a.control)...).CombinedOutput()
		if err != nil {
			t.Fatalf("loupe rules %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sinks := map[int]*udpSink{}
	for _, port := range []int{5002, 5003, 5004} {
		sinks[port] = newUDPSink(t, p.b, hostPort(p.b4, port))
	}
	tcpServer(t, p.b, hostPort(p.b4, 5001), 2000)
	sent := map[int]int{}
	traffic := func() {
		t.Helper()
		for _, port := range []int{5002, 5003, 5004} {
			s := udpSender(t, p.a, hostPort(p.b4, port))
			for i := range 40 {
				if _, err := s.Write(make([]byte, 10+i)); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			sent[port] += 40
			sinks[port].waitFor(t, sent[port])
		}
		tcpExchange(t, p.a, hostPort(p.b4, 5001), 5000, 2000)
	}
	traffic()

	// Garbage from a control-API client: refused with the reason, and
	// the rules in force untouched.
	before := rules("list", "--json")
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", a.control)
		}}}
	for _, tc := range []struct {
		method, path, body string
		code               int
		says               string
	}{
		{http.MethodPost, "/api/v1/rules", "{not json", 400, "body"},
		{http.MethodPost, "/api/v1/rules", `{"rule": "src=10.0.0.1/8 skip"}`, 400, "host bits"},
		{http.MethodPost, "/api/v1/rules", `{"rule": "proto=udp skip", "extra": 1}`, 400, "extra"},
		{http.MethodPost, "/api/v1/rules", `{"rule": "id=skip-5002 proto=tcp skip"}`, 422, "skip-5002"},
		{http.MethodPut, "/api/v1/rules", `{"text": "proto=udp skip\nproto=udp dprot=1 skip\n"}`, 400, "line 2"},
		{http.MethodDelete, "/api/v1/rules/no-such-rule", "", 404, "no-such-rule"},
		{http.MethodPost, "/api/v1/rules", strings.Repeat("x", 2<<20), 400, "body"},
	} {
		req, _ := http.NewRequest(tc.method, "http://loupe"+tc.path, strings.NewReader(tc.body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.says) {
			t.Errorf("%s %s %.40q: %d %s, want %d saying %q", tc.method, tc.path, tc.body, resp.StatusCode, body, tc.code, tc.says)
		}
	}
	if out, err := exec.Command(loupeBin, "rules", "add", "proto=udp dport=99999 skip", "--control", a.control).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "99999") {
		t.Errorf("loupe rules add with a bad port: %v: %s", err, out)
	}
	if after := rules("list", "--json"); after != before {
		t.Errorf("garbage changed the rules in force:\nbefore %s\nafter %s", before, after)
	}

	// Meanwhile, a stream to 5005 runs through every change (bounded:
	// 4000 datagrams, one every 250 us), so that packets cross the hook
	// while sets are swapped.
	stream := newUDPSink(t, p.b, hostPort(p.b4, 5005))
	streamDone := make(chan int)
	go func() {
		s := udpSender(t, p.a, hostPort(p.b4, 5005))
		defer s.Close()
		n := 0
		for ; n < 4000; n++ {
			if _, err := s.Write(make([]byte, 32)); err != nil {
				break
			}
			time.Sleep(250 * time.Microsecond)
		}
		streamDone <- n
	}()
	rules("add", "id=stream proto=udp dport=5005 sample 1:7")

	// Phase 2, through the API: the first rules go, TCP to 5001 is
	// skipped, UDP to 5004 sampled 1 in 3.
	rules("delete", "sample-5003")
	rules("delete", "skip-5002")
	rules("add", "id=skip-5001 proto=tcp port=5001 skip")
	rules("add", "id=sample-5004 proto=udp dport=5004 sample 1:3")
	rules("add", "id=agg dst="+p.b4.String()+"/32 proto=tcp dport=5001 aggregate /24")
	traffic()

	// A file that does not parse leaves the rules in force, and the log
	// names its bad line.
	before = rules("list", "--json")
	write("id=udp proto=udp sample 1:4\nproto=udp dprot=53 skip\n")
	a.waitLog(5*time.Second, "rules file not reloaded", "line 2", "dprot")
	if after := rules("list", "--json"); strings.Count(after, `"id"`) != strings.Count(before, `"id"`) {
		t.Errorf("a bad rules file changed the rules in force:\nbefore %s\nafter %s", before, after)
	}

	// Phase 3, through the file: every UDP packet sampled 1 in 4.
	write("id=udp proto=udp sample 1:4\n")
	a.waitLog(5*time.Second, "rules file reloaded")
	traffic()
	// The file's set replaced the API's at once: one rule, the file's.
	if list := rules("list", "--json"); strings.Count(list, `"id"`) != 1 || !strings.Contains(list, `"id": "udp"`) {
		t.Errorf("loupe rules list --json after the reload:\n%s", list)
	}

	stream.waitFor(t, <-streamDone)
	p.down(t)
	kernel := p.a.Stats(t, p.vethA)
	m := a.metrics()
	a.stop()

	var unmeasuredPk, unmeasuredBy float64
	for name, v := range m {
		switch {
		case strings.HasPrefix(name, "loupe_rule_packets_total{"):
			unmeasuredPk += v
		case strings.HasPrefix(name, "loupe_rule_measured_packets_total{"):
			unmeasuredPk -= v
		case strings.HasPrefix(name, "loupe_rule_bytes_total{"):
			unmeasuredBy += v
		case strings.HasPrefix(name, "loupe_rule_measured_bytes_total{"):
			unmeasuredBy -= v
		}
	}
	recs := a.exported()
	var pk, by uint64
	sampled := map[uint32]int{}
	for _, r := range recs {
		if r.Iface != p.vethA {
			continue
		}
		pk += r.Packets
		by += r.Bytes
		if r.Sampling > 1 {
			sampled[r.Sampling]++
		}
	}
	t.Logf("kernel rx+tx %d packets %d bytes; flows %d packets %d bytes; kept out by rules %.0f packets %.0f bytes; sampled records by rate %v",
		kernel.RxPackets+kernel.TxPackets, kernel.RxBytes+kernel.TxBytes, pk, by, unmeasuredPk, unmeasuredBy, sampled)
	if pk+uint64(unmeasuredPk) != kernel.RxPackets+kernel.TxPackets || by+uint64(unmeasuredBy) != kernel.RxBytes+kernel.TxBytes {
		t.Errorf("flows (%d packets, %d bytes) + kept out by rules (%.0f, %.0f) != what the interface counted (%d, %d)",
			pk, by, unmeasuredPk, unmeasuredBy, kernel.RxPackets+kernel.TxPackets, kernel.RxBytes+kernel.TxBytes)
	}
	if unmeasuredPk < 40 {
		t.Errorf("the rules kept only %.0f packets out of flows: the skip rules did not work", unmeasuredPk)
	}
	for _, rate := range []uint32{5, 3, 4} {
		if sampled[rate] == 0 {
			t.Errorf("no flow record says sampling %d", rate)
		}
	}
	// Phase 2's TCP to the server went into one aggregate of the two
	// /24s (agg's /32 beats skip-5001, which has no prefix); the replies
	// were skipped.
	var aggPk uint64
	for _, r := range recs {
		if r.Iface != p.vethA || r.AggPrefix == 0 {
			continue
		}
		if r.AggPrefix != 24 || r.Direction != flow.Egress || r.SrcPort != 0 || r.DstPort != 0 ||
			r.SrcIP().String() != "10.77.0.0" || r.DstIP().String() != "10.77.0.0" || r.SrcMAC != ([6]byte{}) {
			t.Errorf("aggregate record %+v: want egress 10.77.0.0/24 to 10.77.0.0/24, no ports or MACs", r.Key)
		}
		aggPk += r.Packets
	}
	if aggPk == 0 {
		t.Error("no aggregate record: the aggregate rule did not count")
	}
	// Phase 1 skipped UDP to 5002 and phase 3 sampled it: only phase 2
	// measured it whole, 40 datagrams.
	var whole uint64
	for _, r := range recs {
		if r.Iface == p.vethA && r.Direction == flow.Egress && r.Proto == 17 && r.DstPort == 5002 && r.Sampling == 1 {
			whole += r.Packets
		}
	}
	if whole != 40 {
		t.Errorf("UDP to 5002 measured whole: %d packets, want phase 2's 40", whole)
	}
}
