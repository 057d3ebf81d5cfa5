package safedir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// TestOpen: Open follows a symlink to a directory, OpenNoFollow refuses
// it; both refuse a file.
func TestOpen(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	link := filepath.Join(base, "link")
	file := filepath.Join(base, "file")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Open(link)
	if err != nil {
		t.Fatalf("Open of a link to a directory: %v", err)
	}
	d.Close()
	if _, err := OpenNoFollow(link); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenNoFollow of a link: %v", err)
	}
	for _, open := range []func(string) (*Dir, error){Open, OpenNoFollow} {
		if _, err := open(file); err == nil || !strings.Contains(err.Error(), "is not a directory") {
			t.Errorf("open of a file: %v", err)
		}
		if _, err := open(filepath.Join(base, "none")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("open of nothing: %v", err)
		}
	}
}

// TestCreateAndOpenFile: Create refuses any existing name, a symlink
// included, and leaves the target alone; OpenFile refuses a symlink and
// does not block on a FIFO; Remove unlinks the link, not its target.
func TestCreateAndOpenFile(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("unchanged"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Create("link", 0o600); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create over a symlink: %v", err)
	}
	if _, err := d.OpenFile("link", os.O_RDONLY, 0); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenFile of a symlink: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := d.OpenFile("fifo", os.O_RDONLY, 0)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("OpenFile of a FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OpenFile blocked on a FIFO")
	}
	f, err := d.Create("new", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if names, err := d.Names(); err != nil || strings.Join(names, ",") != "fifo,link,new" {
		t.Errorf("Names: %q %v", names, err)
	}
	if err := d.Remove("link"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "unchanged" {
		t.Errorf("victim: %q %v", b, err)
	}
}

// TestCheckPrivate: another owner, or group or world write access, makes
// a directory unsafe; read access does not.
func TestCheckPrivate(t *testing.T) {
	testutil.RequirePrivileged(t) // chown to another uid
	for _, c := range []struct {
		mode    os.FileMode
		uid     int
		foreign bool
		ok      bool
	}{
		{0o700, -1, false, true},
		{0o755, -1, false, true},
		{0o720, -1, false, false},
		{os.ModeSticky | 0o777, -1, false, false},
		{0o700, 65534, true, false},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		if c.uid >= 0 {
			if err := os.Chown(dir, c.uid, c.uid); err != nil {
				t.Fatal(err)
			}
		}
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		err = d.CheckPrivate()
		d.Close()
		var np *NotPrivateError
		if c.ok != (err == nil) || !c.ok && (!errors.As(err, &np) || np.Foreign() != c.foreign) {
			t.Errorf("mode %v uid %d: %v", c.mode, c.uid, err)
		}
	}
}
