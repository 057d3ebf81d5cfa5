package api

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// unixSocket is the agent's listening socket file.
type unixSocket struct {
	path string
	ln   *net.UnixListener
	// made is the file this agent created, so that closing removes the
	// socket only while it is still ours, never a newer agent's.
	made os.FileInfo
}

// errAnotherAgent reports a socket that something still answers on.
var errAnotherAgent = errors.New("another agent is serving on it")

// listenUnix creates the socket at path: mode 0600, owned by the agent's
// user, in a directory that is not a symbolic link (created 0755 if
// missing). A socket file left by a dead agent is replaced; one a live
// agent answers on is an error, as is any other kind of file.
//
// The socket is bound in a private directory first, given its mode there,
// then linked into place: bound in place, it would be open to whatever the
// umask allows until chmod, and the link, unlike a rename, fails if
// another agent took the path meanwhile.
func listenUnix(path string, log *slog.Logger) (_ *unixSocket, err error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("control socket %s: %d bytes long: a unix socket path holds at most %d; choose a shorter one with --control PATH", path, len(path), maxSocketPath)
	}
	dir := filepath.Dir(path)
	if err := socketDir(dir, log); err != nil {
		return nil, socketError(path, err)
	}
	if err := clearStale(path, log); err != nil {
		return nil, socketError(path, err)
	}
	priv, err := os.MkdirTemp(dir, ".loupe-")
	if err != nil {
		return nil, socketError(path, err)
	}
	defer os.RemoveAll(priv)
	tmp := filepath.Join(priv, "s")
	if len(tmp) > maxSocketPath {
		return nil, fmt.Errorf("control socket %s: the directory's name is too long for a unix socket (%d bytes at most); choose a shorter path with --control PATH", path, maxSocketPath-len("/.loupe-1234567890/s"))
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, socketError(path, err)
	}
	// The file is removed by Close, under its final name.
	ln.SetUnlinkOnClose(false)
	defer func() {
		if err != nil {
			ln.Close()
		}
	}()
	if err := os.Chmod(tmp, 0o600); err != nil {
		return nil, socketError(path, err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, socketError(path, errAnotherAgent)
		}
		return nil, socketError(path, err)
	}
	made, err := os.Lstat(path)
	if err != nil {
		return nil, socketError(path, err)
	}
	return &unixSocket{path: path, ln: ln, made: made}, nil
}

// socketDir checks, or creates, the directory of the socket. A symbolic
// link is refused: whoever controls where it points decides where the
// socket, and so the API, ends up.
func socketDir(dir string, log *slog.Logger) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// MkdirAll's mode passes through the umask; 0755 is meant.
		return os.Chmod(dir, 0o755)
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("its directory %s is a symbolic link; refusing it", dir)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		// Not refused: a test or a deliberate setup may want it. But
		// anyone who can write there can replace the socket with theirs.
		log.Warn("the control socket's directory is writable by others without the sticky bit: they could replace the socket",
			"dir", dir, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	return nil
}

// clearStale removes a socket file left by an agent that died without
// removing it: only a socket, and only if nothing answers on it.
func clearStale(path string, log *slog.Logger) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("exists and is not a socket (%s); remove it or choose another path", fileKind(fi.Mode()))
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return errAnotherAgent
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		// EAGAIN is a live agent whose backlog is full; EACCES a
		// socket of another user. Neither is ours to remove.
		if errors.Is(err, syscall.EAGAIN) {
			return errAnotherAgent
		}
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	log.Info("removed a stale control socket left by an agent that is gone", "path", path)
	return nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsRegular():
		return "a regular file"
	}
	return "mode " + m.String()
}

// close stops listening and removes the socket file if it is still the
// one this agent made.
func (s *unixSocket) close() error {
	err := s.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil // closed by the HTTP server already
	}
	if fi, lerr := os.Lstat(s.path); lerr == nil && os.SameFile(fi, s.made) {
		if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// socketError says what went wrong with the socket at path, and for what
// a user can fix by choosing another path (no permission, a read-only
// file system, a live agent), how.
func socketError(path string, err error) error {
	var errno syscall.Errno
	switch {
	case errors.Is(err, errAnotherAgent):
		return fmt.Errorf("control socket %s: %w; stop it, or choose another path with --control PATH (or control.socket)", path, err)
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS):
		if errors.As(err, &errno) {
			err = errno // the path is said once, first
		}
		return fmt.Errorf("control socket %s: %w; choose another path with --control PATH (or control.socket), or %s to disable", path, err, None)
	}
	return fmt.Errorf("control socket %s: %w", path, err)
}
