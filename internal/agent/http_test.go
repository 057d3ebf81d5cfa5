package agent

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/api"
)

// TestHealthAndReadiness follows the agent's states through the HTTP
// listener: alive throughout, ready only while running.
func TestHealthAndReadiness(t *testing.T) {
	var state atomic.Value
	state.Store(api.StateStarting)
	srv := httptest.NewServer(httpHandler(prometheus.NewRegistry(), func() string { return state.Load().(string) }, slog.New(slog.DiscardHandler)))
	defer srv.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	for _, step := range []struct {
		state  string
		readyz int
	}{
		{api.StateStarting, http.StatusServiceUnavailable},
		{api.StateRunning, http.StatusOK},
		{api.StateStopping, http.StatusServiceUnavailable},
	} {
		state.Store(step.state)
		if code, body := get("/readyz"); code != step.readyz || body != step.state {
			t.Errorf("%s: /readyz = %d %q, want %d %q", step.state, code, body, step.readyz, step.state)
		}
		if code, body := get("/healthz"); code != http.StatusOK || body != "ok" {
			t.Errorf("%s: /healthz = %d %q, want 200 \"ok\"", step.state, code, body)
		}
	}
	if code, _ := get("/metrics"); code != http.StatusOK {
		t.Errorf("/metrics = %d, want 200", code)
	}
}
