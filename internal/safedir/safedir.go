// Package safedir does file operations inside one directory without ever
// being redirected by a link someone planted there.
//
// The agent usually runs as root and writes where other users may have
// been before it (the flow store, capture files). So a directory is opened
// once and checked (CheckPrivate), and every later operation goes through
// that open descriptor (openat, renameat, unlinkat, fstatat) rather than a
// path: once the directory is checked, renaming or replacing a component of
// its path cannot redirect a write. Every open refuses a symbolic link in
// the last component (O_NOFOLLOW), and Create uses O_EXCL, which fails on
// any existing name, a dangling symlink included.
//
// What a caller then does with a directory (which names it owns, what it
// deletes, how it words a refusal) is its own business: this package holds
// only the mechanism.
package safedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Dir is an open directory.
type Dir struct {
	path string
	f    *os.File
	fd   int
}

// ErrSymlink replaces ELOOP, whose text ("too many levels of symbolic
// links") misleads for an O_NOFOLLOW open.
var ErrSymlink = errors.New("is a symbolic link, which is never followed")

// Open opens path, which must be a directory. The last component may be a
// symbolic link (a data directory pointing at another disk is ordinary);
// the checks a caller makes afterwards are made on the directory actually
// opened.
func Open(path string) (*Dir, error) {
	return open(path, 0)
}

// OpenNoFollow opens path, which must be a directory and not a symbolic
// link to one (links in earlier components are followed).
func OpenNoFollow(path string) (*Dir, error) {
	return open(path, unix.O_NOFOLLOW)
}

func open(path string, flag int) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|flag, 0)
	if err != nil {
		noFollow := flag&unix.O_NOFOLLOW != 0
		if errors.Is(err, unix.ENOTDIR) || noFollow && errors.Is(err, unix.ELOOP) {
			// With O_DIRECTORY|O_NOFOLLOW, Linux reports a symlink as
			// ENOTDIR; say which it was.
			var st unix.Stat_t
			if noFollow && unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return nil, &fs.PathError{Op: "open", Path: path, Err: ErrSymlink}
			}
			return nil, fmt.Errorf("%s is not a directory", path)
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{path: path, f: os.NewFile(uintptr(fd), path), fd: fd}, nil
}

// Path is the path the directory was opened by.
func (d *Dir) Path() string { return d.path }

// Fd is the directory's descriptor, for the *at system calls this package
// does not wrap. It stays valid until Close.
func (d *Dir) Fd() int { return d.fd }

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Join returns the path of name in the directory, for messages.
func (d *Dir) Join(name string) string { return filepath.Join(d.path, name) }

// Stat describes the directory itself.
func (d *Dir) Stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return st, &fs.PathError{Op: "stat", Path: d.path, Err: err}
	}
	return st, nil
}

// Lstat describes name without following a symlink.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &fs.PathError{Op: "stat", Path: d.Join(name), Err: err}
	}
	return st, nil
}

// OpenFile opens name in the directory without following a symlink; a
// symlink fails with ErrSymlink. O_NONBLOCK keeps a FIFO planted under the
// name from blocking the open; the file is back in blocking mode when
// OpenFile returns, and the caller checks that it got the kind of file it
// expects.
func (d *Dir) OpenFile(name string, flag int, perm uint32) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			err = ErrSymlink
		}
		return nil, &fs.PathError{Op: "open", Path: d.Join(name), Err: err}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: d.Join(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.Join(name)), nil
}

// Create creates name, which must not exist, for writing with mode perm
// (less the umask). Any existing name fails with fs.ErrExist, a symlink
// (dangling or not) included, so a planted link never receives the write.
func (d *Dir) Create(name string, perm uint32) (*os.File, error) {
	return d.OpenFile(name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, perm)
}

// Rename renames from to to, both in the directory.
func (d *Dir) Rename(from, to string) error {
	if err := unix.Renameat(d.fd, from, d.fd, to); err != nil {
		return &os.LinkError{Op: "rename", Old: d.Join(from), New: d.Join(to), Err: err}
	}
	return nil
}

// Remove unlinks name (a symlink itself, never its target).
func (d *Dir) Remove(name string) error {
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: d.Join(name), Err: err}
	}
	return nil
}

// Names lists the directory, sorted. It reads through a fresh open of "."
// so that listings never share a file offset.
func (d *Dir) Names() ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// NotPrivateError says why a directory is unsafe to write into: another
// user owns it, or may write into it, and so could plant links or files the
// writer would then follow, delete or publish.
type NotPrivateError struct {
	Path  string
	Owner uint32 // the directory's owner
	Euid  uint32 // the process's effective uid
	Perm  uint32 // the directory's permission bits
}

// Foreign reports whether the directory is owned by another user (else it
// is writable by group or others).
func (e *NotPrivateError) Foreign() bool { return e.Owner != e.Euid }

func (e *NotPrivateError) Error() string {
	if e.Foreign() {
		return fmt.Sprintf("%s is owned by uid %d, not by uid %d", e.Path, e.Owner, e.Euid)
	}
	return fmt.Sprintf("%s is writable by group or others (mode %04o)", e.Path, e.Perm)
}

// CheckPrivate returns a *NotPrivateError unless the directory is owned by
// the process's effective uid and is writable by nobody else.
func (d *Dir) CheckPrivate() error {
	st, err := d.Stat()
	if err != nil {
		return err
	}
	e := &NotPrivateError{Path: d.path, Owner: st.Uid, Euid: uint32(os.Geteuid()), Perm: st.Mode & 0o7777}
	if e.Foreign() || e.Perm&0o022 != 0 {
		return e
	}
	return nil
}
