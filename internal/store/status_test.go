package store_test

import (
	"os"
	"strings"
	"testing"

	"loupe/internal/store"
)

// TestWriterState: a reader tells a store with a writer from one without,
// without taking the lock.
func TestWriterState(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	r := openReader(t, dir)
	if ws := r.Writer(); !ws.Known || !ws.Running || ws.PID != os.Getpid() {
		t.Fatalf("with a writer: %+v, want running as pid %d", ws, os.Getpid())
	}
	// The check took no lock: a second writer is refused by the first's
	// lock alone, and after Close a new writer gets the lock.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ws := r.Writer(); !ws.Known || ws.Running {
		t.Fatalf("after the writer closed: %+v", ws)
	}
	s = openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	if ws := r.Writer(); !ws.Running {
		t.Fatalf("with a new writer: %+v", ws)
	}
}

// TestLockTable reads the kernel's format.
func TestLockTable(t *testing.T) {
	table := `1: POSIX  ADVISORY  WRITE 99 fe:00:77 0 EOF
2: FLOCK  ADVISORY  WRITE 1234 fe:01:77 0 EOF
2: -> FLOCK  ADVISORY  WRITE 1300 fe:00:77 0 EOF
3: FLOCK  ADVISORY  WRITE 4321 fe:00:77 0 EOF
`
	for _, c := range []struct {
		major, minor uint32
		ino          uint64
		want         store.WriterState
	}{
		{0xfe, 0, 77, store.WriterState{Known: true, Running: true, PID: 4321}},
		{0xfe, 1, 77, store.WriterState{Known: true, Running: true, PID: 1234}},
		{0xfe, 0, 78, store.WriterState{Known: true}},
	} {
		if got := store.LockHolder(strings.NewReader(table), c.major, c.minor, c.ino); got != c.want {
			t.Errorf("%x:%x:%d: %+v, want %+v", c.major, c.minor, c.ino, got, c.want)
		}
	}
}
