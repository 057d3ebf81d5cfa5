package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"loupe/internal/flow"
)

// Options configure a writer. The zero value is usable: no retention, the
// wall clock, no logging and the default compaction thresholds.
type Options struct {
	// Retention deletes segments whose newest record (max last_seen) is
	// older than now-Retention. Zero keeps everything. Deletion is per
	// segment, so data can outlive Retention by up to CompactMaxSpan.
	Retention time.Duration
	// Now is the clock retention is measured against (tests inject one).
	Now func() time.Time
	// Logger receives the store's logs, tagged component=store.
	Logger *slog.Logger

	// CompactFanIn is how many segments of one size tier are merged at a
	// time (default 8). Size tiers grow by the same factor, so a record is
	// rewritten about log_FanIn(CompactMaxRecords/batch) times.
	CompactFanIn int
	// CompactMaxRecords caps the size of a merged segment; bigger segments
	// are never merged (default 1<<20, about 75 MB on disk). It bounds the
	// memory a merge takes.
	CompactMaxRecords int
	// CompactMaxSpan caps the time span (min first_seen to max last_seen)
	// of a merged segment, so that retention and time-range queries keep a
	// useful granularity (default the larger of 1h and Retention/24, which
	// keeps a week of data in some tens of files).
	CompactMaxSpan time.Duration
	// MaintenanceInterval is how often the background goroutine applies
	// retention and compacts even without writes (default 1m).
	MaintenanceInterval time.Duration
	// NoBackground disables the background goroutine: retention still runs
	// on Write, and compaction only when Maintain is called.
	NoBackground bool
}

func (o *Options) setDefaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CompactFanIn < 2 {
		o.CompactFanIn = 8
	}
	if o.CompactMaxRecords <= 0 {
		o.CompactMaxRecords = 1 << 20
	}
	if o.CompactMaxSpan <= 0 {
		o.CompactMaxSpan = max(time.Hour, o.Retention/24)
	}
	if o.MaintenanceInterval <= 0 {
		o.MaintenanceInterval = time.Minute
	}
}

// ErrLocked is returned by Open when another writer holds the directory.
var ErrLocked = errors.New("store is locked by another writer")

// ErrClosed is returned by methods of a closed Store.
var ErrClosed = errors.New("store is closed")

// Store is the single writer of a store directory. Its methods are safe for
// concurrent use.
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger
	lock *os.File

	// writeMu serialises Write and lets Close wait for one in flight.
	writeMu sync.Mutex
	// maintMu makes retention+compaction runs exclusive.
	maintMu sync.Mutex

	// mu guards everything below. It is held while a manifest is
	// published, so publishes are serialised and s.m is always the
	// manifest on disk.
	mu     sync.Mutex
	m      *manifest
	closed bool
	bad    map[uint64]bool // segments compaction found corrupt: never merged
	count  Stats           // writer counters

	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{}
	done   chan struct{}
}

