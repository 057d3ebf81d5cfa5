package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of the given size ("8m") on a new directory and
// unmounts it in t.Cleanup: a small file system a test can fill. It needs
// root (RequirePrivileged).
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	RequirePrivileged(t)
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file of zeros at path until the file system is full and
// returns its size. Deleting the file gives the space back.
func Fill(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if err != nil {
			if !isNoSpace(err) {
				t.Fatalf("fill %s: %v", path, err)
			}
			// tmpfs may still take a partial page: fill to the byte.
			for {
				w, err := f.Write(chunk[:1])
				n += int64(w)
				if err != nil {
					break
				}
			}
			return n
		}
	}
}

func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }
