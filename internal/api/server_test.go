package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testStatus is the document the status route of these tests serves.
var testStatus = Status{
	Version:       "loupe v9.9.9 (abcdef123456) go1.26 linux/amd64",
	PID:           4242,
	Started:       "2026-01-02T15:04:05Z",
	UptimeSeconds: 90.5,
	State:         StateRunning,
	Capabilities: []CapabilityStatus{{Name: "flows", Enabled: true, State: "running",
		Detail: map[string]any{"flow_budget": float64(65536), "sinks": []any{"store", "prometheus"}}}},
	Interfaces: InterfaceStatus{Attached: 2, Names: []string{"eth0", "veth1"}, Mode: "tcx"},
	Datapath:   DatapathStatus{Tables: "percpu", FlowBudget: 65536, CPUs: 2, Pinned: true},
}

func statusRoute() Route { return StatusRoute(func() Status { return testStatus }) }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve starts a server with o and routes; it is closed when the test ends.
func serve(t *testing.T, o Options, routes ...Route) *Server {
	t.Helper()
	o.Logger = quietLogger()
	s, err := Listen(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Serve(routes); err != nil {
		t.Fatal(err)
	}
	return s
}

// socketPath is a socket path in a directory that does not exist yet.
func socketPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "run", "loupe.sock")
}

// unixHTTP is a plain HTTP client of the socket at path, for requests the
// api.Client would not make.
func unixHTTP(path string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
}

// request sends method url and returns the status, the headers and the
// decoded JSON body.
func request(t *testing.T, c *http.Client, method, url string, hdr map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if method != http.MethodHead {
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v", method, url, err)
		}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, url, ct)
	}
	return resp.StatusCode, resp.Header, body
}

func TestStatusOverUnixSocket(t *testing.T) {
	path := socketPath(t)
	s := serve(t, Options{Socket: path}, statusRoute())
	if s.SocketPath() != path || s.Addr() != nil {
		t.Fatalf("SocketPath %q Addr %v", s.SocketPath(), s.Addr())
	}

	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
		t.Errorf("socket owned by uid %d, want %d", uid, os.Geteuid())
	}
	di, err := os.Lstat(filepath.Dir(path))
	if err != nil || di.Mode().Perm() != 0o755 || !di.IsDir() {
		t.Errorf("socket directory: %v, %v; want a directory with 0755", di.Mode(), err)
	}
	if es, _ := os.ReadDir(filepath.Dir(path)); len(es) != 1 {
		t.Errorf("directory holds %d entries, want the socket only (the private bind directory removed)", len(es))
	}

	c, err := NewClient(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, testStatus) {
		t.Fatalf("status\n got %+v\nwant %+v", got, testStatus)
	}

	// The wire names are the contract: check them in the raw document.
	code, _, doc := request(t, unixHTTP(path), http.MethodGet, "http://x"+StatusPath, nil)
	if code != http.StatusOK {
		t.Fatalf("status code %d", code)
	}
	for k, want := range map[string]any{
		"version": testStatus.Version, "pid": float64(4242), "started": "2026-01-02T15:04:05Z",
		"uptime_seconds": 90.5, "state": "running",
	} {
		if doc[k] != want {
			t.Errorf("%s = %#v, want %#v", k, doc[k], want)
		}
	}
	dp, _ := doc["datapath"].(map[string]any)
	for k, want := range map[string]any{"tables": "percpu", "flow_budget": float64(65536), "cpus": float64(2), "pinned": true} {
		if dp[k] != want {
			t.Errorf("datapath.%s = %#v, want %#v", k, dp[k], want)
		}
	}
	ifs, _ := doc["interfaces"].(map[string]any)
	if ifs["attached"] != float64(2) || !reflect.DeepEqual(ifs["names"], []any{"eth0", "veth1"}) || ifs["mode"] != "tcx" {
		t.Errorf("interfaces = %#v", ifs)
	}
	caps, _ := doc["capabilities"].([]any)
	if len(caps) != 1 {
		t.Fatalf("capabilities = %#v", doc["capabilities"])
	}
	cp := caps[0].(map[string]any)
	if cp["name"] != "flows" || cp["enabled"] != true || cp["state"] != "running" {
		t.Errorf("capability = %#v", cp)
	}
}

