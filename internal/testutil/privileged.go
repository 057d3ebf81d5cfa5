// Package testutil holds helpers shared by tests that need the kernel: the
// privilege gate and network-namespace fixtures.
package testutil

import (
	"os"
	"testing"
)

// RequirePrivilegedEnv, set to 1, turns a missing privilege into a failure
// instead of a skip. CI sets it, so that a test that needs root can never
// pass there by not running.
const RequirePrivilegedEnv = "CI_REQUIRE_PRIVILEGED"

// RequirePrivileged skips the test unless it runs as root (BPF, netlink and
// namespaces need it), or fails it if RequirePrivilegedEnv is set.
func RequirePrivileged(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(RequirePrivilegedEnv) == "1" {
		t.Fatalf("this test needs root, and %s=1 forbids skipping it", RequirePrivilegedEnv)
	}
	t.Skip("needs root (BPF, netlink, network namespaces)")
}
