package store

// Opening a store: the lock, crash recovery, and the quarantine of damaged
// segments (also run by the periodic maintenance).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// acquireLock opens (creating) and flocks LOCK. It is the one file opened
// for writing that may already exist, so it must be a regular file of
// ours with no other link: a hard link planted there would otherwise have
// the agent truncate its target.
func acquireLock(d *storeDir) (*os.File, error) { return lockFile(d, lockName) }

// lockFile is acquireLock of the lock file name: the latency log has one
// of its own (hopLockName), since it is written beside the flow store by
// another part of the agent.
func lockFile(d *storeDir, name string) (*os.File, error) {
	path := d.join(name)
	f, err := d.openFile(name, syscall.O_RDWR|syscall.O_CREAT, fileMode)
	if err != nil {
		return nil, fmt.Errorf("store: open lock file: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		err = fmt.Errorf("not a regular file")
	case st.Nlink != 1:
		err = fmt.Errorf("it has %d links: another name points at the same file", st.Nlink)
	case st.Uid != uint32(os.Geteuid()):
		err = fmt.Errorf("it is owned by uid %d, not by the agent's uid %d", st.Uid, os.Geteuid())
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("store: refusing lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := make([]byte, 32)
		n, _ := f.ReadAt(holder, 0)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("store: %s is already open for writing (lock %s held by pid %s): %w",
				d.path, path, strings.TrimSpace(string(holder[:n])), ErrLocked)
		}
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	// The pid is only for the error message above; the flock is the lock.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

func releaseLock(f *os.File) {
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}

func (s *Store) recover() error {
	names, err := s.dir.names()
	if err != nil {
		return err
	}
	if err := s.dir.tightenFiles(names, s.log.Warn); err != nil {
		return err
	}
	for _, n := range names {
		if !isTempName(n) {
			continue
		}
		s.log.Info("removing temp file left by an interrupted write", "file", n)
		if err := s.dir.remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// Harmless: readers ignore temp names and new ones are random.
			s.log.Warn("could not remove temp file", "file", n, "err", err)
		}
	}
	ids, err := listSegments(s.dir)
	if err != nil {
		return err
	}
	quarantined := make(map[uint64]bool)
	m, err := readManifest(s.dir)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist) && len(ids) == 0:
		m = &manifest{nextID: 1}
	default:
		s.log.Warn("manifest unusable, rebuilding it from segment headers", "err", err)
		st, err := scanDir(s.dir, s.log)
		if err != nil {
			return err
		}
		for _, c := range st.corrupt {
			id, _ := parseSegName(filepath.Base(c.Path))
			s.setAside(id, 0, c.Err)
			quarantined[id] = true
		}
		m = &manifest{nextID: st.maxID + 1, entries: st.live}
		// The marks were in the lost manifest only: an agent that
		// restarts after a crash may store once more a table it had
		// stored and not yet cleared.
		s.log.Warn("the rebuilt manifest lists no stored kernel tables (marks)")
	}
	present := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		present[id] = true
		m.nextID = max(m.nextID, id+1)
	}
	var keep []entry
	for _, e := range m.entries {
		if !present[e.id] {
			s.log.Error("segment listed in the manifest is missing; dropping it", "segment", segName(e.id), "records", e.records)
			continue
		}
		if err := s.checkListed(e); err != nil {
			if !damaged(err) {
				return err
			}
			s.setAside(e.id, e.records, err)
			quarantined[e.id] = true
			continue
		}
		keep = append(keep, e)
	}
	m.entries = keep
	for _, id := range ids {
		if !m.has(id) && !quarantined[id] {
			// Written or merged but never published, or replaced by a
			// published merge: either way its records are counted
			// elsewhere or were the write in flight.
			s.log.Info("removing unpublished or replaced segment", "segment", segName(id))
			if err := s.dir.remove(segName(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove orphan segment: %w", err)
			}
		}
	}
	m.gen++
	if _, err := writeManifest(s.dir, m); err != nil {
		return err
	}
	s.m = m
	return nil
}

// checkListed checks that a listed segment's file is a segment whose header
// agrees with its manifest entry: a few pages per segment, so that a file
// emptied or replaced behind the writer's back is found when it opens
// rather than reported by every query for ever.
func (s *Store) checkListed(e entry) error {
	f, err := openSegment(s.dir, e.id)
	if err != nil {
		return err
	}
	defer f.Close()
	path := s.dir.join(segName(e.id))
	sg, err := mapSegment(f, path, false)
	if err != nil {
		return err
	}
	defer sg.release()
	if sg.id != e.id || uint64(sg.n) != e.records || int64(len(sg.data)) != e.size {
		return corruptf(path, "header (id %d, %d records, %d bytes) does not match the manifest (id %d, %d records, %d bytes)",
			sg.id, sg.n, len(sg.data), e.id, e.records, e.size)
	}
	return nil
}

// setAside renames a damaged segment's file out of the readers' way
// (seg-<id>.lseg.corrupt), keeping it as evidence, and counts it. The
// caller drops it from the manifest.
func (s *Store) setAside(id, records uint64, cause error) {
	name := segName(id)
	err := s.dir.rename(name, name+quarantineSuffix)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Error("could not set damaged segment aside", "segment", name, "err", err)
	}
	s.count.QuarantinedSegments++
	s.count.QuarantinedRecords += records
	s.log.Error("segment is damaged: set aside, its records are no longer counted",
		"segment", name, "moved_to", name+quarantineSuffix, "records", records, "err", cause)
}

// checkSegments checks every listed segment's header against the manifest,
// as Open does, and quarantines the damaged ones: a file emptied or
// replaced while the agent runs is not reported by every query until the
// next start.
func (s *Store) checkSegments() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	entries := slices.Clone(s.m.entries)
	s.mu.Unlock()
	for _, e := range entries {
		err := s.checkListed(e)
		switch {
		case err == nil:
		case damaged(err), errors.Is(err, fs.ErrNotExist):
			s.quarantine(e, err) // does nothing if retention removed it meanwhile
		default:
			return fmt.Errorf("store: check segment: %w", err)
		}
	}
	return nil
}
