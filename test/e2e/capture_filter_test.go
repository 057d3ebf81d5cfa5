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
	// tcpdump, the reference, may lose packets itself on a loaded
	// machine (its statistics say so): such a round proves nothing and
	// runs again, at most three times in all.
	for round := 1; ; round++ {
		got, want, lost := onDemandRound(t, a, p, filter)
		if len(want) < 5*2*5 {
			t.Fatalf("tcpdump saw only %d packets: the traffic did not run", len(want))
		}
		if slices.Equal(got, want) {
			t.Logf("%d packets, the same as tcpdump's", len(got))
			break
		}
		if lost > 0 && round < 3 {
			t.Logf("round %d: tcpdump lost %d packets (its statistics): %d against loupe's %d; again", round, lost, len(want), len(got))
			continue
		}
		t.Fatalf("loupe capture --filter %q: %d packets; tcpdump: %d (it lost %d)\nloupe:\n%s\ntcpdump:\n%s",
			filter, len(got), len(want), lost, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// --count N: exactly N packets, then the stream ends by itself.
	counted := filepath.Join(t.TempDir(), "count.pcapng")
	var cliErr bytes.Buffer
	cliDone := make(chan error, 1)
	cli := exec.Command(loupeBin, "capture", "--control", a.control, "--filter", "tcp", "--count", "7", "-w", counted)
	cli.Stderr = &cliErr
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cliDone <- cli.Wait() }()
	var err error
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
	out, err := exec.Command(loupeBin, "capture", "--control", a.control, "--filter", "vlan 7", "--count", "1").CombinedOutput()
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

// onDemandRound runs `loupe capture --filter` for 5 s beside tcpdump with
// the same filter on the same interface, over the same traffic, and
// returns the packets of each, sorted, and how many tcpdump said it lost.
// A second capture while the first runs must be refused.
func onDemandRound(t *testing.T, a *agent, p *pair, filter string) (got, want []string, lost uint64) {
	t.Helper()
	const started = "on-demand capture started"
	before := strings.Count(a.logs.String(), started)
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
	for deadline := time.Now().Add(10 * time.Second); strings.Count(a.logs.String(), started) == before; {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not log %q within 10 s", started)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ref := startTcpdump(t, p.b, p.vethB, filter)

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
	return keys(readPackets(t, file)), keys(readPackets(t, ref.file)), ref.dropped()
}
