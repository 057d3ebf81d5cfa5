package testutil

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Bpffs mounts a bpf file system of the test's own on a new directory and
// unmounts it in t.Cleanup, so that tests never share pins; unmounting
// releases whatever is still pinned there (maps, links: a link that goes
// detaches its program). It needs root (RequirePrivileged).
func Bpffs(t testing.TB) string {
	t.Helper()
	RequirePrivileged(t)
	// Not t.TempDir: its parent is private to root, and an agent running
	// as nobody must reach its own pin directory in there.
	parent, err := os.MkdirTemp("", "loupe-bpffs-")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "bpffs")
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("bpf", dir, "bpf", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=0755"); err != nil {
		os.RemoveAll(parent)
		t.Fatalf("mount bpf file system on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			return
		}
		os.RemoveAll(parent)
	})
	return dir
}