// Open opens dir for writing, creating it if needed. Only one writer may
// hold a directory (an flock on its LOCK file); a second gets ErrLocked.
// Open recovers from a crash: it removes temp files, deletes segments the
// manifest does not list (an unpublished write or merge, or the inputs of a
// published merge), and rebuilds a missing or corrupt manifest from the
// segment headers.
func Open(dir string, opts Options) (*Store, error) {
	opts.setDefaults()
	log := opts.Logger.With("component", "store", "dir", dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: create directory: %w", err)
	}
	lock, err := acquireLock(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, opts: opts, log: log, lock: lock, bad: make(map[uint64]bool)}
	if err := s.recover(); err != nil {
		releaseLock(lock)
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.kick = make(chan struct{}, 1)
	s.done = make(chan struct{})
	if opts.NoBackground {
		close(s.done)
	} else {
		go s.loop()
	}
	log.Info("store opened", "segments", len(s.m.entries), "retention", opts.Retention)
	return s, nil
}

func acquireLock(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("store: %s is already open for writing (lock %s held by pid %s): %w",
				dir, path, strings.TrimSpace(string(holder)), ErrLocked)
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
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("list directory: %w", err)
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tmpPrefix) {
			s.log.Info("removing temp file left by an interrupted write", "file", de.Name())
			if err := os.Remove(filepath.Join(s.dir, de.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove temp file: %w", err)
			}
		}
	}
	ids, err := listSegments(s.dir)
	if err != nil {
		return err
	}
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
			// Keep the evidence, out of the way of readers and of ids.
			if err := os.Rename(c.Path, c.Path+".corrupt"); err != nil {
				return fmt.Errorf("set aside corrupt segment: %w", err)
			}
		}
		m = &manifest{nextID: st.maxID + 1, entries: st.live}
	}
	present := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		present[id] = true
		m.nextID = max(m.nextID, id+1)
	}
	m.entries = slices.DeleteFunc(m.entries, func(e entry) bool {
		if !present[e.id] {
			s.log.Error("segment listed in the manifest is missing; dropping it", "segment", segName(e.id))
			return true
		}
		return false
	})
	for _, id := range ids {
		if !m.has(id) {
			// Written or merged but never published, or replaced by a
			// published merge: either way its records are counted
			// elsewhere or were the write in flight.
			s.log.Info("removing unpublished or replaced segment", "segment", segName(id))
			if err := os.Remove(filepath.Join(s.dir, segName(id))); err != nil && !errors.Is(err, fs.ErrNotExist) {
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

// Batch gathers the records of one segment in their columnar form (about
// 70 bytes a record plus dictionaries), so that a sink can hand records over
// as they come instead of keeping flow.Record copies until it writes.
type Batch struct{ b *batch }

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{b: newBatch(0)} }

// Add appends a copy of r.
func (b *Batch) Add(r *flow.Record) { b.b.add(r) }

// Len is the number of records in the batch.
func (b *Batch) Len() int { return b.b.n }

// Write stores batch as one new segment. When Write returns nil the records
// are durable; after a crash during Write either all of them or none are
// present. Write also applies retention. A batch is not retried internally:
// on error the records were not stored, except for the error that says the
// final directory fsync failed, when they are visible but maybe not durable.
func (s *Store) Write(ctx context.Context, batch []flow.Record) error {
	b := newBatch(len(batch))
	for i := range batch {
		b.add(&batch[i])
	}
	return s.write(ctx, b)
}

// WriteBatch is Write for a Batch. The batch must not be reused.
func (s *Store) WriteBatch(ctx context.Context, b *Batch) error { return s.write(ctx, b.b) }

func (s *Store) write(ctx context.Context, b *batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.n == 0 {
		return s.applyRetention()
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	id, err := s.allocID()
	if err != nil {
		return err
	}
	e, err := writeSegment(s.dir, id, nil, b)
	if err != nil {
		return fmt.Errorf("store: write batch of %d records: %w", b.n, err)
	}
	s.mu.Lock()
	next := s.m.clone()
	next.entries = append(next.entries, e)
	expired := s.expire(next)
	err = s.publish(next)
	published := s.m == next
	if published {
		s.count.Writes++
		s.count.WrittenRecords += uint64(b.n)
		s.count.ExpiredSegments += uint64(len(expired))
	}
	s.mu.Unlock()
	if !published {
		os.Remove(filepath.Join(s.dir, segName(id)))
		return fmt.Errorf("store: write batch of %d records: %w", b.n, err)
	}
	s.removeSegments(expired, "expired")
	select {
	case s.kick <- struct{}{}:
	default:
	}
	if err != nil {
		return fmt.Errorf("store: batch of %d records written but not confirmed durable: %w", b.n, err)
	}
	return nil
}

func (s *Store) allocID() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	id := s.m.nextID
	s.m.nextID++
	return id, nil
}

// publish writes next as the manifest; s.mu must be held. On success, and
// also when only the final directory fsync failed (the rename is visible to
// readers then), s.m becomes next.
func (s *Store) publish(next *manifest) error {
	next.gen = s.m.gen + 1
	next.nextID = max(next.nextID, s.m.nextID)
	slices.SortFunc(next.entries, func(a, b entry) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	renamed, err := writeManifest(s.dir, next)
	if renamed {
		s.m = next
	}
	return err
}

// expire removes from m the segments retention no longer keeps and returns
// them; s.mu must be held.
func (s *Store) expire(m *manifest) []entry {
	if s.opts.Retention <= 0 {
		return nil
	}
	cutoff := timeNS(s.opts.Now().Add(-s.opts.Retention))
	var gone []entry
	m.entries = slices.DeleteFunc(m.entries, func(e entry) bool {
		if e.maxLast < cutoff {
			gone = append(gone, e)
			return true
		}
		return false
	})
	return gone
}

func (s *Store) applyRetention() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	next := s.m.clone()
	expired := s.expire(next)
	if len(expired) == 0 {
		s.mu.Unlock()
		return nil
	}
	err := s.publish(next)
	published := s.m == next
	if published {
		s.count.ExpiredSegments += uint64(len(expired))
	}
	s.mu.Unlock()
	if published {
		s.removeSegments(expired, "expired")
	}
	if err != nil {
		return fmt.Errorf("store: apply retention: %w", err)
	}
	return nil
}

// removeSegments unlinks segments already dropped from the manifest. A
// failure only leaves an orphan that the next Open removes.
func (s *Store) removeSegments(es []entry, why string) {
	for _, e := range es {
		err := os.Remove(filepath.Join(s.dir, segName(e.id)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("could not remove segment", "segment", segName(e.id), "reason", why, "err", err)
			continue
		}
		s.log.Debug("segment removed", "segment", segName(e.id), "reason", why, "records", e.records)
	}
}

// Maintain applies retention and compacts until no merge is due. The
// background goroutine calls it; with NoBackground, callers (tests) do.
func (s *Store) Maintain(ctx context.Context) error {
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	if err := s.applyRetention(); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		inputs, err := s.pickMerge()
		if err != nil || inputs == nil {
			return err
		}
		if err := s.merge(ctx, inputs); err != nil {
			return err
		}
	}
}

func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(s.opts.MaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
		}
		if err := s.Maintain(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Error("store maintenance failed", "err", err)
		}
	}
}

