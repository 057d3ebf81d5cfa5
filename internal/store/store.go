package store

import (
	"cmp"
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
	// MaxSize bounds the bytes of the live segments: past it the oldest
	// segments (by newest record) are deleted until the rest fit, except
	// the newest segment, which is always kept. Zero is no limit. It also
	// caps merged segments at MaxSize/8, so that deleting one frees a
	// small part of the store rather than most of it.
	MaxSize int64
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
	dir  *storeDir
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
	bad    map[uint64]bool // damaged segments a failed publish kept listed: never merged
	count  Stats           // writer counters

	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{}
	done   chan struct{}
}

// Open opens dir for writing, creating it (mode 0700) if needed. It refuses
// a directory that is not a store (an empty one becomes a store at once),
// and one that another user owns or can write into (see dir.go); it makes
// an older version's world-readable store private. Only one writer may
// hold a directory (an flock on its LOCK file); a second gets ErrLocked.
// Open recovers from a crash: it removes temp files, deletes segments the
// manifest does not list (an unpublished write or merge, or the inputs of a
// published merge), rebuilds a missing or corrupt manifest from the
// segment headers, and quarantines listed segments that are damaged.
func Open(dir string, opts Options) (*Store, error) {
	opts.setDefaults()
	log := opts.Logger.With("component", "store", "dir", dir)
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("store: create directory: %w", err)
	}
	d, err := openDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s, err := open(d, opts, log)
	if err != nil {
		d.close()
		return nil, err
	}
	return s, nil
}

func open(d *storeDir, opts Options, log *slog.Logger) (*Store, error) {
	if err := d.checkWritable(); err != nil {
		return nil, fmt.Errorf("store: refusing %w", err)
	}
	kind, why, err := d.classify()
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if kind == kindOther {
		return nil, fmt.Errorf("store: %s is %w: %s; refusing to write or delete anything there "+
			"(store.path must be a Loupe store, or an empty or new directory)", d.path, ErrNotStore, why)
	}
	if err := d.tightenDir(log.Warn); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	lock, err := acquireLock(d)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: d, opts: opts, log: log, lock: lock, bad: make(map[uint64]bool)}
	s.count.Retention = make(map[string]Deleted)
	if err := s.recover(); err != nil {
		releaseLock(lock)
		return nil, fmt.Errorf("store: open %s: %w", d.path, err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.kick = make(chan struct{}, 1)
	s.done = make(chan struct{})
	if opts.NoBackground {
		close(s.done)
	} else {
		go s.loop()
	}
	if kind == kindEmpty {
		log.Info("new store created")
	}
	log.Info("store opened", "segments", len(s.m.entries), "retention", opts.Retention, "max_size", opts.MaxSize)
	return s, nil
}

// acquireLock opens (creating) and flocks LOCK. It is the one file opened
// for writing that may already exist, so it must be a regular file of
// ours with no other link: a hard link planted there would otherwise have
// the agent truncate its target.
func acquireLock(d *storeDir) (*os.File, error) {
	path := d.join(lockName)
	f, err := d.openFile(lockName, syscall.O_RDWR|syscall.O_CREAT, fileMode)
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
		s.countExpired(expired)
	}
	s.mu.Unlock()
	if !published {
		s.dir.remove(segName(id))
		return fmt.Errorf("store: write batch of %d records: %w", b.n, err)
	}
	s.removeExpired(expired)
	select {
	case s.kick <- struct{}{}:
	default:
	}
	if err != nil {
		return fmt.Errorf("store: batch of %d records written but %w: %w", b.n, ErrNotDurable, err)
	}
	return nil
}

// ErrNotDurable is wrapped by the error of a Write whose records were
// stored (readers see them) but whose final directory fsync failed, so
// that a crash might still lose them.
var ErrNotDurable = errors.New("not confirmed durable")

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

// Retention reasons, the values of Stats.Retention's keys.
const (
	RetentionAge  = "age"
	RetentionSize = "size"
)

// expiredEntry is a segment retention deleted, and why.
type expiredEntry struct {
	entry
	reason string
}

