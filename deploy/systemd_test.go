package deploy

import (
	"bufio"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"loupe/internal/config"
	"loupe/internal/testutil"
)

// agentCaps are the capabilities the agent runs with, and all it gets.
var agentCaps = []string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON"}

// unitFile is a systemd unit: each section's keys with every value
// assigned to them, in order.
type unitFile map[string]map[string][]string

// parseUnit reads a unit file as systemd does for what this test needs:
// sections, key=value lines, comments, and keys assigned more than once.
// Continuation lines are refused: the unit uses none.
func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case strings.HasSuffix(line, "\\"):
			t.Fatalf("%s:%d: continuation line", path, n)
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
		}
		u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// one returns the single value of a key, failing if there is not exactly
// one.
func (u unitFile) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	if len(v) != 1 {
		t.Fatalf("[%s] %s: %d assignments %q, want exactly one", section, key, len(v), v)
	}
	return v[0]
}

// capabilitySet is the set a capability key ends up with: the union of
// its assignments (an empty assignment resets it), sorted.
func capabilitySet(t *testing.T, values []string) []string {
	t.Helper()
	var set []string
	for _, v := range values {
		if v == "" {
			set = nil
			continue
		}
		if strings.HasPrefix(v, "~") {
			t.Fatalf("capabilities given as an exclusion list (%q): everything else would stay", v)
		}
		for _, c := range strings.Fields(v) {
			if !slices.Contains(set, c) {
				set = append(set, c)
			}
		}
	}
	slices.Sort(set)
	return set
}

// TestSystemdUnit checks deploy/systemd/loupe.service: exactly the three
// capabilities, the hardening the deployment promises, and directories
// that hold the agent's default paths, which its example configuration
// names and the agent's own loader accepts.
func TestSystemdUnit(t *testing.T) {
	u := parseUnit(t, "systemd/loupe.service")
	svc := u["Service"]
	for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		if got := capabilitySet(t, svc[key]); !slices.Equal(got, agentCaps) {
			t.Errorf("%s: %q, want exactly %q", key, got, agentCaps)
		}
	}
	for key, want := range map[string]string{
		"NoNewPrivileges":    "yes",
		"ProtectSystem":      "strict",
		"ProtectHome":        "yes",
		"PrivateTmp":         "yes",
		"StateDirectory":     "loupe",
		"StateDirectoryMode": "0700",
		"RuntimeDirectory":   "loupe",
		"ReadWritePaths":     "-/sys/fs/bpf",
		"ExecStart":          "/usr/local/bin/loupe run --config /etc/loupe/loupe.yaml",
	} {
		if got := u.one(t, "Service", key); got != want {
			t.Errorf("%s=%s, want %s", key, got, want)
		}
	}
	if _, ok := svc["User"]; ok {
		t.Errorf("User= is set: the unit is written for root bounded to the three capabilities (a non-root user cannot reach /sys/fs/bpf)")
	}

	// The directories systemd creates hold the agent's defaults, and the
	// example configuration names those defaults.
	def := config.Default()
	state := "/var/lib/" + u.one(t, "Service", "StateDirectory") + "/"
	runtime := "/run/" + u.one(t, "Service", "RuntimeDirectory") + "/"
	if !strings.HasPrefix(def.Store.Path, state) || !strings.HasPrefix(def.Control.Socket, runtime) || !strings.HasPrefix(def.PinDir, "/sys/fs/bpf/") {
		t.Errorf("defaults store %s, socket %s, pins %s: not under %s, %s and /sys/fs/bpf", def.Store.Path, def.Control.Socket, def.PinDir, state, runtime)
	}
	cfg := loadConfig(t, "systemd/loupe.yaml", nil)
	if cfg.Store.Path != def.Store.Path || cfg.Control.Socket != def.Control.Socket || cfg.PinDir != def.PinDir || cfg.Listen != "127.0.0.1:9464" {
		t.Errorf("example configuration: store %s, socket %s, pins %s, listen %s; want the defaults on loopback", cfg.Store.Path, cfg.Control.Socket, cfg.PinDir, cfg.Listen)
	}
}

// TestSystemdAnalyzeVerify runs systemd's own checker on the unit, with
// ExecStart pointed at a binary that exists (it checks that it does). A
// key it does not know or a value it cannot parse is a warning naming the
// unit, which fails the test.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze := testutil.RequirePeer(t, "systemd-analyze")
	data, err := os.ReadFile("systemd/loupe.service")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "loupe.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/loupe", self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "loupe.service") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
}

// loadConfig loads a configuration file through the agent's own loader,
// as `loupe run --config path` does with the LOUPE_* variables of env.
func loadConfig(t *testing.T, path string, env []string) config.Config {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	flags := config.BindFlags(fs)
	if err := fs.Parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(flags, env)
	if err != nil {
		t.Fatalf("the agent refuses %s: %v", path, err)
	}
	return cfg
}