// Close stops background work (an unfinished merge is abandoned, which is
// safe), waits for a Write in flight and releases the lock.
func (s *Store) Close() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
	s.maintMu.Lock() // wait for a Maintain called directly
	defer s.maintMu.Unlock()
	releaseLock(s.lock)
	s.log.Info("store closed")
	return nil
}

// Stats describes a store's live data; the counters are a writer's since
// Open and are zero from a Reader.
type Stats struct {
	Segments  int
	Records   uint64
	DiskBytes int64
	// Oldest and Newest are the min first_seen and max last_seen of the
	// live data (zero if empty).
	Oldest, Newest time.Time

	Writes          uint64
	WrittenRecords  uint64
	Compactions     uint64
	MergedSegments  uint64 // inputs of compactions
	ExpiredSegments uint64
	CorruptSegments uint64 // found by compaction (readers report their own)
}

func statsOf(m *manifest) Stats {
	st := Stats{Segments: len(m.entries)}
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, e := range m.entries {
		st.Records += e.records
		st.DiskBytes += e.size
		lo, hi = min(lo, e.minFirst), max(hi, e.maxLast)
	}
	if len(m.entries) > 0 {
		st.Oldest, st.Newest = nsTime(lo), nsTime(hi)
	}
	return st
}

// Stats returns the writer's view, for metrics.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := statsOf(s.m)
	c := s.count
	st.Writes, st.WrittenRecords, st.Compactions = c.Writes, c.WrittenRecords, c.Compactions
	st.MergedSegments, st.ExpiredSegments, st.CorruptSegments = c.MergedSegments, c.ExpiredSegments, c.CorruptSegments
	return st
}

// Dir returns the store directory.
func (s *Store) Dir() string { return s.dir }
