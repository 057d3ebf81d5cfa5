package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// TestInterfaceChurn creates and deletes 200 veth pairs while the agent
// runs: it must attach to and detach from each, and end with the file
// descriptors it started with.
func TestInterfaceChurn(t *testing.T) {
	ns := testutil.NewNS(t)
	a := startAgent(t, ns, agentOpts{args: []string{"--log-level", "info"}})
	a.metrics() // the HTTP server's first connection settles its own fds
	base := waitFDs(t, a.pid(), -1)

	const pairs = 200
	names := make([]string, pairs)
	var add, del strings.Builder
	for i := range names {
		names[i] = testutil.UniqueName("lc")
		fmt.Fprintf(&add, "link add %sa type veth peer name %sb\n", names[i], names[i])
		fmt.Fprintf(&del, "link del %sa\n", names[i])
	}
	ipBatch(t, ns, add.String())
	waitMetric(t, a, `loupe_attach_operations_total{op="attach"}`, 2*pairs)
	if got := a.metrics()["loupe_interfaces_attached"]; got != 2*pairs {
		t.Fatalf("%v interfaces attached, want %d", got, 2*pairs)
	}
	ipBatch(t, ns, del.String())
	waitMetric(t, a, `loupe_attach_operations_total{op="detach"}`, 2*pairs)

	// A faster churn: pairs deleted right after creation, some before the
	// agent gets to them. Nothing may leak either way.
	var quick strings.Builder
	for range 50 {
		n := testutil.UniqueName("lq")
		fmt.Fprintf(&quick, "link add %sa type veth peer name %sb\nlink del %sa\n", n, n, n)
	}
	ipBatch(t, ns, quick.String())

	deadline := time.Now().Add(20 * time.Second)
	for a.metrics()["loupe_interfaces_attached"] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("interfaces still attached: %v", a.metrics()["loupe_interfaces_attached"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitFDs(t, a.pid(), base)
	m := a.metrics()
	t.Logf("attaches %v detaches %v errors %v, fds %d",
		m[`loupe_attach_operations_total{op="attach"}`], m[`loupe_attach_operations_total{op="detach"}`], m["loupe_attach_errors_total"], base)
	if m[`loupe_attach_operations_total{op="attach"}`] != m[`loupe_attach_operations_total{op="detach"}`] {
		t.Errorf("attaches and detaches differ")
	}
	a.stop()
}

func ipBatch(t *testing.T, ns *testutil.NS, script string) {
	t.Helper()
	cmd := exec.Command("ip", "-n", ns.Name, "-batch", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -batch: %v: %s", err, out)
	}
}

func waitMetric(t *testing.T, a *agent, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := a.metrics()[name]
		if got == want {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFDs returns the process's open file descriptor count once it is
// stable, or, with want >= 0, waits until it equals want.
func waitFDs(t *testing.T, pid, want int) int {
	t.Helper()
	count := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	deadline := time.Now().Add(10 * time.Second)
	last := count()
	for {
		time.Sleep(100 * time.Millisecond)
		n := count()
		if (want < 0 && n == last) || n == want {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("fd count %d (was %d), want %d", n, last, want)
		}
		last = n
	}
}
