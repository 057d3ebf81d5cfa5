package store

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// WriterState says whether a writer (an agent) holds a store.
type WriterState struct {
	// Known is false when the kernel's lock table could not be read: then
	// nothing is known.
	Known bool
	// Running is set when a process holds the flock on the store's LOCK.
	Running bool
	// PID is the holder's process id as the kernel's lock table gives it
	// (0 if it is in another PID namespace).
	PID int
}

func (w WriterState) String() string {
	switch {
	case !w.Known:
		return "unknown"
	case w.Running && w.PID > 0:
		return fmt.Sprintf("running (pid %d)", w.PID)
	case w.Running:
		return "running"
	}
	return "not running"
}

// procLocks is the kernel's table of file locks.
const procLocks = "/proc/locks"

// Writer reports whether a writer holds the store's lock. It looks the
// LOCK file up in the kernel's lock table rather than trying the lock:
// even a shared lock taken for an instant would make an agent starting at
// that instant fail with ErrLocked.
func (r *Reader) Writer() WriterState {
	d, err := openDir(r.dir)
	if err != nil {
		return WriterState{}
	}
	defer d.close()
	st, err := d.lstat(lockName)
	if err != nil {
		// No LOCK: no writer ever opened the store (or it was removed).
		return WriterState{Known: true}
	}
	f, err := os.Open(procLocks)
	if err != nil {
		return WriterState{}
	}
	defer f.Close()
	return lockHolder(f, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}

// lockHolder finds an flock on the inode in a /proc/locks table: lines
// such as
//
//	1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF
//	1: -> FLOCK  ADVISORY  WRITE 1240 fd:01:5678 0 EOF   (a waiter)
//
// where the device's major and minor numbers are hexadecimal.
func lockHolder(r io.Reader, major, minor uint32, ino uint64) WriterState {
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] == "->" || f[1] != "FLOCK" || f[5] != want {
			continue
		}
		pid, _ := strconv.Atoi(f[4])
		return WriterState{Known: true, Running: true, PID: max(pid, 0)}
	}
	if sc.Err() != nil {
		return WriterState{}
	}
	return WriterState{Known: true}
}
