package e2e

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// TestSecondSignalDuringShutdown exports over IPFIX/UDP to a port of the
// agent's namespace where nothing listens. The collector's host answers
// every datagram with ICMP port unreachable: the exporter must say so
// (connected 0, refusals counted) and count nothing as sent. At the first
// SIGTERM the agent evicts, then waits for the exporter to deliver what it
// holds (up to the 10 min shutdown timeout); the second SIGTERM must end
// it at once, logging exactly the records the exporter still held (every
// record of the run: the JSON export has the same records) and that the
// final eviction ran. The final eviction's line gives its own records
// apart from the run's total.
func TestSecondSignalDuringShutdown(t *testing.T) {
	p := newPair(t)
	var port int
	if err := p.a.Do(func() error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return err
		}
		port = c.LocalAddr().(*net.UDPAddr).Port
		return c.Close() // free: datagrams to it draw port unreachable
	}); err != nil {
		t.Fatal(err)
	}
	target := "ipfix+udp://127.0.0.1:" + strconv.Itoa(port)
	a := startAgent(t, p.a, agentOpts{args: []string{"--export", target,
		"--export-shutdown-timeout", "10m", "--cache-active-timeout", "200ms"}})
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	p.up(t)
	ping(t, p.a, p.b4, 5, 100)

	label := `{exporter="` + target + `"}`
	deadline := time.Now().Add(20 * time.Second)
	var m map[string]float64
	for {
		m = a.metrics()
		if m["loupe_export_unreachable_total"+label] >= 1 && m["loupe_export_queue_records"+label] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the exporter never reported the refusal: %v", m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m["loupe_export_sent_records_total"+label] != 0 || m["loupe_export_connected"+label] != 0 {
		t.Fatalf("refused by the collector's host, yet sent %v, connected %v",
			m["loupe_export_sent_records_total"+label], m["loupe_export_connected"+label])
	}
	if !a.logged(`msg="collector unreachable"`) {
		t.Errorf("no collector unreachable warning:\n%s", a.logs.String())
	}

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.waitLog(30*time.Second, "msg=\"final eviction done\"")
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.done:
		a.stopped = true
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want status 1", err)
		}
	case <-time.After(60 * time.Second): // the graceful path would wait 10 min
		t.Fatalf("the second SIGTERM did not end the agent:\n%s", a.logs.String())
	}

	n := strconv.Itoa(len(a.exported()))
	for _, want := range [][]string{
		{"exporter records not delivered", "exporter=" + target, "queued=" + n},
		{"exiting before shutdown finished", "detached=true", "final_eviction=done", "queued_records=" + n},
		{"loupe run: second SIGTERM during shutdown: exited before finishing it"},
	} {
		if !a.logged(want...) {
			t.Errorf("no log line with %q:\n%s", want, a.logs.String())
		}
	}
	final := regexp.MustCompile(`final eviction done" records=(\d+) flows=\d+ total_records=(\d+) total_flows=\d+`).FindStringSubmatch(a.logs.String())
	if final == nil {
		t.Fatalf("no final eviction line:\n%s", a.logs.String())
	}
	// Records reached the sinks before the first signal: the final
	// eviction wrote only part of the run's total.
	last, _ := strconv.Atoi(final[1])
	if final[2] != n || last >= len(a.exported()) {
		t.Errorf("final eviction records=%s total_records=%s; want the total %s, and fewer in the final eviction", final[1], final[2], n)
	}
}

// TestIfaceGlobMatchingNothingWarns: an --iface glob that matches no
// interface at start is named in a warning, and the agent still attaches
// to an interface that matches it later.
func TestIfaceGlobMatchingNothingWarns(t *testing.T) {
	p := newPair(t)
	a := startAgent(t, p.a, agentOpts{args: []string{"--iface", p.vethA + ",late*,nosuch0"}})
	a.waitLog(5*time.Second, "interface patterns match no interface yet", "patterns=late*,nosuch0")
	p.a.IP(t, "link", "add", "late0", "type", "veth", "peer", "name", "peer0")
	a.waitLog(5*time.Second, "msg=attached", "iface=late0 ")
	a.stop()
}

// TestUnprivilegedError: without privileges the agent says which
// capabilities it needs, without cilium/ebpf's MEMLOCK hint, which does
// not apply to the kernels Loupe runs on.
func TestUnprivilegedError(t *testing.T) {
	testutil.RequirePrivileged(t) // to drop to nobody
	cmd := exec.Command(loupeBin, "run", "--store", "none", "--listen", "none")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1: %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "loupe run: ") || !strings.Contains(last, "operation not permitted") ||
		!strings.HasSuffix(last, "(loupe run needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON, or root)") ||
		strings.Contains(last, "MEMLOCK") || strings.Contains(last, "rlimit") {
		t.Fatalf("error %q: want the capabilities hint and no MEMLOCK hint", last)
	}
}
