package e2e

import (
	"bytes"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// TestCaptureOnDemandFilter runs `loupe capture --filter` through the
// running agent while tcpdump captures the same filter on the same
// interface: over the same traffic, both hold the same packets. --count
// stops at exactly N packets; a filter the compiler refuses is an error
// naming the construct; a second capture while one runs is refused.
func TestCaptureOnDemandFilter(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t)
	p.up(t)
	tcpServer(t, p.b, hostPort(p.b4, 80), 3000)
	tcpServer(t, p.b, hostPort(p.b6, 8080), 100)
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-follow"}})

	const filter = "tcp port 80 or (ip6 and tcp)"
	file := filepath.Join(t.TempDir(), "ondemand.pcapng")
	cli := exec.Command(loupeBin, "capture", "--control", a.control, "--filter", filter, "--iface", p.vethB,
		"--duration", "5s", "-w", file)
	var cliErr bytes.Buffer
	cli.Stderr = &cliErr
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	cliDone := make(chan error, 1)
	go func() { cliDone <- cli.Wait() }()
	a.waitLog(10*time.Second, "on-demand capture started")
	ref := startTcpdump(t, p.b, p.vethB, filter)

	// A second capture while the first runs is refused.
	out, err := exec.Command(loupeBin, "capture", "--control", a.control, "--filter", "udp", "--count", "1", "-w", filepath.Join(t.TempDir(), "x")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "one at a time") {
		t.Errorf("a second on-demand capture: %v: %s", err, out)
	}

	for i := 0; i < 5; i++ {
		tcpExchange(t, p.a, hostPort(p.b4, 80), 500, 3000)
		tcpExchange(t, p.a, hostPort(p.b6, 8080), 100, 100)
	}
	ping(t, p.a, p.b4, 3, 100) // not in the filter
	time.Sleep(200 * time.Millisecond)
	ref.stop(t)
	select {
	case err := <-cliDone:
		if err != nil {
			t.Fatalf("loupe capture: %v: %s", err, cliErr.String())
		}
	case <-time.After(30 * time.Second):
		cli.Process.Kill()
		t.Fatal("loupe capture did not end after its duration")
	}

	keys := func(ps []pkt) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.key())
		}
		slices.Sort(out)
		return out
	}
	got, want := keys(readPackets(t, file)), keys(readPackets(t, ref.file))
	if len(want) < 5*2*5 {
		t.Fatalf("tcpdump saw only %d packets: the traffic did not run", len(want))
	}
	if !slices.Equal(got, want) {
		t.Errorf("loupe capture --filter %q: %d packets; tcpdump: %d\nloupe:\n%s\ntcpdump:\n%s",
			filter, len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	t.Logf("%d packets, the same as tcpdump's", len(got))

	// --count N: exactly N packets, then the stream ends by itself.
	counted := filepath.Join(t.TempDir(), "count.pcapng")
	cli = exec.Command(loupeBin, "capture", "--control", a.control, "--filter", "tcp", "--count", "7", "-w", counted)
	cliErr.Reset()
	cli.Stderr = &cliErr
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cliDone <- cli.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for n := 0; ; n++ {
		tcpExchange(t, p.a, hostPort(p.b4, 80), 10, 3000)
		// The agent hands packets over at least every 200 ms (its
		// reader's wake-up): wait for the stream, not for the count.
		select {
		case err = <-cliDone:
		case <-time.After(20 * time.Millisecond):
			if time.Now().After(deadline) || n > 1000 {
				cli.Process.Kill()
				t.Fatal("loupe capture --count 7 did not end")
			}
			continue
		}
		break
	}
	if err != nil {
		t.Fatalf("loupe capture --count: %v: %s", err, cliErr.String())
	}
	if n := len(readPackets(t, counted)); n != 7 {
		t.Errorf("--count 7 wrote %d packets", n)
	}

	// A filter the compiler refuses names the construct.
	out, err = exec.Command(loupeBin, "capture", "--control", a.control, "--filter", "vlan 7", "--count", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `"vlan" is not supported`) {
		t.Errorf("--filter 'vlan 7': %v: %s", err, out)
	}
	a.stop()
}

// TestCaptureTriggerFilter: a trigger with filter= captures only the
// failing connections its filter admits (here IPv6), while the same
// failures over IPv4 are left alone.
func TestCaptureTriggerFilter(t *testing.T) {
	testutil.RequirePrivileged(t)
	p := newPair(t)
	p.up(t)
	startNginx(t, p.b, p.b4, p.b6)
	capDir := filepath.Join(t.TempDir(), "capture")
	a := startAgent(t, p.b, agentOpts{args: []string{"--iface", p.vethB, "--capture-dir", capDir,
		"--trigger", "http.status=500-599 filter=ip6 and tcp port 80"}})
	var v6 []uint16
	for i := 0; i < 3; i++ {
		for _, addr := range []netip.Addr{p.b4, p.b6} {
			h := dialHTTP(t, p.a, addr)
			h.send("/bar")
			h.close()
			if addr.Is6() {
				v6 = append(v6, h.port)
			}
		}
	}
	a.stop()
	files, _ := filepath.Glob(filepath.Join(capDir, "*.pcapng"))
	ports := map[uint16]bool{}
	for _, f := range files {
		for _, c := range readPackets(t, f) {
			ports[c.clientPort()] = true
		}
	}
	if len(ports) != len(v6) {
		t.Errorf("captured connections %v, want the IPv6 ones %v", ports, v6)
	}
	for _, port := range v6 {
		if !ports[port] {
			t.Errorf("IPv6 connection %d failed but was not captured", port)
		}
	}
}
