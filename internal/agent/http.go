package agent

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"loupe/internal/api"
)

// httpHandler serves the HTTP listener's routes:
//
//   - /metrics, the registry's metrics;
//   - /healthz, liveness: 200 while the process answers at all, so that a
//     supervisor restarts an agent that hangs, not one that is busy
//     attaching or flushing;
//   - /readyz, readiness: 200 once the programs are attached and the
//     units run (the control API's state "running"), 503 with the state
//     before that and while the agent shuts down, so that a rollout
//     waits for a node's agent to count before it moves on to the next.
//
// state is the agent's state (api.StateStarting, ...).
func httpHandler(reg *prometheus.Registry, state func() string, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		s := state()
		if s != api.StateRunning {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, s)
	})
	return mux
}
