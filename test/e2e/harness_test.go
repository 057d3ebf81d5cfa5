// Package e2e runs the real loupe binary against real traffic between
// network namespaces that each test creates and always removes.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// loupeBin is the binary under test, built once by TestMain.
var loupeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loupe-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// World-readable: the capability test runs the binary as nobody.
	_ = os.Chmod(dir, 0o755)
	loupeBin = filepath.Join(dir, "loupe")
	// Built as the scripts build it, version and commit stamped.
	build := exec.Command(filepath.Join("..", "..", "scripts", "build.sh"), loupeBin)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build loupe:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// agent is a running `loupe run` inside a namespace.
type agent struct {
	t       *testing.T
	ns      *testutil.NS
	cmd     *exec.Cmd
	dir     string // store, exports, logs
	listen  string
	control string // the control socket, "" if the build has none
	logs    *testutil.Buffer
	done    chan error
	stopped bool
}

type agentOpts struct {
	args []string
	// caps runs the agent as nobody holding only these capabilities.
	caps bool
	// dir reuses the store, export and log directory of an earlier agent
	// (a restart); empty: a fresh one.
	dir string
	// pinDir is the agent's --pin-dir (testutil.Bpffs gives each test
	// its own bpf file system); empty: none, so that tests never share
	// pins.
	pinDir string
	// bin runs another build of the agent (the fault-injection build);
	// env adds to its environment.
	bin string
	env []string
	// noPinFlag leaves --pin-dir out, for a build from before it existed.
	noPinFlag bool
	// noControlFlag leaves --control out, for a build from before the
	// control API.
	noControlFlag bool
}

