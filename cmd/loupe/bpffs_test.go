package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"loupe/internal/testutil"
)

// TestMountBpffs mounts a bpf file system on a directory of the test's
// own, then runs again and leaves the mount alone.
func TestMountBpffs(t *testing.T) {
	testutil.RequirePrivileged(t)
	dir := filepath.Join(t.TempDir(), "bpf")
	t.Cleanup(func() {
		// Each mount the command made; none beyond the first.
		for unix.Unmount(dir, unix.MNT_DETACH) == nil {
		}
	})
	for i, want := range []string{
		"mounted a bpf file system on " + dir + "\n",
		"a bpf file system is mounted on " + dir + " already\n",
	} {
		var out, errOut bytes.Buffer
		if code := dispatch([]string{"mount-bpffs", "--path", dir}, &out, &errOut); code != 0 || out.String() != want {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q; want 0 and %q", i, code, out.String(), errOut.String(), want)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil || uint32(st.Type) != unix.BPF_FS_MAGIC {
			t.Fatalf("run %d: %s is not a bpf file system (type %#x, %v)", i, dir, st.Type, err)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode of the mounted root: %v %v, want 0700", fi.Mode(), err)
	}
	// Exactly one mount: unmounting once leaves a plain directory.
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || uint32(st.Type) == unix.BPF_FS_MAGIC {
		t.Fatalf("after one unmount %s is still a bpf file system: the command mounted twice", dir)
	}
}
