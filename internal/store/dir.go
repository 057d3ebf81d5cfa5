package store

// A store directory says who talked to whom, and the agent writing it
// usually runs as root. So the writer only adopts a directory that nobody
// else can write into, and every file operation goes through one open
// descriptor of that directory (openat, renameat, unlinkat) rather than
// through a path: once the directory is checked, renaming or replacing a
// component of its path cannot redirect a write. Every open refuses a
// symbolic link in the last component (O_NOFOLLOW), files are created with
// O_EXCL under unpredictable temporary names, and the lock file, the one
// file opened for writing without O_EXCL, must be a regular file with a
// single link. A planted symlink or hard link therefore never turns a write
// of the agent into a write somewhere else. The descriptor mechanics live in
// internal/safedir; what a store may hold and delete is decided here.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"loupe/internal/safedir"
)

// Modes of what the store creates: flow records are private to the agent's
// user (and root).
const (
	dirMode  = 0o700
	fileMode = 0o600
)

// storeDir is an open store directory.
type storeDir struct {
	path string
	d    *safedir.Dir
}

// openDir opens path, which must be a directory. The last component may be
// a symbolic link (store.path pointing at another disk is ordinary); the
// kernel's protected_symlinks guards the sticky /tmp case, and the checks
// that follow are made on the directory actually opened.
func openDir(path string) (*storeDir, error) {
	d, err := safedir.Open(path)
	if err != nil {
		return nil, err
	}
	return &storeDir{path: path, d: d}, nil
}

func (d *storeDir) close() { d.d.Close() }

func (d *storeDir) join(name string) string { return d.d.Join(name) }

func (d *storeDir) stat() (unix.Stat_t, error) { return d.d.Stat() }

// openFile opens name in the directory without following a symlink.
// O_NONBLOCK keeps a FIFO planted under a store name from blocking the
// open; the caller checks that it got a regular file.
func (d *storeDir) openFile(name string, flag int, perm uint32) (*os.File, error) {
	f, err := d.d.OpenFile(name, flag, perm)
	var pe *fs.PathError
	if errors.As(err, &pe) && errors.Is(pe.Err, safedir.ErrSymlink) {
		pe.Err = errSymlink // the store's own wording
	}
	return f, err
}

// errSymlink replaces ELOOP, whose text ("too many levels of symbolic
// links") misleads for an O_NOFOLLOW open.
var errSymlink = errors.New("is a symbolic link, which the store never follows")

// open opens name for reading.
func (d *storeDir) open(name string) (*os.File, error) {
	return d.openFile(name, unix.O_RDONLY, 0)
}

// openRegular opens name for reading and checks that it is a regular file.
func (d *storeDir) openRegular(name string) (*os.File, error) {
	f, err := d.open(name)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file (%s)", d.join(name), fi.Mode().Type())
		}
		return nil, err
	}
	return f, nil
}

// createTemp creates a new file for writing under a temporary name that
// nobody can predict: .tmp-<random>-<suffix>. O_EXCL fails on any existing
// name, a symlink included.
func (d *storeDir) createTemp(suffix string) (*os.File, string, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, "", fmt.Errorf("temporary name: %w", err)
	}
	name := tmpPrefix + hex.EncodeToString(rnd[:]) + "-" + suffix
	f, err := d.create(name)
	return f, name, err
}

// create creates name, which must not exist, for writing.
func (d *storeDir) create(name string) (*os.File, error) {
	return d.openFile(name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, fileMode)
}

func (d *storeDir) rename(from, to string) error { return d.d.Rename(from, to) }

// remove unlinks name (a symlink itself, never its target).
func (d *storeDir) remove(name string) error { return d.d.Remove(name) }

func (d *storeDir) sync() error {
	if err := unix.Fsync(d.d.Fd()); err != nil {
		return fmt.Errorf("fsync store directory: %w", err)
	}
	return nil
}

// lstat describes name without following a symlink.
func (d *storeDir) lstat(name string) (unix.Stat_t, error) { return d.d.Lstat(name) }

// names lists the directory, sorted.
func (d *storeDir) names() ([]string, error) {
	names, err := d.d.Names()
	if err != nil {
		return nil, fmt.Errorf("list store directory: %w", err)
	}
	return names, nil
}

// readSmall reads a whole regular file of at most limit bytes.
func (d *storeDir) readSmall(name string, limit int64) ([]byte, error) {
	f, err := d.openRegular(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.join(name), err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", d.join(name), limit)
	}
	return b, nil
}

// isTempName reports whether name is one of the store's temporary files,
// this version's (.tmp-<random>-seg-*.lseg, .tmp-<random>-MANIFEST) or an
// older one's (.tmp-seg-*.lseg, .tmp-MANIFEST).
func isTempName(name string) bool {
	return strings.HasPrefix(name, tmpPrefix) && (strings.HasSuffix(name, segSuffix) || strings.HasSuffix(name, manifestName))
}

// isStoreName reports whether name is a file a store directory may hold.
func isStoreName(name string) bool {
	if name == lockName || name == manifestName || isTempName(name) || isHopName(name) {
		return true
	}
	if _, ok := parseSegName(name); ok {
		return true
	}
	_, ok := parseSegName(strings.TrimSuffix(name, quarantineSuffix))
	return ok && strings.HasSuffix(name, quarantineSuffix)
}

