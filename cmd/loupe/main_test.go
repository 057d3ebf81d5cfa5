package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = dispatch(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpAndUsage(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"flows", "--help"}, {"top", "-h"}, {"version", "--help"}} {
		code, out, _ := run(t, args...)
		if code != 0 || !strings.Contains(out, "Usage: loupe") {
			t.Errorf("%v: exit %d, stdout %q", args, code, out)
		}
	}
	if code, _, errOut := run(t, "frobnicate"); code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Errorf("unknown command: exit %d, %q", code, errOut)
	}
	if code, _, _ := run(t); code != 2 {
		t.Errorf("no command: exit %d", code)
	}
	if code, _, _ := run(t, "flows", "--bogus"); code != 2 {
		t.Errorf("unknown flag: exit %d", code)
	}
	if code, out, _ := run(t, "version"); code != 0 || !strings.HasPrefix(out, "loupe ") {
		t.Errorf("version: %d %q", code, out)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	code, _, errOut := run(t, "run", "--flow-budget", "3")
	if code != 1 || !strings.Contains(errOut, "flow_budget") {
		t.Fatalf("exit %d, stderr %q: want the key named", code, errOut)
	}
}

// writeRecords writes recs into a new store, one segment per batch, and
// returns its directory.
func writeRecords(t *testing.T, batch int, recs []flow.Record) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := store.Open(dir, store.Options{NoBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(recs); i += batch {
		if err := st.Write(context.Background(), recs[i:min(i+batch, len(recs))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rec is a record of an IP flow last seen age ago.
func rec(src, dst string, sport, dport uint16, proto uint8, bytes uint64, age time.Duration) flow.Record {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	et := uint16(flow.EtherTypeIPv4)
	if s.Is6() {
		et = flow.EtherTypeIPv6
	}
	now := time.Now()
	return flow.Record{
		Key:   flow.Key{SrcAddr: s.As16(), DstAddr: d.As16(), SrcPort: sport, DstPort: dport, Proto: proto, EtherType: et, Direction: flow.Egress, IfIndex: 2},
		Iface: "eth0", Packets: bytes / 100, Bytes: bytes, FirstSeen: now.Add(-age - time.Second), LastSeen: now.Add(-age), Sampling: 1,
	}
}

func writeStore(t *testing.T) string {
	t.Helper()
	recs := []flow.Record{
		rec("10.0.0.1", "10.0.1.1", 40000, 443, 6, 9000, time.Minute),
		rec("10.0.0.2", "10.0.1.1", 40001, 443, 6, 3000, time.Minute),
		rec("10.0.0.1", "192.0.2.9", 5353, 53, 17, 500, time.Minute),
		rec("2001:db8::1", "2001:db8::2", 1000, 80, 6, 7000, time.Minute),
		rec("10.0.0.3", "10.0.1.1", 40002, 22, 6, 99999, 3*time.Hour), // old
		rec("10.0.0.4", "10.0.1.1", 8, 0, 1, 84, 3*time.Hour),         // ICMP echo, old
	}
	recs[1].Iface, recs[1].IfIndex, recs[1].Direction = "wlan0", 3, flow.Ingress
	recs[3].Iface, recs[3].IfIndex = "veth12ab", 7
	return writeRecords(t, len(recs), recs)
}

// jsonRecords decodes `flows --json` output.
func jsonRecords(t *testing.T, out string) []flow.Record {
	t.Helper()
	var recs []flow.Record
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r flow.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad JSON line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestFlowsFilters(t *testing.T) {
	dir := writeStore(t)
	count := func(args ...string) int {
		t.Helper()
		code, out, errOut := run(t, append([]string{"flows", "--store", dir, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("flows %v: exit %d: %s", args, code, errOut)
		}
		return len(jsonRecords(t, out))
	}
	hourAgo := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 4}, // the last hour by default
		{[]string{"--since", "0"}, 6},
		{[]string{"--since", "4h"}, 6},
		{[]string{"--since", hourAgo}, 4},
		{[]string{"--since", "0", "--until", "2h"}, 2},
		{[]string{"--since", "0", "--until", hourAgo}, 2},
		{[]string{"--since", "4h", "--until", "1h"}, 2},
		{[]string{"--src", "10.0.0.0/24", "--since", "0"}, 5},
		{[]string{"--src", "10.0.0.1"}, 2},
		{[]string{"--dst", "10.0.1.1"}, 2},
		{[]string{"--port", "443"}, 2},
		{[]string{"--proto", "udp"}, 1},
		{[]string{"--proto", "6", "--src", "2001:db8::/32"}, 1},
		{[]string{"--iface", "eth0"}, 2},
		{[]string{"--iface", "eth*", "--since", "0"}, 4},
		{[]string{"--iface", "wlan0", "--iface", "veth*"}, 2},
		{[]string{"--iface", "lo"}, 0},
		{[]string{"--direction", "ingress"}, 1},
		{[]string{"--direction", "egress", "--iface", "eth0"}, 2},
	} {
		if got := count(c.args...); got != c.want {
			t.Errorf("flows %v: %d records, want %d", c.args, got, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--src", "10.0.0.300"}, 1, "--src"},
		{[]string{"--direction", "sideways"}, 1, "ingress or egress"},
		{[]string{"--iface", "eth["}, 2, "bad glob"},
		{[]string{"--since", "yesterday"}, 2, "RFC 3339"},
		{[]string{"--since", "-5m"}, 2, "negative"},
		{[]string{"--since", "1h", "--until", "2h"}, 1, "after --until"},
	} {
		if code, _, errOut := run(t, append([]string{"flows", "--store", dir}, c.args...)...); code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("flows %v: exit %d %q, want exit %d and %q", c.args, code, errOut, c.code, c.msg)
		}
	}
	if code, _, errOut := run(t, "flows", "--store", filepath.Join(dir, "missing")); code != 1 || !strings.Contains(errOut, "store") {
		t.Errorf("missing store: exit %d %q", code, errOut)
	}
	code, out, _ := run(t, "flows", "--store", dir, "--proto", "icmp", "--since", "0")
	if code != 0 || !strings.Contains(out, "icmp 8/0") {
		t.Errorf("icmp row without type/code:\n%s", out)
	}
	code, out, _ = run(t, "flows", "--store", dir, "--port", "53")
	if code != 0 || !strings.Contains(out, "10.0.0.1:5353") || !strings.Contains(out, "192.0.2.9:53") {
		t.Errorf("table output:\n%s", out)
	}
}

func TestTop(t *testing.T) {
	dir := writeStore(t)
	code, out, errOut := run(t, "top", "--store", dir, "--by", "src")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// The last hour only: 10.0.0.1 (9500 bytes), then 2001:db8::1, 10.0.0.2.
	if len(lines) != 4 || !strings.Contains(lines[1], "10.0.0.1") || !strings.Contains(lines[2], "2001:db8::1") || !strings.Contains(lines[3], "10.0.0.2") {
		t.Fatalf("top --by src:\n%s", out)
	}
	code, out, _ = run(t, "top", "--store", dir, "--by", "port", "-n", "1")
	if code != 0 || !strings.Contains(out, "443") || strings.Count(strings.TrimSpace(out), "\n") != 1 {
		t.Fatalf("top --by port -n 1:\n%s", out)
	}
	if code, _, errOut := run(t, "top", "--store", dir, "--by", "colour"); code != 1 || !strings.Contains(errOut, "src-port, dst-port") {
		t.Errorf("bad --by: exit %d %q", code, errOut)
	}
}

// TestQueryRefusesWhatIsNotAStore: `loupe flows --store /tmp` used to print
// an empty table and exit 0.
func TestQueryRefusesWhatIsNotAStore(t *testing.T) {
	notStore := t.TempDir()
	if err := os.WriteFile(filepath.Join(notStore, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{notStore, t.TempDir()} {
		for _, cmd := range []string{"flows", "top"} {
			code, out, errOut := run(t, cmd, "--store", dir)
			if code != 1 || out != "" || !strings.Contains(errOut, dir+" is not a Loupe flow store") || !strings.Contains(errOut, "--store must name") {
				t.Errorf("%s --store %s: exit %d, stdout %q, stderr %q", cmd, dir, code, out, errOut)
			}
		}
	}
}

// TestFlagErrorsAreOneLine: a flag error is one line and where to find the
// usage, not the whole usage; the value is cut and its syntax explained.
func TestFlagErrorsAreOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the first line
	}{
		{[]string{"run", "--bogus"}, "loupe run: flag provided but not defined: -bogus"},
		{[]string{"flows", "--bogus"}, "loupe flows: flag provided but not defined: -bogus"},
		{[]string{"top", "extra"}, `loupe top: unexpected argument "extra"`},
		{[]string{"run", "--cache-active-timeout", "5"},
			`loupe run: invalid value "5" for flag -cache-active-timeout: invalid duration (want Go syntax such as 500ms, 5s, 1h30m)`},
		{[]string{"flows", "--since", "1 hour"},
			`loupe flows: invalid value "1 hour" for flag -since: want a duration ago (30s, 5m, 2h30m) or an RFC 3339 time (2026-01-02T15:04:05Z)`},
		{[]string{"run", "--flow-budget", "lots"}, `loupe run: invalid value "lots" for flag -flow-budget: want an integer`},
		{[]string{"run", "--kafka-tls-enabled=maybe"}, `loupe run: invalid boolean value "maybe" for -kafka-tls-enabled: want true or false`},
		{[]string{"run", "--ringbuf-size", "4MB"}, `loupe run: invalid value "4MB" for flag -ringbuf-size: invalid size "4MB" (want bytes, or a number with a KiB, MiB or GiB suffix)`},
		{[]string{"run", "--flow-budget", strings.Repeat("9", 20<<20)},
			`loupe run: invalid value "` + strings.Repeat("9", 64) + `"... (20971520 bytes) for flag -flow-budget: value out of range`},
		{[]string{"run", "--store-retention", strings.Repeat("h", 20<<20)},
			`loupe run: invalid value "` + strings.Repeat("h", 64) + `"... (20971520 bytes) for flag -store-retention: invalid duration (want Go syntax such as 500ms, 5s, 1h30m)`},
	} {
		code, out, errOut := run(t, tc.args...)
		cmd := tc.args[0]
		want := tc.want + "\nsee 'loupe " + cmd + " --help'\n"
		if code != 2 || out != "" || errOut != want {
			t.Errorf("%.60q: exit %d, stdout %q, stderr\n%.300s\nwant\n%s", tc.args, code, out, errOut, want)
		}
	}
}

func TestNoGoFunctionNamesInErrors(t *testing.T) {
	dir := writeStore(t)
	for _, tc := range []struct{ arg, want string }{
		{"10.0.0.0/33", `loupe flows: --src: invalid prefix "10.0.0.0/33": prefix length out of range`},
		{"10.0.0.300", `loupe flows: --src: invalid address "10.0.0.300": IPv4 field has value >255`},
	} {
		code, _, errOut := run(t, "flows", "--store", dir, "--src", tc.arg)
		if code != 1 || strings.TrimSpace(errOut) != tc.want || strings.Contains(errOut, "netip") {
			t.Errorf("--src %s: exit %d, %q; want %q", tc.arg, code, errOut, tc.want)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		if code, out, errOut := run(t, args...); code != 0 || !strings.HasPrefix(out, "loupe ") || errOut != "" {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
}

// TestConfigBounds: the configuration file's size is bounded, a long value
// is cut in every layer's message, and --print-config hides OTLP headers.
func TestConfigBounds(t *testing.T) {
	code, _, errOut := run(t, "run", "--config", "/dev/zero")
	if code != 1 || errOut != "loupe run: config file /dev/zero: larger than 1MiB, the limit for this file\n" {
		t.Errorf("/dev/zero: exit %d, %q", code, errOut)
	}

	huge := strings.Repeat("x", 20<<20)
	file := filepath.Join(t.TempDir(), "loupe.yaml")
	if err := os.WriteFile(file, []byte("map_type: "+huge[:1<<19]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cut := `"` + strings.Repeat("x", 64) + `"... (`
	code, _, errOut = run(t, "run", "--config", file)
	if code != 1 || !strings.Contains(errOut, "line 1: map_type: must be one of auto, percpu, shared, ringbuf, got "+cut+"524288 bytes)") || len(errOut) > 300 {
		t.Errorf("file: exit %d, %.400q", code, errOut)
	}
	t.Setenv("LOUPE_LOG_LEVEL", huge)
	code, _, errOut = run(t, "run")
	if code != 1 || !strings.Contains(errOut, "environment variable LOUPE_LOG_LEVEL: log_level: must be one of debug, info, warn, error, got "+cut+"20971520 bytes)") || len(errOut) > 300 {
		t.Errorf("env: exit %d, %.400q", code, errOut)
	}
	os.Unsetenv("LOUPE_LOG_LEVEL")
	code, _, errOut = run(t, "run", "--export", "kafka://b:9092/"+huge)
	if code != 1 || !strings.Contains(errOut, `flag --export: export: invalid target "kafka://b:9092/`) || len(errOut) > 400 {
		t.Errorf("flag: exit %d, %.400q", code, errOut)
	}

	code, out, errOut := run(t, "run", "--print-config", "--otlp-header", "authorization=Bearer s3cret,x-tenant=a")
	if code != 0 || strings.Contains(out, "s3cret") || !strings.Contains(out, "headers: [authorization=<redacted>, x-tenant=<redacted>]") {
		t.Errorf("print-config: exit %d %s\n%s", code, errOut, out)
	}
}
