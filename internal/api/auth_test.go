package api

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testToken = "s3cr3t-t0ken-0123456789abcdef"

// tokenFile writes content to a file of mode perm and returns its path.
func tokenFile(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTCPNeedsToken(t *testing.T) {
	// A trailing newline, as echo writes it, is not part of the token.
	s := serve(t, Options{Listen: "127.0.0.1:0", TokenFile: tokenFile(t, testToken+"\n", 0o600)}, statusRoute(),
		Route{Method: http.MethodPost, Path: Prefix + "write", Access: Write,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				WriteJSON(w, http.StatusOK, map[string]bool{"done": true})
			})})
	if s.Addr() == nil || s.SocketPath() != "" {
		t.Fatalf("Addr %v SocketPath %q", s.Addr(), s.SocketPath())
	}
	base := "http://" + s.Addr().String()
	c := &http.Client{}
	for _, tc := range []struct {
		name, method, path, auth string
		code                     int
	}{
		{"no header", http.MethodGet, StatusPath, "", http.StatusUnauthorized},
		{"wrong token", http.MethodGet, StatusPath, "Bearer " + strings.ToUpper(testToken), http.StatusUnauthorized},
		{"token prefix", http.MethodGet, StatusPath, "Bearer " + testToken[:20], http.StatusUnauthorized},
		{"token with a suffix", http.MethodGet, StatusPath, "Bearer " + testToken + "x", http.StatusUnauthorized},
		{"other scheme", http.MethodGet, StatusPath, "Basic " + testToken, http.StatusUnauthorized},
		{"bare token", http.MethodGet, StatusPath, testToken, http.StatusUnauthorized},
		{"right token", http.MethodGet, StatusPath, "Bearer " + testToken, http.StatusOK},
		{"scheme in lower case", http.MethodGet, StatusPath, "bearer " + testToken, http.StatusOK},
		{"write without token", http.MethodPost, Prefix + "write", "", http.StatusUnauthorized},
		{"write with token", http.MethodPost, Prefix + "write", "Bearer " + testToken, http.StatusOK},
	} {
		hdr := map[string]string{}
		if tc.auth != "" {
			hdr["Authorization"] = tc.auth
		}
		code, h, body := request(t, c, tc.method, base+tc.path, hdr)
		if code != tc.code {
			t.Errorf("%s: %d, want %d (%v)", tc.name, code, tc.code, body)
			continue
		}
		if code == http.StatusUnauthorized {
			if body["error"] != "missing or invalid bearer token" || h.Get("WWW-Authenticate") != `Bearer realm="loupe"` {
				t.Errorf("%s: body %v, WWW-Authenticate %q", tc.name, body, h.Get("WWW-Authenticate"))
			}
		}
	}

	// The client sends the token.
	st, err := NewTCPClient(s.Addr().String(), testToken).Status(context.Background())
	if err != nil || st.Version != testStatus.Version {
		t.Fatalf("status with the token: %+v, %v", st, err)
	}
	_, err = NewTCPClient(s.Addr().String(), "wrong-token-0123456789").Status(context.Background())
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusUnauthorized || se.Message != "missing or invalid bearer token" {
		t.Fatalf("status with a wrong token: %v", err)
	}
}

func TestTokenFileRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		file func(t *testing.T) string
		want string
	}{
		{"readable by others", func(t *testing.T) string { return tokenFile(t, testToken, 0o644) },
			"mode 0644 lets group or others access it; make it 0600"},
		{"readable by the group", func(t *testing.T) string { return tokenFile(t, testToken, 0o640) },
			"mode 0640 lets group or others access it"},
		{"a directory", func(*testing.T) string { return dir }, "not a regular file (a directory)"},
		{"missing", func(*testing.T) string { return filepath.Join(dir, "nosuch") }, "no such file or directory"},
		{"too short", func(t *testing.T) string { return tokenFile(t, "short\n", 0o600) },
			"the token is 5 bytes long, want at least 16"},
		{"not one word", func(t *testing.T) string { return tokenFile(t, "two words in one token", 0o600) },
			"the token holds a byte that is not visible ASCII (0x20)"},
		{"not given", func(*testing.T) string { return "" },
			"control.token_file: required when control.listen is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.file(t)
			_, err := Listen(Options{Listen: "127.0.0.1:0", TokenFile: path, Logger: quietLogger()})
			if err == nil || !strings.HasPrefix(err.Error(), "control.token_file") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to name control.token_file and say %q", err, tc.want)
			}
			if path != "" && !strings.Contains(err.Error(), path) {
				t.Errorf("error %v does not name the file", err)
			}
		})
	}
	// Read-only for the owner is as private as 0600.
	if _, err := readToken(tokenFile(t, testToken, 0o400)); err != nil {
		t.Errorf("mode 0400: %v", err)
	}
}

// A refused token file stops the start before the socket is made.
func TestTokenRefusedBeforeSocket(t *testing.T) {
	path := socketPath(t)
	_, err := Listen(Options{Socket: path, Listen: "127.0.0.1:0", TokenFile: tokenFile(t, testToken, 0o644), Logger: quietLogger()})
	if err == nil {
		t.Fatal("no error")
	}
	if _, err := os.Lstat(path); err == nil {
		t.Fatal("the socket was created")
	}
}
