package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// With no agent on the socket, `loupe status` exits 1 and says how to
// reach one elsewhere.
func TestStatusWithoutAgent(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "loupe.sock")
	code, out, errOut := run(t, "status", "--control", missing)
	want := "loupe status: control socket " + missing + " does not exist: is the agent running? (an agent serving another socket is reached with --control PATH)\n"
	if code != 1 || out != "" || errOut != want {
		t.Fatalf("exit %d, stdout %q, stderr %q\nwant exit 1, stderr %q", code, out, errOut, want)
	}
	if code, out, _ := run(t, "status", "--help"); code != 0 || !strings.Contains(out, "Usage: loupe status [--json] [--control PATH]") || !strings.Contains(out, "-control path") {
		t.Fatalf("status --help: exit %d, %q", code, out)
	}
}

// A bad --control for `loupe run` is refused with the key named, before
// anything is loaded.
func TestRunRejectsBadControl(t *testing.T) {
	code, _, errOut := run(t, "run", "--control", "/"+strings.Repeat("s", 200))
	if code != 1 || !strings.Contains(errOut, "config: flag --control: control.socket: 201 bytes long: a unix socket path holds at most 107") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}
