package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"loupe/internal/api"
	"loupe/internal/testutil"
)

// TestStatusCommand runs the agent with its control socket in a temporary
// directory and reads its status the way a user does, with `loupe status`
// (the JSON document, then the human form); once the agent stopped, the
// socket is gone and the command says so, naming --control.
func TestStatusCommand(t *testing.T) {
	ns := testutil.NewNSPrefix(t, "lpapi")
	ifA, ifB := testutil.UniqueName("lpapi"), testutil.UniqueName("lpapi")
	// Both ends in the namespace: the agent attaches to both.
	ns.IP(t, "link", "add", ifA, "type", "veth", "peer", "name", ifB)
	a := startAgent(t, ns, agentOpts{args: []string{"--map-type", "shared", "--flow-budget", "1024", "--attach-mode", "tcx"}})

	fi, err := os.Lstat(a.control)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket mode %v, want a socket with 0600", fi.Mode())
	}

	// The flows unit says running once its goroutine runs, a moment
	// after the agent logged it is running.
	var st api.Status
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := loupeOutput(t, "status", "--json", "--control", a.control)
		st = api.Status{}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("loupe status --json: %v:\n%s", err, out)
		}
		if flows := capabilityNamed(st, "flows"); flows != nil && flows.State == "running" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	flows := capabilityNamed(st, "flows")
	if flows == nil || !flows.Enabled || flows.State != "running" {
		t.Errorf("flows capability %+v, want it enabled and running", flows)
	}
	if flows != nil && flows.Detail["flow_budget"] != float64(1024) {
		t.Errorf("flows detail %v, want flow_budget 1024", flows.Detail)
	}
	wantNames := []string{ifA, ifB}
	slices.Sort(wantNames)
	if st.Interfaces.Attached != 2 || !slices.Equal(st.Interfaces.Names, wantNames) || st.Interfaces.Mode != "tcx" {
		t.Errorf("interfaces %+v, want 2 attached with TCX: %v", st.Interfaces, wantNames)
	}
	if st.State != api.StateRunning || st.PID != a.pid() {
		t.Errorf("state %q pid %d, want running, pid %d", st.State, st.PID, a.pid())
	}
	if want := strings.TrimSpace(loupeOutput(t, "version")); st.Version != want {
		t.Errorf("version %q, want %q (loupe version)", st.Version, want)
	}
	if d := st.Datapath; d.Tables != "shared" || d.FlowBudget != 1024 || d.CPUs < 1 || d.Pinned {
		t.Errorf("datapath %+v, want shared tables, flow budget 1024, unpinned", d)
	}
	started, err := time.Parse(time.RFC3339, st.Started)
	if err != nil || time.Since(started) > time.Minute || st.UptimeSeconds < 0 || st.UptimeSeconds > 60 {
		t.Errorf("started %q (%v), uptime %v s", st.Started, err, st.UptimeSeconds)
	}

	human := loupeOutput(t, "status", "--control", a.control)
	for _, want := range []string{
		"state       running\n",
		"interfaces  2 attached (tcx): " + strings.Join(wantNames, ", ") + "\n",
		"datapath    shared tables, flow budget 1024, ",
		"\nflows       running  ",
	} {
		if !strings.Contains(human, want) {
			t.Errorf("loupe status lacks %q:\n%s", want, human)
		}
	}

	a.stop()
	if _, err := os.Lstat(a.control); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("control socket after the agent stopped: %v", err)
	}
	cmd := exec.Command(loupeBin, "status", "--control", a.control)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	want := "loupe status: control socket " + a.control + " does not exist: is the agent running? (an agent serving another socket is reached with --control PATH)\n"
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || stderr.String() != want {
		t.Errorf("status without an agent: %v, stderr %q\nwant exit 1, %q", err, stderr.String(), want)
	}
}

// TestControlSocketNeedsPermission runs the agent as a user who holds the
// capabilities it needs but cannot create the default socket: it stops
// before attaching anything, and says how to choose another path. (Without
// the capabilities, TestUnprivilegedError's message comes first.)
func TestControlSocketNeedsPermission(t *testing.T) {
	testutil.RequirePrivileged(t)
	if _, err := exec.LookPath("capsh"); err != nil {
		t.Skip("needs capsh")
	}
	const caps = "cap_bpf,cap_net_admin,cap_perfmon"
	script := "exec " + loupeBin + " run --store none --pin-dir none --listen none"
	ns := testutil.NewNSPrefix(t, "lpapi")
	out, err := ns.Command("capsh", "--keep=1", "--user=nobody", "--inh="+caps, "--addamb="+caps, "--", "-c", script).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("agent as nobody: %v, want exit 1:\n%s", err, out)
	}
	const want = "loupe run: control socket " + api.DefaultSocket + ": permission denied; choose another path with --control PATH (or control.socket), or none to disable\n"
	if !strings.HasSuffix(string(out), want) {
		t.Fatalf("output\n%s\nwant it to end with\n%s", out, want)
	}
	if strings.Contains(string(out), "msg=attached") {
		t.Errorf("interfaces were attached before the socket was refused:\n%s", out)
	}
}

// loupeOutput runs `loupe args...` and returns its output, failing the
// test on any error or anything on stderr.
func loupeOutput(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(loupeBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("loupe %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func capabilityNamed(st api.Status, name string) *api.CapabilityStatus {
	for i := range st.Capabilities {
		if st.Capabilities[i].Name == name {
			return &st.Capabilities[i]
		}
	}
	return nil
}