func TestStatusNeverNull(t *testing.T) {
	path := socketPath(t)
	serve(t, Options{Socket: path}, StatusRoute(func() Status { return Status{State: StateStarting} }))
	_, _, doc := request(t, unixHTTP(path), http.MethodGet, "http://x"+StatusPath, nil)
	if caps, ok := doc["capabilities"].([]any); !ok || len(caps) != 0 {
		t.Errorf("capabilities = %#v, want []", doc["capabilities"])
	}
	if names, ok := doc["interfaces"].(map[string]any)["names"].([]any); !ok || len(names) != 0 {
		t.Errorf("interfaces.names = %#v, want []", doc["interfaces"])
	}
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	path := socketPath(t)
	thing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"id": r.PathValue("id")})
	})
	serve(t, Options{Socket: path}, statusRoute(),
		Route{Method: http.MethodGet, Path: Prefix + "things/{id}", Access: Read, Handler: thing},
		Route{Method: http.MethodDelete, Path: Prefix + "things/{id}", Access: Write, Handler: thing})
	c := unixHTTP(path)
	for _, tc := range []struct {
		method, path string
		code         int
		allow, msg   string
	}{
		{http.MethodGet, "/api/v1/nope", http.StatusNotFound, "", "no such endpoint: /api/v1/nope"},
		{http.MethodGet, "/", http.StatusNotFound, "", "no such endpoint: /"},
		{http.MethodGet, "/api/v2/status", http.StatusNotFound, "", "no such endpoint: /api/v2/status"},
		{http.MethodGet, "/api/v1/status/", http.StatusNotFound, "", "no such endpoint: /api/v1/status/"},
		{http.MethodPost, "/api/v1/status", http.StatusMethodNotAllowed, "GET, HEAD",
			"method POST not allowed on /api/v1/status (allowed: GET, HEAD)"},
		{http.MethodPut, "/api/v1/things/7", http.StatusMethodNotAllowed, "GET, HEAD, DELETE",
			"method PUT not allowed on /api/v1/things/7 (allowed: GET, HEAD, DELETE)"},
	} {
		code, hdr, body := request(t, c, tc.method, "http://x"+tc.path, nil)
		if code != tc.code || hdr.Get("Allow") != tc.allow || body["error"] != tc.msg {
			t.Errorf("%s %s: %d Allow %q body %v; want %d Allow %q error %q",
				tc.method, tc.path, code, hdr.Get("Allow"), body, tc.code, tc.allow, tc.msg)
		}
	}
	if code, _, body := request(t, c, http.MethodGet, "http://x/api/v1/things/42", nil); code != http.StatusOK || body["id"] != "42" {
		t.Errorf("GET things/42: %d %v", code, body)
	}
	if code, _, _ := request(t, c, http.MethodHead, "http://x"+StatusPath, nil); code != http.StatusOK {
		t.Errorf("HEAD status: %d", code)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	path := socketPath(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// What an agent killed with SIGKILL leaves: the file, no listener.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	stale, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}

	serve(t, Options{Socket: path}, statusRoute())
	now, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(stale, now) {
		t.Fatal("the stale socket file is still there")
	}
	c, _ := NewClient(path)
	if st, err := c.Status(context.Background()); err != nil || st.PID != 4242 {
		t.Fatalf("status over the replacing socket: %+v, %v", st, err)
	}
}

func TestNonSocketNotRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loupe.sock")
	if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Listen(Options{Socket: path, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "exists and is not a socket (a regular file)") {
		t.Fatalf("error %v, want the regular file refused", err)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "keep me" {
		t.Fatalf("the file was touched: %q, %v", data, err)
	}
}

func TestLiveSocketRefused(t *testing.T) {
	path := socketPath(t)
	serve(t, Options{Socket: path}, statusRoute())
	_, err := Listen(Options{Socket: path, Logger: quietLogger()})
	want := "control socket " + path + ": another agent is serving on it; stop it, or choose another path with --control PATH"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %v\nwant prefix %s", err, want)
	}
	// The first server's socket is intact and still answers.
	c, _ := NewClient(path)
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("the serving agent's socket broke: %v", err)
	}
}

func TestSymlinkedParentRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, err := Listen(Options{Socket: filepath.Join(link, "loupe.sock"), Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "its directory "+link+" is a symbolic link; refusing it") {
		t.Fatalf("error %v, want the symlinked directory refused", err)
	}
	if es, _ := os.ReadDir(target); len(es) != 0 {
		t.Fatalf("%d entries created behind the link", len(es))
	}
}