// expire removes from m the segments retention no longer keeps, by age and
// then by size, and returns them; s.mu must be held.
func (s *Store) expire(m *manifest) []expiredEntry {
	var gone []expiredEntry
	if s.opts.Retention > 0 {
		cutoff := timeNS(s.opts.Now().Add(-s.opts.Retention))
		m.entries = slices.DeleteFunc(m.entries, func(e entry) bool {
			if e.maxLast < cutoff {
				gone = append(gone, expiredEntry{e, RetentionAge})
				return true
			}
			return false
		})
	}
	if s.opts.MaxSize <= 0 {
		return gone
	}
	var total int64
	for _, e := range m.entries {
		total += e.size
	}
	if total <= s.opts.MaxSize {
		return gone
	}
	// Oldest first: by newest record, the order age retention follows.
	byAge := slices.Clone(m.entries)
	slices.SortFunc(byAge, func(a, b entry) int { return cmp.Or(cmp.Compare(a.maxLast, b.maxLast), cmp.Compare(a.id, b.id)) })
	drop := make(map[uint64]bool)
	for _, e := range byAge[:len(byAge)-1] {
		if total <= s.opts.MaxSize {
			break
		}
		drop[e.id] = true
		total -= e.size
		gone = append(gone, expiredEntry{e, RetentionSize})
	}
	m.entries = slices.DeleteFunc(m.entries, func(e entry) bool { return drop[e.id] })
	return gone
}

// countExpired adds what retention deleted to the counters; s.mu must be
// held.
func (s *Store) countExpired(gone []expiredEntry) {
	for _, e := range gone {
		d := s.count.Retention[e.reason]
		d.Segments++
		d.Records += e.records
		d.Bytes += uint64(e.size)
		s.count.Retention[e.reason] = d
	}
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
		s.countExpired(expired)
	}
	s.mu.Unlock()
	if published {
		s.removeExpired(expired)
	}
	if err != nil {
		return fmt.Errorf("store: apply retention: %w", err)
	}
	return nil
}

func (s *Store) removeExpired(gone []expiredEntry) {
	if len(gone) == 0 {
		return
	}
	es := make([]entry, len(gone))
	var recs uint64
	var bytes int64
	for i, e := range gone {
		es[i] = e.entry
		recs += e.records
		bytes += e.size
	}
	s.removeSegments(es, "retention")
	s.log.Info("retention deleted segments", "segments", len(gone), "records", recs, "bytes", bytes,
		"reason", gone[0].reason, "retention", s.opts.Retention, "max_size", s.opts.MaxSize)
}

// removeSegments unlinks segments already dropped from the manifest. A
// failure only leaves an orphan that the next Open removes.
func (s *Store) removeSegments(es []entry, why string) {
	for _, e := range es {
		err := s.dir.remove(segName(e.id))
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
	if err := s.checkSegments(); err != nil {
		return err
	}
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
	s.dir.close()
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
	ExpiredSegments uint64 // deleted by retention, for any reason
	// Retention is what retention deleted, by reason (RetentionAge,
	// RetentionSize); both keys are always present in a writer's Stats.
	Retention map[string]Deleted
	// QuarantinedSegments are damaged segments set aside (renamed to
	// *.corrupt) at Open or by compaction; QuarantinedRecords the records
	// their manifest entries listed (unknown, so not counted, for segments
	// found damaged while rebuilding a lost manifest).
	QuarantinedSegments uint64
	QuarantinedRecords  uint64
}

// Deleted counts segments deleted, with their records and file bytes.
type Deleted struct {
	Segments, Records, Bytes uint64
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
	st.MergedSegments = c.MergedSegments
	st.QuarantinedSegments, st.QuarantinedRecords = c.QuarantinedSegments, c.QuarantinedRecords
	st.Retention = map[string]Deleted{RetentionAge: {}, RetentionSize: {}}
	for reason, d := range c.Retention {
		st.Retention[reason] = d
		st.ExpiredSegments += d.Segments
	}
	return st
}

// Dir returns the store directory.
func (s *Store) Dir() string { return s.dir.path }
