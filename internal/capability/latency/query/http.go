package query

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"loupe/internal/api"
)

// LatencyPath is GET /api/v1/latency (docs/api.md, "Latency").
const LatencyPath = api.Prefix + "latency"

// Routes are the latency records' route over the store in dir: the
// records `loupe latency --json --store dir` prints, with since (a
// duration ago, default 1h, 0: all) and trace (a trace id) as its flags.
func Routes(dir string) []api.Route {
	return []api.Route{{Method: http.MethodGet, Path: LatencyPath, Access: api.Read,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveLatency(w, r, dir) })}}
}

func serveLatency(w http.ResponseWriter, r *http.Request, dir string) {
	v := r.URL.Query()
	for k := range v {
		if !slices.Contains([]string{"since", "trace"}, k) {
			api.WriteError(w, http.StatusBadRequest, fmt.Sprintf("unknown parameter %q", k))
			return
		}
	}
	since := time.Hour
	if s := v.Get("since"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			api.WriteError(w, http.StatusBadRequest, fmt.Sprintf("since %q: want a duration ago, 0 or more", s))
			return
		}
		since = d
	}
	trace := strings.ToLower(v.Get("trace"))
	if trace != "" && !isHex(trace, 32) {
		api.WriteError(w, http.StatusBadRequest, fmt.Sprintf("trace %q: want a trace id of 32 hex digits", trace))
		return
	}
	var from time.Time
	if since > 0 {
		from = time.Now().Add(-since)
	}
	// A damaged file's rest is skipped, as the CLI does; the CLI's
	// warning has no place in a JSON answer.
	all, err := readStores([]string{dir}, from, func(string, string) {})
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := api.NewLines(w, r)
	for _, rec := range join(all, false) {
		if trace != "" && rec.TraceID != trace {
			continue
		}
		b, err := json.Marshal(rec)
		if err != nil {
			api.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		if out.Add(b) != nil {
			return
		}
	}
	out.End()
}
