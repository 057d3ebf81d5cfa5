package query

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLatencyRouteEqualsCLI: GET /api/v1/latency answers the lines of
// `loupe latency --json` over the same store, for all and for one trace,
// and as one array when asked.
func TestLatencyRouteEqualsCLI(t *testing.T) {
	dir := writeStore(t, sent("a", "boot-a", false, 100), sent("a", "boot-a", false, 101))
	h := Routes(dir)[0].Handler
	get := func(q string, accept string) (int, string) {
		r := httptest.NewRequest(http.MethodGet, LatencyPath+q, nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	want, _ := runLatency(t, "--store", dir, "--json")
	if code, got := get("", ""); code != 200 || got != want || strings.Count(want, "\n") != 2 {
		t.Errorf("all: %d\napi:\n%s\ncli:\n%s", code, got, want)
	}
	trace := jsonLines(t, want)[0]["trace_id"].(string)
	want, _ = runLatency(t, "--store", dir, "--json", "--trace", trace)
	if code, got := get("?since=0&trace="+trace, ""); code != 200 || got != want {
		t.Errorf("trace %s: %d\napi:\n%s\ncli:\n%s", trace, code, got, want)
	}
	code, arr := get("", "application/json")
	var recs []json.RawMessage
	if err := json.Unmarshal([]byte(arr), &recs); err != nil || code != 200 || len(recs) != 2 {
		t.Errorf("array: %d %v: %s", code, err, arr)
	}
	for _, q := range []string{"?trace=xyz", "?since=-1s", "?store=/etc"} {
		if code, body := get(q, ""); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
}
