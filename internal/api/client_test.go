package api

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestClientConnectErrors(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	missing := filepath.Join(dir, "nosuch.sock")
	for _, tc := range []struct {
		path, want string
	}{
		{missing, "control socket " + missing + " does not exist: is the agent running? (an agent serving another socket is reached with --control PATH)"},
		{stale, "control socket " + stale + ": nothing answers: the agent is not running"},
	} {
		c, err := NewClient(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Status(context.Background())
		var ce *ConnectError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %s", tc.path, err, tc.want)
		}
		if !strings.Contains(err.Error(), "--control") {
			t.Errorf("%s: %v does not name --control", tc.path, err)
		}
	}
	for _, p := range []string{"", None} {
		if _, err := NewClient(p); err == nil || !strings.Contains(err.Error(), "--control PATH") {
			t.Errorf("NewClient(%q): %v", p, err)
		}
	}
}

func TestConnectErrorPermission(t *testing.T) {
	err := connectError("/run/loupe/loupe.sock", &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)})
	const want = "control socket /run/loupe/loupe.sock: permission denied: run as root or the agent's user, or pass another socket with --control PATH"
	if err.Error() != want {
		t.Fatalf("got  %s\nwant %s", err, want)
	}
}

func TestControlFlag(t *testing.T) {
	for _, tc := range []struct {
		env, arg, want string
	}{
		{"", "", DefaultSocket},
		{"/env/loupe.sock", "", "/env/loupe.sock"},
		{"/env/loupe.sock", "/flag/loupe.sock", "/flag/loupe.sock"},
	} {
		t.Setenv(SocketEnv, tc.env)
		fs := flag.NewFlagSet("status", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		p := ControlFlag(fs)
		var args []string
		if tc.arg != "" {
			args = []string{"--control", tc.arg}
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if *p != tc.want {
			t.Errorf("env %q args %q: %q, want %q", tc.env, args, *p, tc.want)
		}
	}
}
