package ui

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"loupe/internal/api"
)

const testToken = "0123456789abcdef-test-token"

func tokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// serve starts a UI on addr with one route of each access class.
func serve(t *testing.T, addr, token string) *Server {
	t.Helper()
	s, err := Listen(Options{Listen: addr, TokenFile: token, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		api.WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	routes := []api.Route{
		{Method: http.MethodGet, Path: api.Prefix + "read", Access: api.Read, Handler: ok},
		{Method: http.MethodGet, Path: api.Prefix + "payload", Access: api.Payload, Handler: ok},
		{Method: http.MethodPost, Path: api.Prefix + "write", Access: api.Write, Handler: ok},
		{Method: http.MethodDelete, Path: api.Prefix + "write", Access: api.Write, Handler: ok},
	}
	if err := s.Serve(routes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

type req struct {
	method, path  string
	host, origin  string
	token         string
	contentType   string
	wantCode      int
	wantInMessage string
}

func do(t *testing.T, base string, c req) {
	t.Helper()
	var body io.Reader
	if c.method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	r, err := http.NewRequest(c.method, base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.host != "" {
		r.Host = c.host
	}
	if c.origin != "" {
		r.Header.Set("Origin", c.origin)
	}
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.contentType != "" {
		r.Header.Set("Content-Type", c.contentType)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != c.wantCode || !strings.Contains(string(b), c.wantInMessage) {
		t.Errorf("%s %s host=%q origin=%q token=%v type=%q: %d %s, want %d with %q",
			c.method, c.path, c.host, c.origin, c.token != "", c.contentType, resp.StatusCode, b, c.wantCode, c.wantInMessage)
	}
}

// TestLoopbackAccess: on loopback, Read routes are open; Payload and
// Write need the token; a foreign Origin or Host is refused whatever the
// token; a POST needs a JSON body.
func TestLoopbackAccess(t *testing.T) {
	s := serve(t, "127.0.0.1:0", tokenFile(t))
	base := "http://" + s.Addr().String()
	self := base
	const j = "application/json"
	for _, c := range []req{
		{method: "GET", path: "/api/v1/read", wantCode: 200},
		{method: "GET", path: "/api/v1/read", origin: self, wantCode: 200},
		{method: "GET", path: "/api/v1/payload", wantCode: 401, wantInMessage: "token"},
		{method: "GET", path: "/api/v1/payload", token: "wrong-token-0123456789", wantCode: 401},
		{method: "GET", path: "/api/v1/payload", token: testToken, wantCode: 200},
		{method: "POST", path: "/api/v1/write", contentType: j, wantCode: 401},
		{method: "POST", path: "/api/v1/write", token: testToken, contentType: j, wantCode: 200},
		{method: "POST", path: "/api/v1/write", token: testToken, contentType: "application/json; charset=utf-8", origin: self, wantCode: 200},
		// What a form of another site can send: no JSON, no token.
		{method: "POST", path: "/api/v1/write", token: testToken, contentType: "text/plain", wantCode: 415},
		{method: "POST", path: "/api/v1/write", token: testToken, contentType: "application/x-www-form-urlencoded", wantCode: 415},
		{method: "DELETE", path: "/api/v1/write", wantCode: 401},
		{method: "DELETE", path: "/api/v1/write", token: testToken, wantCode: 200},
		{method: "GET", path: "/api/v1/read", origin: "http://evil.example", wantCode: 403, wantInMessage: "origin"},
		{method: "POST", path: "/api/v1/write", token: testToken, contentType: j, origin: "http://evil.example", wantCode: 403},
		// DNS rebinding: a foreign name resolved to loopback.
		{method: "GET", path: "/api/v1/read", host: "evil.example:80", wantCode: 421},
		{method: "GET", path: "/", host: "evil.example", wantCode: 421},
		{method: "GET", path: "/api/v1/read", host: "localhost:1", wantCode: 200},
		{method: "GET", path: "/api/v1/nothing", wantCode: 404},
		{method: "PUT", path: "/api/v1/write", token: testToken, contentType: j, wantCode: 405},
		{method: "GET", path: "/", wantCode: 200, wantInMessage: "<!doctype html>"},
		{method: "GET", path: "/flows", wantCode: 200, wantInMessage: "<!doctype html>"},
		{method: "POST", path: "/", contentType: j, wantCode: 405},
	} {
		do(t, base, c)
	}
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
}

// TestNoToken: without control.token_file, the payload and write routes
// are refused on the UI, and say what to set.
func TestNoToken(t *testing.T) {
	s := serve(t, "127.0.0.1:0", "")
	base := "http://" + s.Addr().String()
	do(t, base, req{method: "GET", path: "/api/v1/read", wantCode: 200})
	do(t, base, req{method: "GET", path: "/api/v1/payload", token: testToken, wantCode: 403, wantInMessage: "control.token_file"})
	do(t, base, req{method: "POST", path: "/api/v1/write", token: testToken, contentType: "application/json", wantCode: 403})
}

// TestExposed: beyond loopback, the UI refuses to start without a token,
// and with one every route needs it; the pages' code is not secret.
func TestExposed(t *testing.T) {
	if _, err := Listen(Options{Listen: "0.0.0.0:0", Logger: slog.New(slog.DiscardHandler)}); err == nil || !strings.Contains(err.Error(), "control.token_file") {
		t.Fatalf("exposed without a token: %v", err)
	}
	s := serve(t, "0.0.0.0:0", tokenFile(t))
	_, port, _ := strings.Cut(s.Addr().String(), "]:")
	if port == "" {
		_, port, _ = strings.Cut(s.Addr().String(), ":")
	}
	base := "http://127.0.0.1:" + port
	do(t, base, req{method: "GET", path: "/api/v1/read", wantCode: 401})
	do(t, base, req{method: "GET", path: "/api/v1/read", token: testToken, wantCode: 200})
	do(t, base, req{method: "GET", path: "/api/v1/read", token: testToken, host: "loupe.example:9463", wantCode: 200})
	do(t, base, req{method: "GET", path: "/api/v1/payload", token: testToken, wantCode: 200})
	do(t, base, req{method: "GET", path: "/", wantCode: 200})
}
