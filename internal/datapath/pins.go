package datapath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The pin directory (--pin-dir, on a bpf file system) holds what outlives
// the agent:
//
//	links/<ifindex>-<ingress|egress>  TCX links (internal/attach)
//	maps-<layout>-<set id>/           a pin set: flows_a, flows_b, flow_state,
//	                                  counters, flow_events, event_layout,
//	                                  the sketches: sketch_cells, sketch_filter,
//	                                  sketch_cm, sketch_spill, sketch_conf,
//	                                  and tunnels_a, tunnels_b
//	tmp-maps-*                        a pin set being created (removed if left)
//
// (bpffs refuses names with a dot in them.)
// A pin set appears whole: its maps are pinned under a temporary name, then
// the directory is renamed. One agent holds a pin directory at a time (an
// flock on it); the directory must be the agent's user's own and writable
// by no one else, as the store's is, since whoever can write there could
// plant maps for the agent to adopt.

const (
	setPrefix = "maps-"
	tmpPrefix = "tmp-"
	// LinksDir is the subdirectory internal/attach pins TCX links in.
	LinksDir = "links"
)

// ErrPinDirLocked is returned when another agent holds the pin directory.
var ErrPinDirLocked = errors.New("pin directory is held by another agent")

// errUnpinnable wraps the reasons to run without pins (no bpf file
// system, no write access): the agent warns and runs as before pinning
// existed.
var errUnpinnable = errors.New("cannot pin")

type pinDir struct {
	path string
	f    *os.File // the directory itself, flocked
}

// openPinDir creates (0700) and locks the pin directory.
func openPinDir(path string) (*pinDir, error) {
	probe := path
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		probe = filepath.Dir(path)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(probe, &sfs); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errUnpinnable, probe, err)
	}
	if uint32(sfs.Type) != unix.BPF_FS_MAGIC {
		return nil, fmt.Errorf("%w: %s is not on a bpf file system (mount it with: mount -t bpf bpf %s)",
			errUnpinnable, probe, probe)
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%w: create %s: %w", errUnpinnable, path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", errUnpinnable, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: %w", errUnpinnable, path, err)
	}
	if err := checkOwn(path, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", errUnpinnable, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrPinDirLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// An agent that stopped cleanly removes the directory: make sure the
	// one locked is still the one at path.
	var now unix.Stat_t
	if err := unix.Lstat(path, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev {
		f.Close()
		return nil, fmt.Errorf("%s was removed or replaced while it was being locked: %w", path, ErrPinDirLocked)
	}
	return &pinDir{path: path, f: f}, nil
}

// checkOwn refuses what another user owns or others can write.
func checkOwn(path string, st *unix.Stat_t) error {
	switch {
	case st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("%s is owned by uid %d, not by the agent's uid %d", path, st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %04o)", path, st.Mode&0o7777)
	}
	return nil
}

func (p *pinDir) join(name string) string { return filepath.Join(p.path, name) }

// sets lists the pin sets, removing sets left half-created.
func (p *pinDir) sets() ([]string, error) {
	entries, err := os.ReadDir(p.path)
	if err != nil {
		return nil, fmt.Errorf("list pin directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		switch {
		case strings.HasPrefix(e.Name(), tmpPrefix):
			// Never renamed into place, so never attached to: its
			// maps counted nothing.
			os.RemoveAll(p.join(e.Name()))
		case strings.HasPrefix(e.Name(), setPrefix) && e.IsDir():
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// setLayout returns the layout part of a set's directory name.
func setLayout(name string) string {
	s := strings.TrimPrefix(name, setPrefix)
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		return s[:i]
	}
	return s
}

// loadSet opens every pinned map of a set that is present and the
// agent's own; missing ones are absent from the result.
func (p *pinDir) loadSet(name string) (map[string]*ebpf.Map, error) {
	maps := make(map[string]*ebpf.Map)
	for _, m := range pinnedMaps {
		path := filepath.Join(p.join(name), m)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			closeMaps(maps)
			return nil, fmt.Errorf("pin %s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			closeMaps(maps)
			return nil, fmt.Errorf("pin %s is not a pinned object", path)
		}
		if err := checkOwn(path, &st); err != nil {
			closeMaps(maps)
			return nil, err
		}
		mp, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			closeMaps(maps)
			return nil, fmt.Errorf("load pinned map %s: %w", path, err)
		}
		maps[m] = mp
	}
	return maps, nil
}

// pinSet pins maps as a new set, atomically: under a temporary name first.
func (p *pinDir) pinSet(name string, maps map[string]*ebpf.Map) error {
	tmp := p.join(tmpPrefix + name)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("create pin set: %w", err)
	}
	for _, m := range pinnedMaps {
		if err := maps[m].Pin(filepath.Join(tmp, m)); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("pin %s: %w", m, err)
		}
	}
	if err := os.Rename(tmp, p.join(name)); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("publish pin set: %w", err)
	}
	return nil
}

// removeSet unpins a set: its maps live on while a program or a file
// descriptor holds them.
func (p *pinDir) removeSet(name string) error {
	if err := os.RemoveAll(p.join(name)); err != nil {
		return fmt.Errorf("remove pin set %s: %w", name, err)
	}
	return nil
}

// close releases the lock; remove also removes the directory if it is
// empty (a clean stop leaves nothing behind).
func (p *pinDir) close(remove bool) {
	if remove {
		os.Remove(p.join(LinksDir)) // attach removed its links; fails if not empty
		os.Remove(p.path)
	}
	p.f.Close()
}

func closeMaps(maps map[string]*ebpf.Map) {
	for _, m := range maps {
		m.Close()
	}
}
