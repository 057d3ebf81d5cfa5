package agentcmd

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"

	"loupe/internal/api"
)

// TestMetrics: `loupe metrics --json` prints the agent's document, and
// the plain form one line per sample, a histogram's count and sum.
func TestMetrics(t *testing.T) {
	sum := 0.75
	want := api.Metrics{Metrics: []api.MetricFamily{
		{Name: "loupe_records_total", Type: "counter", Samples: []api.Sample{{Value: 1234567}}},
		{Name: "loupe_datapath_events_total", Type: "counter", Samples: []api.Sample{
			{Labels: map[string]string{"event": "map_full", "iface": "eth0"}, Value: 3}}},
		{Name: "loupe_eviction_seconds", Type: "histogram", Samples: []api.Sample{{Value: 12, Sum: &sum}}},
	}}
	path := filepath.Join(t.TempDir(), "loupe.sock")
	s, err := api.Listen(api.Options{Socket: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	route := api.Route{Method: http.MethodGet, Path: api.MetricsPath, Access: api.Read,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { api.WriteJSON(w, http.StatusOK, want) })}
	if err := s.Serve([]api.Route{route}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		var out, errb bytes.Buffer
		if err := metricsCmd(append(args, "--control", path), &out, &errb); err != nil {
			t.Fatalf("metrics %v: %v: %s", args, err, errb.String())
		}
		return out.String()
	}
	var got api.Metrics
	if err := json.Unmarshal([]byte(run("--json")), &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("--json: %+v (%v), want %+v", got, err, want)
	}
	const text = `loupe_records_total 1234567
loupe_datapath_events_total{event="map_full",iface="eth0"} 3
loupe_eviction_seconds_sum 0.75
loupe_eviction_seconds_count 12
`
	if out := run(); out != text {
		t.Errorf("plain:\n%s\nwant:\n%s", out, text)
	}
}
