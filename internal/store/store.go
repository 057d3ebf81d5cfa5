package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
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
	// What the directory is comes first (reading it writes nothing and
	// follows no link), so that /tmp is refused as not a store rather than
	// with advice to chmod it.
	kind, why, err := d.classify()
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if kind == kindOther {
		return nil, fmt.Errorf("store: %s is %w: %s; refusing to write or delete anything there "+
			"(store.path must be a Loupe store, or an empty or new directory)", d.path, ErrNotStore, why)
	}
	if err := d.checkWritable(); err != nil {
		return nil, fmt.Errorf("store: refusing %w", err)
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
// on error the records were not stored, except for an error that wraps
// ErrNotDurable (the final directory fsync failed): they are visible then,
// but maybe not durable.
func (s *Store) Write(ctx context.Context, batch []flow.Record) error {
	b := newBatch(len(batch))
	for i := range batch {
		b.add(&batch[i])
	}
	return s.write(ctx, b)
}

// WriteBatch is Write for a Batch. Writing leaves the batch unchanged: a
// batch whose Write failed can be written again (the store sink retries
// it); one that was stored must not be written again.
func (s *Store) WriteBatch(ctx context.Context, b *Batch) error { return s.write(ctx, b.b) }

func (s *Store) write(ctx context.Context, b *batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.n == 0 {
		return s.applyRetention()
	}
	st, err := s.stage(b)
	if err != nil {
		return err
	}
	if err := s.Commit(ctx, []Staged{st}, nil); err != nil {
		if !errors.Is(err, ErrNotDurable) {
			s.Discard([]Staged{st})
		}
		return fmt.Errorf("store: write batch of %d records: %w", b.n, err)
	}
	return nil
}

// Staged is a segment written to disk, durably, but not yet published:
// no reader sees it and a crash deletes it (Open removes segments the
// manifest does not list). Commit publishes staged segments together.
type Staged struct {
	e entry
}

// Records is the number of records in the staged segment.
func (st Staged) Records() uint64 { return st.e.records }

// Stage writes b as a segment that Commit publishes later, so that the
// records of one eviction written as several segments (a big eviction, a
// batch held while the disk was full) become visible, and are recorded
// with their mark, in one publish. Staging leaves b unchanged.
func (s *Store) Stage(ctx context.Context, b *Batch) (Staged, error) {
	if err := ctx.Err(); err != nil {
		return Staged{}, err
	}
	if b.b.n == 0 {
		return Staged{}, errors.New("store: stage an empty batch")
	}
	return s.stage(b.b)
}

func (s *Store) stage(b *batch) (Staged, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	id, err := s.allocID()
	if err != nil {
		return Staged{}, err
	}
	e, err := writeSegment(s.dir, id, nil, b)
	if err != nil {
		return Staged{}, fmt.Errorf("store: write batch of %d records: %w", b.n, err)
	}
	return Staged{e: e}, nil
}

// Commit publishes staged segments and marks in one manifest publish, and
// applies retention. On an error the staged segments are not published
// (they may be committed again, or discarded), except for an error that
// wraps ErrNotDurable: published then, but maybe not durable.
func (s *Store) Commit(ctx context.Context, staged []Staged, marks []Mark) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	next := s.m.clone()
	var records uint64
	for _, st := range staged {
		next.entries = append(next.entries, st.e)
		records += st.e.records
	}
	for _, mk := range marks {
		next.addMark(mk, s.m.gen+1)
	}
	expired := s.expire(next)
	err := s.publish(next)
	published := s.m == next
	if published {
		s.count.Writes += uint64(len(staged))
		s.count.WrittenRecords += records
		s.countExpired(expired)
	}
	s.mu.Unlock()
	if !published {
		return fmt.Errorf("store: publish %d records: %w", records, err)
	}
	s.removeExpired(expired)
	select {
	case s.kick <- struct{}{}:
	default:
	}
	if err != nil {
		return fmt.Errorf("store: %d records published but %w: %w", records, ErrNotDurable, err)
	}
	return nil
}

// Discard removes staged segments that will not be committed.
func (s *Store) Discard(staged []Staged) {
	for _, st := range staged {
		s.dir.remove(segName(st.e.id))
	}
}

// Stored returns the mark of a set of kernel tables that the store holds.
func (s *Store) Stored(set uint64) (Mark, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.mark(set)
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

// Maintain checks the segments' headers (quarantining damaged ones),
// applies retention and compacts until no merge is due. The background
// goroutine does this every MaintenanceInterval, and after a write all but
// the header check; with NoBackground, callers (tests) call it.
func (s *Store) Maintain(ctx context.Context) error { return s.maintain(ctx, true) }

func (s *Store) maintain(ctx context.Context, check bool) error {
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	if check {
		if err := s.checkSegments(); err != nil {
			return err
		}
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

func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(s.opts.MaintenanceInterval)
	defer t.Stop()
	for {
		check := false
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
			check = true
		}
		if err := s.maintain(s.ctx, check); err != nil && s.ctx.Err() == nil {
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
