package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// RequirePeer returns the path of a peer program the test runs (tshark,
// nfacctd, prometheus, java...). It skips the test when the program is not
// installed, or fails it if RequirePrivilegedEnv is set: CI installs every
// peer, so there a missing one is a broken set-up, not a reason to pass.
func RequirePeer(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	// Debian puts daemons in sbin, which a non-login PATH may lack.
	for _, dir := range []string{"/usr/sbin/", "/sbin/"} {
		if _, err := os.Stat(dir + name); err == nil {
			return dir + name
		}
	}
	if os.Getenv(RequirePrivilegedEnv) == "1" {
		t.Fatalf("peer %q is not installed, and %s=1 forbids skipping (run scripts/deps.sh test)", name, RequirePrivilegedEnv)
	}
	t.Skipf("peer %q is not installed (scripts/deps.sh test installs it)", name)
	return ""
}