// startAgent runs the agent in ns with its store and a JSON export under a
// fresh directory (or o.dir), and waits until it reports running.
func startAgent(t *testing.T, ns *testutil.NS, o agentOpts) *agent {
	t.Helper()
	dir := o.dir
	if dir == "" {
		// Not t.TempDir: its parent is private to root, and the
		// unprivileged agent must be able to write here.
		var err error
		if dir, err = os.MkdirTemp("", "loupe-agent-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	a := &agent{t: t, ns: ns, dir: dir, listen: "127.0.0.1:9464", logs: &testutil.Buffer{}, done: make(chan error, 1)}
	pinDir := o.pinDir
	if pinDir == "" {
		pinDir = "none"
	}
	args := append([]string{"run",
		"--store", filepath.Join(dir, "store"),
		"--export", "json:" + filepath.Join(dir, "flows.jsonl"),
		"--listen", a.listen,
		"--log-level", "debug",
	}, o.args...)
	if !o.noControlFlag {
		// Each agent its own socket, beside its store: agents of
		// different tests never meet at the default path, and the
		// unprivileged ones can create it.
		a.control = filepath.Join(dir, "loupe.sock")
		args = append(args[:1:1], append([]string{"--control", a.control}, args[1:]...)...)
	}
	if !o.noPinFlag {
		args = append(args[:1:1], append([]string{"--pin-dir", pinDir}, args[1:]...)...)
	}
	bin := loupeBin
	if o.bin != "" {
		bin = o.bin
	}
	if o.caps {
		const caps = "cap_bpf,cap_net_admin,cap_perfmon"
		script := "exec " + bin + " " + strings.Join(args, " ")
		a.cmd = ns.Command("capsh", "--keep=1", "--user=nobody", "--inh="+caps, "--addamb="+caps, "--", "-c", script)
	} else {
		a.cmd = ns.Command(bin, args...)
	}
	a.cmd.Env = append(os.Environ(), o.env...)
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	t.Cleanup(func() {
		if !a.stopped {
			a.cmd.Process.Kill()
			<-a.done
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", a.logs.String())
		}
	})
	a.waitLog(20*time.Second, "loupe running")
	return a
}

// waitLog waits for a log line that contains every one of substrs.
func (a *agent) waitLog(timeout time.Duration, substrs ...string) {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if a.logged(substrs...) {
			return
		}
		select {
		case err := <-a.done:
			a.stopped = true
			a.t.Fatalf("agent exited (%v) before logging %q:\n%s", err, substrs, a.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	a.t.Fatalf("agent did not log %q within %v", substrs, timeout)
}

// logged reports whether one log line contains every one of substrs.
func (a *agent) logged(substrs ...string) bool {
	for _, line := range strings.Split(a.logs.String(), "\n") {
		all := true
		for _, s := range substrs {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

// stop sends SIGTERM and requires a clean exit within the timeout.
func (a *agent) stop() {
	a.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		a.t.Fatalf("signal agent: %v", err)
	}
	select {
	case err := <-a.done:
		a.stopped = true
		if err != nil {
			a.t.Fatalf("agent exited with %v:\n%s", err, a.logs.String())
		}
	case <-time.After(60 * time.Second):
		a.t.Fatalf("agent did not stop within 60s:\n%s", a.logs.String())
	}
}

// kill sends SIGKILL, as an OOM kill would, and waits for the process to
// go. A pinned agent's programs keep counting after it.
func (a *agent) kill() {
	a.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		a.t.Fatalf("kill agent: %v", err)
	}
	a.wait(10 * time.Second)
}

// wait waits for the agent to exit, however it exits.
func (a *agent) wait(timeout time.Duration) error {
	a.t.Helper()
	select {
	case err := <-a.done:
		a.stopped = true
		return err
	case <-time.After(timeout):
		a.t.Fatalf("agent did not exit within %v:\n%s", timeout, a.logs.String())
	}
	return nil
}

// exported reads the records the JSON sink wrote.
func (a *agent) exported() []flow.Record {
	a.t.Helper()
	return readJSONLines(a.t, filepath.Join(a.dir, "flows.jsonl"))
}

// stored runs `loupe flows --json` against the agent's store: every
// record (--since 0), unless extra narrows it.
func (a *agent) stored(extra ...string) []flow.Record {
	a.t.Helper()
	out := a.run(append([]string{"flows", "--json", "--since", "0"}, extra...)...)
	return decodeRecords(a.t, strings.NewReader(out))
}

// run runs a loupe query command against the agent's store.
func (a *agent) run(args ...string) string {
	a.t.Helper()
	args = append(args[:1:1], append([]string{"--store", filepath.Join(a.dir, "store")}, args[1:]...)...)
	cmd := exec.Command(loupeBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		a.t.Fatalf("loupe %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func readJSONLines(t *testing.T, path string) []flow.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	return decodeRecords(t, f)
}

func decodeRecords(t *testing.T, r io.Reader) []flow.Record {
	t.Helper()
	var out []flow.Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec flow.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("decode %q: %v", sc.Text(), err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// metrics scrapes the agent's /metrics from inside its namespace and
// returns every sample as "name{labels}" -> value.
func (a *agent) metrics() map[string]float64 {
	a.t.Helper()
	var body []byte
	err := a.ns.Do(func() error {
		// The dial happens on this thread, so inside the namespace.
		conn, err := net.DialTimeout("tcp", a.listen, 5*time.Second)
		if err != nil {
			return err
		}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil },
		}}
		client.Transport.(*http.Transport).DisableKeepAlives = true
		resp, err := client.Get("http://" + a.listen + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
		return err
	})
	if err != nil {
		a.t.Fatalf("scrape metrics: %v", err)
	}
	m := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			a.t.Fatalf("metric line %q: %v\n%s", line, err, body)
		}
		m[line[:i]] = v
	}
	return m
}

// pid is the agent's process id (ip netns exec and capsh exec into it).
func (a *agent) pid() int { return a.cmd.Process.Pid }

// totals sums records per direction for one interface.
type totals struct{ packets, bytes uint64 }

func sumByDirection(recs []flow.Record, iface string) map[flow.Direction]totals {
	out := map[flow.Direction]totals{}
	for _, r := range recs {
		if r.Iface != iface {
			continue
		}
		t := out[r.Direction]
		t.packets += r.Packets
		t.bytes += r.Bytes
		out[r.Direction] = t
	}
	return out
}