// lostFound is what mkfs leaves in a fresh file system's root; a directory
// holding only it is as good as empty.
const lostFound = "lost+found"

// dirKind is what a directory holds, as far as the store is concerned.
type dirKind int

const (
	kindEmpty dirKind = iota // nothing (a new store)
	kindStore                // a Loupe store
	kindOther                // anything else: never written, never cleaned
)

// classify tells a store from an empty directory and from anything else.
// A store has a MANIFEST that starts with the manifest magic. Without one
// (lost, or damaged), a directory still counts as a store if it holds only
// store file names and at least one of them is a segment that starts with
// the segment magic, so that a lost manifest can be rebuilt. Anything else
// is refused: the writer deletes temp files and unlisted segments, and must
// never do that in a directory that merely happens to hold such names.
func (d *storeDir) classify() (dirKind, string, error) {
	names, err := d.names()
	if err != nil {
		return kindOther, "", err
	}
	names = slices.DeleteFunc(names, func(n string) bool {
		if n != lostFound {
			return false
		}
		st, err := d.lstat(n)
		return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
	})
	if len(names) == 0 {
		return kindEmpty, "", nil
	}
	if slices.Contains(names, manifestName) {
		st, err := d.lstat(manifestName)
		if err != nil {
			return kindOther, "", err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return kindOther, "its MANIFEST is not a regular file (a symbolic link?)", nil
		}
		if magicIs(d, manifestName, manifestMagic) {
			return kindStore, "", nil
		}
	}
	var foreign []string
	segment := false
	for _, n := range names {
		if !isStoreName(n) {
			foreign = append(foreign, n)
			continue
		}
		if _, ok := parseSegName(n); ok && !segment {
			segment = magicIs(d, n, segMagic)
		}
		// A latency log written before any flow counts as much.
		if _, ok := parseHopName(n); ok && !segment {
			segment = magicIs(d, n, hopMagic)
		}
	}
	switch {
	case len(foreign) > 0:
		shown := foreign[:min(len(foreign), 3)]
		more := ""
		if len(foreign) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(foreign)-len(shown))
		}
		return kindOther, fmt.Sprintf("it holds files a store never has (%s%s) and no Loupe MANIFEST", strings.Join(shown, ", "), more), nil
	case !segment && slices.Contains(names, manifestName):
		return kindOther, "its MANIFEST is not a Loupe manifest, and it has no readable segment", nil
	case !segment && !slices.Contains(names, lockName) && !slices.Contains(names, hopLockName):
		// (A LOCK alone is a store whose writer has not yet published
		// its first manifest; a HOPLOCK alone, one whose latency log has
		// no record yet.)
		return kindOther, "it has no Loupe MANIFEST and no readable segment", nil
	}
	return kindStore, "", nil
}

// magicIs reports whether the regular file name starts with magic.
func magicIs(d *storeDir, name, magic string) bool {
	f, err := d.openRegular(name)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, len(magic))
	_, err = io.ReadFull(f, b)
	return err == nil && string(b) == magic
}

// ErrNotStore is returned for a directory that is not a Loupe store.
var ErrNotStore = errors.New("not a Loupe flow store")

// checkWritable refuses a directory that another user could write into
// (and so plant links or files the writer would then follow, delete or
// publish).
func (d *storeDir) checkWritable() error {
	err := d.d.CheckPrivate()
	var np *safedir.NotPrivateError
	switch {
	case !errors.As(err, &np):
		return err
	case np.Foreign():
		return fmt.Errorf("%s is owned by uid %d, not by the agent's uid %d: its owner could replace the agent's files; "+
			"use a directory the agent's user owns (chown it, or choose another store.path)", d.path, np.Owner, np.Euid)
	default:
		return fmt.Errorf("%s is writable by group or others (mode %04o): another user could replace the agent's files; "+
			"chmod 0700 it, or choose another store.path", d.path, np.Perm)
	}
}

// tightenDir takes away the group and world access an older version
// granted (0755), saying so.
func (d *storeDir) tightenDir(logf func(msg string, args ...any)) error {
	st, err := d.stat()
	if err != nil {
		return err
	}
	if perm := st.Mode & 0o7777; perm&0o077 != 0 {
		if err := unix.Fchmod(d.d.Fd(), uint32(perm&^0o077)); err != nil {
			return &fs.PathError{Op: "chmod", Path: d.path, Err: err}
		}
		logf("store directory was readable by other users; made it private to the agent's user",
			"old_mode", fmt.Sprintf("%04o", perm), "new_mode", fmt.Sprintf("%04o", perm&^0o077))
	}
	return nil
}

// tightenFiles makes the store's files private (0600), as an older version
// created them 0644. It opens each without following links and changes the
// open file, never a path.
func (d *storeDir) tightenFiles(names []string, logf func(msg string, args ...any)) error {
	n := 0
	for _, name := range names {
		if !isStoreName(name) || isTempName(name) {
			continue
		}
		f, err := d.open(name)
		if err != nil {
			continue // a damaged entry: recovery deals with it
		}
		fi, err := f.Stat()
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
			err = f.Chmod(fi.Mode().Perm() &^ 0o077)
			n++
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("make %s private: %w", d.join(name), err)
		}
	}
	if n > 0 {
		logf("store files were readable by other users; made them private to the agent's user", "files", n)
	}
	return nil
}
