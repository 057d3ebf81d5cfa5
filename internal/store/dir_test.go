package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestCreateNeverFollows: even a temp name someone guessed cannot redirect
// a write: create fails on a symlink, dangling or not, and on any existing
// file, and the target is untouched.
func TestCreateNeverFollows(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("unchanged"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	links := map[string]string{"to-victim": victim, "dangling": filepath.Join(dir, "nothing-here")}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		if f, err := d.create(name); err == nil || !errors.Is(err, fs.ErrExist) {
			f.Close()
			t.Errorf("create over a symlink (%s): %v", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "regular"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.create("regular"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("create over a regular file: %v", err)
	}
	// Reads refuse symlinks too.
	if _, err := d.open("to-victim"); !errors.Is(err, errSymlink) {
		t.Errorf("open of a symlink: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nothing-here")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a dangling link's target was created: %v", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "unchanged" {
		t.Errorf("victim: %q %v", b, err)
	}
}
