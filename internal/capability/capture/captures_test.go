package capture

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"loupe/internal/api"
	"loupe/internal/pcapng"
)

// TestCapturesCmd: `loupe captures --json` prints what GET
// /api/v1/captures answers, and the plain form lists each connection
// and file.
func TestCapturesCmd(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	want := CaptureList{
		Traces: []Trace{{ID: "0af7651916cd43dd8448eb211c80319c", Trigger: "http.status=500-599", Status: 503, Time: at,
			Src: "10.0.0.1:40000", Dst: "10.0.0.2:80", Iface: "eth0", Request: "GET /bar HTTP/1.1"},
			{ID: "1bf7651916cd43dd8448eb211c80319d", Trigger: "tcp.rst", Time: at, Src: "10.0.0.1:40001", Dst: "10.0.0.2:80", Iface: "eth0"}},
		Files: []pcapng.FileInfo{{Name: "loupe-20260304T050607Z.pcapng", Size: 4096, Time: at}},
		Dir:   "/var/lib/loupe/captures",
	}
	path := filepath.Join(t.TempDir(), "loupe.sock")
	s, err := api.Listen(api.Options{Socket: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	route := api.Route{Method: http.MethodGet, Path: CapturesPath, Access: api.Read,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { api.WriteJSON(w, http.StatusOK, want) })}
	if err := s.Serve([]api.Route{route}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		var out, errb bytes.Buffer
		if err := capturesCmd(append(args, "--control", path), &out, &errb); err != nil {
			t.Fatalf("captures %v: %v: %s", args, err, errb.String())
		}
		return out.String()
	}
	var got CaptureList
	if err := json.Unmarshal([]byte(run("--json")), &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("--json: %+v (%v), want %+v", got, err, want)
	}
	out := run()
	for _, s := range []string{"0af7651916cd43dd8448eb211c80319c", "503", "GET /bar HTTP/1.1", "tcp.rst", "loupe-20260304T050607Z.pcapng", "4096", "/var/lib/loupe/captures"} {
		if !strings.Contains(out, s) {
			t.Errorf("plain output lacks %q:\n%s", s, out)
		}
	}
}
