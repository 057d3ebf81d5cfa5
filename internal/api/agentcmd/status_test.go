package agentcmd

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"loupe/internal/api"
)

var doc = api.Status{
	Version:       "loupe v1.2.3 (0123456789ab) go1.26 linux/amd64",
	PID:           321,
	Started:       "2026-03-04T05:06:07Z",
	UptimeSeconds: 3723.4,
	State:         api.StateRunning,
	Capabilities: []api.CapabilityStatus{
		{Name: "flows", Enabled: true, State: "running", Detail: map[string]any{
			"records": 1234567, "evictions": map[string]any{"timer": 3, "map_full": 0},
			"sinks": []string{"store", "prometheus"}, "cache_active_timeout": "5s",
		}},
		{Name: "capture", Enabled: false, State: "stopped"},
	},
	Interfaces: api.InterfaceStatus{Attached: 10, Mode: "tcx",
		Names: []string{"eth0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9"}},
	Datapath: api.DatapathStatus{Tables: "shared", FlowBudget: 131072, CPUs: 64, Pinned: true,
		MemoryBytes: 40 << 20, MemoryBudget: 64 << 20, SketchBytes: 16 << 20, SketchFlows: 30000},
}

// agent serves doc on a socket and returns its path.
func agent(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "loupe.sock")
	s, err := api.Listen(api.Options{Socket: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Serve([]api.Route{api.StatusRoute(func() api.Status { return doc })}); err != nil {
		t.Fatal(err)
	}
	return path
}

func status(args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	err := statusCmd(args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestStatusHuman(t *testing.T) {
	out, _, err := status("--control", agent(t))
	if err != nil {
		t.Fatal(err)
	}
	want := `agent       loupe v1.2.3 (0123456789ab) go1.26 linux/amd64
pid         321
state       running
uptime      1h2m3s (since 2026-03-04T05:06:07Z)
interfaces  10 attached (tcx): eth0, v1, v2, v3, v4, v5, v6, v7 and 2 more
datapath    shared tables, flow budget 131072, 64 CPUs, pinned
memory      41943040 bytes of maps of a budget of 67108864; sketch 16777216 bytes, 30000 flows per CPU and interval
flows       running  cache_active_timeout=5s evictions.map_full=0 evictions.timer=3 records=1234567 sinks=store,prometheus
capture     disabled
`
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}

func TestStatusJSON(t *testing.T) {
	out, _, err := status("--json", "--control", agent(t))
	if err != nil {
		t.Fatal(err)
	}
	var got api.Status
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	// Through JSON, numbers in details come back as float64.
	want := doc
	want.Capabilities = []api.CapabilityStatus{
		{Name: "flows", Enabled: true, State: "running", Detail: map[string]any{
			"records": float64(1234567), "evictions": map[string]any{"timer": float64(3), "map_full": float64(0)},
			"sinks": []any{"store", "prometheus"}, "cache_active_timeout": "5s",
		}},
		{Name: "capture", Enabled: false, State: "stopped"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	for _, key := range []string{`"uptime_seconds": 3723.4`, `"flow_budget": 131072`, `"started": "2026-03-04T05:06:07Z"`} {
		if !strings.Contains(out, key) {
			t.Errorf("output lacks %s:\n%s", key, out)
		}
	}
}

func TestStatusNamesControlWhenNoAgent(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "loupe.sock")
	out, _, err := status("--control", missing)
	want := "control socket " + missing + " does not exist: is the agent running? (an agent serving another socket is reached with --control PATH)"
	if err == nil || err.Error() != want || out != "" {
		t.Fatalf("error %v, output %q\nwant error %s", err, out, want)
	}
	if _, _, err := status("--control", "none"); err == nil || !strings.Contains(err.Error(), "--control PATH") {
		t.Fatalf("--control none: %v", err)
	}
}
