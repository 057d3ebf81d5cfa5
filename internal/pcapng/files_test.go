package pcapng

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestFilesAndOpenFile: Files lists what a series wrote, OpenFile reads
// it back, and no other name opens: not a path, not a file of another
// name, not a symbolic link with a capture file's name.
func TestFilesAndOpenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "caps")
	r := newRotator(t, dir, RotatorOptions{})
	s, err := r.Open("trace")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.WritePacket(rotPacket(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	files, err := r.Files()
	if err != nil || len(files) != 1 || files[0].Size != headLen+3*epbLen {
		t.Fatalf("files %+v, %v: want one of %d bytes", files, err, headLen+3*epbLen)
	}
	f, err := r.OpenFile(files[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if len(b) != headLen+3*epbLen {
		t.Errorf("read %d bytes", len(b))
	}
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(dir, "trace-20260101T000000Z-000009.pcapng"))
	for _, name := range []string{"../caps/" + files[0].Name, "notes.txt", "trace-20260101T000000Z-000009.pcapng"} {
		if f, err := r.OpenFile(name); err == nil {
			f.Close()
			t.Errorf("%s opened", name)
		} else if name != "trace-20260101T000000Z-000009.pcapng" && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want not exist", name, err)
		}
	}
}