func TestPermissionErrorNamesControl(t *testing.T) {
	err := socketError(DefaultSocket, &fs.PathError{Op: "mkdir", Path: "/run/loupe", Err: syscall.EACCES})
	const want = "control socket /run/loupe/loupe.sock: permission denied; choose another path with --control PATH (or control.socket), or none to disable"
	if err.Error() != want {
		t.Fatalf("got  %s\nwant %s", err, want)
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Error("the error does not match fs.ErrPermission")
	}
	if os.Geteuid() == 0 {
		return // root may create anything; the message above is what a user sees
	}
	// As a user, a directory under a read-only one cannot be created.
	ro := t.TempDir()
	if err := os.Chmod(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	_, err = Listen(Options{Socket: filepath.Join(ro, "loupe", "loupe.sock"), Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "permission denied; choose another path with --control PATH") {
		t.Fatalf("error %v", err)
	}
}

func TestSocketRemovedOnClose(t *testing.T) {
	path := socketPath(t)
	s, err := Listen(Options{Socket: path, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve([]Route{statusRoute()}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Closed before serving: the file goes too.
	s, err = Listen(Options{Socket: path, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file after Close without Serve: %v", err)
	}
}

// A stopping agent must not remove the socket of the agent that replaced
// it (a stale-socket takeover while it was hung, say).
func TestCloseLeavesAnotherSocket(t *testing.T) {
	path := socketPath(t)
	s, err := Listen(Options{Socket: path, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	s.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the other socket was removed: %v", err)
	}
}

func TestRouteValidation(t *testing.T) {
	h := http.NotFoundHandler()
	for _, tc := range []struct {
		name   string
		routes []Route
		want   string
	}{
		{"no access", []Route{{Method: "GET", Path: Prefix + "x", Handler: h}}, "route GET /api/v1/x: no access class"},
		{"outside v1", []Route{{Method: "GET", Path: "/x", Access: Read, Handler: h}}, "path must start with /api/v1/"},
		{"lower-case method", []Route{{Method: "get", Path: Prefix + "x", Access: Read, Handler: h}}, "method must be an upper-case HTTP method"},
		{"no handler", []Route{{Method: "GET", Path: Prefix + "x", Access: Read}}, "no handler"},
		{"twice", []Route{{Method: "GET", Path: Prefix + "x", Access: Read, Handler: h}, {Method: "GET", Path: Prefix + "x", Access: Write, Handler: h}},
			"route GET /api/v1/x registered twice"},
		{"conflicting wildcards", []Route{{Method: "GET", Path: Prefix + "a/{x}", Access: Read, Handler: h}, {Method: "GET", Path: Prefix + "{y}/b", Access: Read, Handler: h}},
			"route GET /api/v1/{y}/b: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Listen(Options{Socket: socketPath(t), Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Serve(tc.routes); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Serve: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestAuthorize(t *testing.T) {
	const self = 1000
	for _, tc := range []struct {
		access  Access
		c       conn
		tokenOK bool
		want    int // 0: allowed
	}{
		{Read, conn{peer: 1234}, false, 0},
		{Read, conn{peer: -1}, false, 0},
		{Payload, conn{peer: self}, false, 0},
		{Payload, conn{peer: 0}, false, 0},
		{Payload, conn{peer: 1234}, false, http.StatusForbidden},
		{Payload, conn{peer: -1}, false, http.StatusForbidden},
		{Write, conn{peer: self}, false, 0},
		{Write, conn{peer: 1234}, false, http.StatusForbidden},
		{Read, conn{tcp: true, peer: -1}, false, http.StatusUnauthorized},
		{Payload, conn{tcp: true, peer: -1}, false, http.StatusUnauthorized},
		{Write, conn{tcp: true, peer: -1}, false, http.StatusUnauthorized},
		{Read, conn{tcp: true, peer: -1}, true, 0},
		{Write, conn{tcp: true, peer: -1}, true, 0},
	} {
		d := authorize(tc.access, tc.c, tc.tokenOK, self)
		got := 0
		if d != nil {
			got = d.Code
		}
		if got != tc.want {
			t.Errorf("%s over %+v, token %v: %d, want %d", tc.access, tc.c, tc.tokenOK, got, tc.want)
		}
	}
	if d := authorize(Payload, conn{peer: 1234}, false, self); d == nil || d.Msg != "payload routes need root or the agent's user (uid 1000), not uid 1234" {
		t.Errorf("denial %+v", d)
	}
}

// The socket's own peer check lets the agent's user through: the peer's
// credentials are read from the kernel, not left unknown (which would
// refuse every payload and write route).
func TestPeerCredentialsOnSocket(t *testing.T) {
	path := socketPath(t)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, http.StatusOK, map[string]bool{"ok": true}) })
	serve(t, Options{Socket: path},
		Route{Method: http.MethodGet, Path: Prefix + "payload", Access: Payload, Handler: ok},
		Route{Method: http.MethodPost, Path: Prefix + "write", Access: Write, Handler: ok})
	c := unixHTTP(path)
	for _, r := range [][2]string{{http.MethodGet, "/api/v1/payload"}, {http.MethodPost, "/api/v1/write"}} {
		if code, _, body := request(t, c, r[0], "http://x"+r[1], nil); code != http.StatusOK || body["ok"] != true {
			t.Errorf("%s %s as the agent's own user: %d %v", r[0], r[1], code, body)
		}
	}
}
