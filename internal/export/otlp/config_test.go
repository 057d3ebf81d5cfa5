package otlp

import (
	"bytes"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigHeadersFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	c := DefaultConfig()
	c.Headers = []string{"X-Tenant=a"}
	c.HeadersFile = write("ok", "# token for the collector\n\nauthorization = Bearer abc==\nx-scope=b\n", 0o600)
	opts, err := c.Options(log)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"x-tenant": "a", "authorization": "Bearer abc==", "x-scope": "b"}
	if !maps.Equal(opts.Headers, want) {
		t.Fatalf("headers %v, want %v", opts.Headers, want)
	}
	if logs.Len() != 0 {
		t.Fatalf("a 0600 file was warned about: %s", logs.String())
	}

	c.HeadersFile = write("open", "authorization=Bearer abc\n", 0o644)
	if _, err := c.Options(log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "readable by other users") || strings.Contains(logs.String(), "Bearer") {
		t.Fatalf("a 0644 file: log %q, want a warning without the token", logs.String())
	}

	for _, tc := range []struct{ name, text, want string }{
		{"dup", "x-tenant=b\n", `header "x-tenant" is also in otlp.headers`},
		{"noeq", "Bearer secret\n", "line 1 is not key=value"},
		{"reserved", "grpc-timeout=1S\n", "reserved"},
		{"twice", "a=1\nA=2\n", `header "a" given twice`},
	} {
		c.HeadersFile = write(tc.name, tc.text, 0o600)
		_, err := c.Options(log)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "otlp.headers_file") {
			t.Errorf("%s: error %v, want %q naming the key", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %q shows the value", tc.name, err)
		}
	}

	c.HeadersFile = "/dev/zero"
	if _, err := c.Options(log); err == nil || !strings.Contains(err.Error(), "larger than 64KiB") {
		t.Errorf("/dev/zero: %v, want the size limit", err)
	}
	c.HeadersFile = filepath.Join(dir, "missing")
	if _, err := c.Options(log); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}
