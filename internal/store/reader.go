package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"

	"loupe/internal/flow"
)

// Reader queries a store directory. It takes no lock: any number of readers
// run concurrently with the writer, each query on a consistent snapshot (the
// segments one manifest lists, held open so that the writer deleting them
// does not matter). A Reader is safe for concurrent use.
type Reader struct {
	dir   string
	log   *slog.Logger
	cache *segCache // Top's segments, from one query to the next (segcache.go)
}

// OpenReader returns a reader of dir, which must be a Loupe store: one an
// agent has opened (it writes a manifest at once), or a store directory
// whose manifest was lost. Anything else, an empty directory included, is
// refused with ErrNotStore and a reason, so that a mistyped --store is not
// mistaken for a quiet host.
func OpenReader(dir string) (*Reader, error) {
	d, err := openDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer d.close()
	kind, why, err := d.classify()
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	switch kind {
	case kindEmpty:
		return nil, fmt.Errorf("store: %s is %w: it is empty (an agent writing there makes it a store at once; is store.path elsewhere?)", dir, ErrNotStore)
	case kindOther:
		return nil, fmt.Errorf("store: %s is %w: %s", dir, ErrNotStore, why)
	}
	r := &Reader{dir: dir, log: slog.New(slog.DiscardHandler).With("component", "store"), cache: &segCache{}}
	// A Reader dropped without Close unmaps its segments when it is
	// collected.
	runtime.AddCleanup(r, (*segCache).close, r.cache)
	return r, nil
}

// Close unmaps the segments the Reader keeps for its next query, and
// forgets the ids it gave their addresses and flows. Queries
// may still run afterwards: they map what they read again.
func (r *Reader) Close() error {
	r.cache.close()
	return nil
}

// SetLogger sets where the reader logs (warnings about corrupt segments and
// an unusable manifest); by default it does not log.
func (r *Reader) SetLogger(l *slog.Logger) {
	r.log = l.With("component", "store", "dir", r.dir)
}

// SegmentError is a segment a query skipped: corrupt, truncated,
// unreadable or missing.
type SegmentError struct {
	Path string
	Err  error
}

func (e SegmentError) Error() string { return e.Err.Error() }

// Report describes what one query read. Pass a *Report in Query.Report to
// get it: a query that skips corrupt segments still succeeds, and this is
// where it says so.
type Report struct {
	Segments int    // live segments in the snapshot
	Pruned   int    // skipped by their time range without being read
	Read     int    // read and verified
	Scanned  uint64 // records in the segments read
	Matched  uint64 // records that matched the query
	// Corrupt lists the segments skipped because they failed verification
	// (ErrCorrupt), could not be read (ErrUnreadable: permission denied,
	// not a regular file), or vanished without a newer manifest accounting
	// for them (fs.ErrNotExist).
	Corrupt []SegmentError
	// Retries counts snapshots abandoned because the writer removed a
	// listed segment (compaction, retention) before it could be opened.
	Retries int
	// Fallback is set when the manifest was missing or corrupt and the
	// live set was rebuilt from the segment headers.
	Fallback bool
}

type snapFile struct {
	e    entry
	path string
	f    *os.File
}

// snapshot is a set of open segment files forming one consistent state.
type snapshot struct {
	files []snapFile
	live  map[uint64]bool // every segment the manifest lists, in the window or not
}

func (sn *snapshot) close() {
	for _, sf := range sn.files {
		sf.f.Close()
	}
	sn.files = nil
}

// liveSet reads the manifest, or rebuilds the live set from the segment
// headers if it is unusable. gen is the manifest generation (0 if rebuilt).
func (r *Reader) liveSet(d *storeDir, rep *Report) (entries []entry, gen uint64, err error) {
	m, err := readManifest(d)
	if err == nil {
		return m.entries, m.gen, nil
	}
	ids, lerr := listSegments(d)
	if lerr != nil {
		return nil, 0, lerr
	}
	if errors.Is(err, fs.ErrNotExist) && len(ids) == 0 {
		return nil, 0, nil // nothing written yet
	}
	r.log.Warn("manifest unusable; reading segment headers instead", "err", err)
	rep.Fallback = true
	st, err := scanDir(d, r.log)
	if err != nil {
		return nil, 0, err
	}
	rep.Corrupt = append(rep.Corrupt, st.corrupt...)
	return st.live, 0, nil
}

// maxSnapshotAttempts bounds the retries of a reader racing a writer. Each
// retry means the writer published a newer manifest in between, so running
// out takes a writer publishing faster than we can open a few files.
const maxSnapshotAttempts = 1000

// snapshot opens the live segments that can overlap [since, until]. The
// directory is opened once per query and every file through it, without
// following symlinks.
func (r *Reader) snapshot(ctx context.Context, since, until int64, rep *Report) (*snapshot, error) {
	d, err := openDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer d.close()
	var prevGen uint64
	var prevMissing []string
	for attempt := range maxSnapshotAttempts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		entries, gen, err := r.liveSet(d, rep)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		sn := &snapshot{live: make(map[uint64]bool, len(entries))}
		for _, e := range entries {
			sn.live[e.id] = true
		}
		var missing []string
		var unreadable []SegmentError
		pruned := 0
		for _, e := range entries {
			if e.maxLast < since || e.minFirst > until {
				pruned++
				continue
			}
			path := d.join(segName(e.id))
			f, err := openSegment(d, e.id)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				missing = append(missing, path)
				continue
			case damaged(err):
				unreadable = append(unreadable, SegmentError{Path: path, Err: err})
				continue
			case err != nil:
				sn.close()
				return nil, fmt.Errorf("store: open segment: %w", err)
			}
			sn.files = append(sn.files, snapFile{e: e, path: path, f: f})
		}
		// A vanished file normally means the writer has already published
		// a manifest without it. If the very same manifest lists the same
		// missing files twice, they are really gone: report, don't loop.
		if len(missing) == 0 || (attempt > 0 && gen == prevGen && slices.Equal(missing, prevMissing)) {
			for _, p := range missing {
				r.log.Warn("segment listed in the manifest is missing", "path", p)
				rep.Corrupt = append(rep.Corrupt, SegmentError{Path: p, Err: fmt.Errorf("segment %s: %w", p, fs.ErrNotExist)})
			}
			for _, u := range unreadable {
				r.log.Warn("skipping unreadable segment", "path", u.Path, "err", u.Err)
			}
			rep.Corrupt = append(rep.Corrupt, unreadable...)
			rep.Segments, rep.Pruned = len(entries), pruned
			return sn, nil
		}
		sn.close()
		rep.Retries++
		prevGen, prevMissing = gen, missing
	}
	return nil, fmt.Errorf("store: no consistent snapshot after %d attempts: the writer keeps replacing segments", maxSnapshotAttempts)
}

// mapFile maps a snapshot file and checks it against its manifest entry;
// full also verifies all of it (else the caller verifies what it uses).
func mapFile(sf snapFile, full bool) (*segment, error) {
	s, err := mapSegment(sf.f, sf.path, full)
	if err != nil {
		return nil, err
	}
	if s.id != sf.e.id || uint64(s.n) != sf.e.records || int64(len(s.data)) != sf.e.size {
		err := corruptf(sf.path, "header (id %d, %d records, %d bytes) does not match the manifest (id %d, %d records, %d bytes)",
			s.id, s.n, len(s.data), sf.e.id, sf.e.records, sf.e.size)
		s.release()
		return nil, err
	}
	return s, nil
}

func (r *Reader) skip(rep *Report, mu *sync.Mutex, path string, err error) {
	r.log.Warn("skipping damaged segment", "path", path, "err", err)
	mu.Lock()
	rep.Corrupt = append(rep.Corrupt, SegmentError{Path: path, Err: err})
	mu.Unlock()
}

// parallel maps each snapshot segment, checks its header and hands it to fn
// on up to GOMAXPROCS goroutines, biggest first so the last one to finish is
// small. fn gets the worker number and must verify the blocks it uses; a
// segment that fails verification (fn returns an ErrCorrupt before using
// any data) is skipped and reported.
func (r *Reader) parallel(ctx context.Context, sn *snapshot, rep *Report, fn func(w int, s *segment) error) error {
	files := slices.Clone(sn.files)
	slices.SortFunc(files, func(a, b snapFile) int { return cmp.Compare(b.e.size, a.e.size) })
	return r.parallelIn(ctx, files, rep, fn)
}

// maxWorkers is how many goroutines parallel runs at most.
func maxWorkers() int { return runtime.GOMAXPROCS(0) }

// parallelIn is parallel over files in the given order.
func (r *Reader) parallelIn(ctx context.Context, files []snapFile, rep *Report, fn func(w int, s *segment) error) error {
	workers := min(maxWorkers(), max(len(files), 1))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan snapFile)
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for sf := range ch {
				if ctx.Err() != nil {
					continue
				}
				s, err := mapFile(sf, false)
				if err == nil {
					err = fn(w, s)
					if err == nil {
						mu.Lock()
						rep.Read++
						rep.Scanned += uint64(s.n)
						mu.Unlock()
					}
					s.release()
				}
				switch {
				case damaged(err):
					r.skip(rep, &mu, sf.path, err)
				case err != nil:
					fail(err)
				}
			}
		})
	}
feed:
	for _, sf := range files {
		select {
		case ch <- sf:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// Scan calls fn for every record matching q, from a single goroutine.
// Order: segment by segment, segments by ascending earliest first_seen
// (then id), and within a segment in the order the records were written
// (a merged segment keeps its inputs' order). That is roughly arrival order,
// not a sort by time. fn's *flow.Record is reused: copy it to keep it. An
// error from fn stops the scan and is returned as is.
func (r *Reader) Scan(ctx context.Context, q Query, fn func(*flow.Record) error) error {
	cq, err := q.compile()
	if err != nil {
		return err
	}
	rep := q.report()
	sn, err := r.snapshot(ctx, cq.since, cq.until, rep)
	if err != nil {
		return err
	}
	defer sn.close()
	slices.SortFunc(sn.files, func(a, b snapFile) int {
		return cmp.Or(cmp.Compare(a.e.minFirst, b.e.minFirst), cmp.Compare(a.e.id, b.e.id))
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Verifying a segment (a CRC over all of it) is the expensive part, so
	// one goroutine maps and verifies the next segment while fn consumes
	// the current one.
	type mapped struct {
		sf  snapFile
		s   *segment
		err error
	}
	ch := make(chan mapped, 1)
	go func() {
		defer close(ch)
		for _, sf := range sn.files {
			s, err := mapFile(sf, true)
			select {
			case ch <- mapped{sf, s, err}:
			case <-ctx.Done():
				s.release()
				return
			}
		}
	}()
	defer func() {
		cancel()
		for m := range ch {
			m.s.release()
		}
	}()
	var mu sync.Mutex
	var rec flow.Record
	for m := range ch {
		if m.err != nil {
			if !damaged(m.err) {
				return m.err
			}
			r.skip(rep, &mu, m.sf.path, m.err)
			continue
		}
		err := r.scanSegment(ctx, m.s, &cq, rep, &rec, fn)
		m.s.release()
		if damaged(err) {
			r.skip(rep, &mu, m.sf.path, err)
			continue
		}
		if err != nil {
			return err
		}
		rep.Read++
		rep.Scanned += uint64(m.s.n)
	}
	return ctx.Err()
}

func (r *Reader) scanSegment(ctx context.Context, s *segment, cq *compiled, rep *Report, rec *flow.Record, fn func(*flow.Record) error) error {
	f, ok, err := cq.forSegment(s)
	if err != nil || !ok {
		return err
	}
	dec, err := newRecordDecoder(s)
	if err != nil {
		return err
	}
	// Check every index first so that a corrupt segment is skipped whole
	// rather than after fn has seen part of it.
	for _, c := range [...]struct{ col, limit int }{
		{cSrcAddr, s.nAddr}, {cDstAddr, s.nAddr}, {cSrcMAC, s.nMAC}, {cDstMAC, s.nMAC}, {cIface, len(dec.names)},
	} {
		if err := s.checkIndex(c.col, c.limit); err != nil {
			return err
		}
	}
	for i := range s.n {
		if i%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if !f.match(s, i) {
			continue
		}
		if err := dec.decode(i, rec); err != nil {
			return err // cannot happen after the checks above
		}
		rep.Matched++
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// Stats reads the manifest and describes the live data. The writer
// counters are zero.
func (r *Reader) Stats() (Stats, error) {
	d, err := openDir(r.dir)
	if err != nil {
		return Stats{}, fmt.Errorf("store: stats: %w", err)
	}
	defer d.close()
	var rep Report
	entries, _, err := r.liveSet(d, &rep)
	if err != nil {
		return Stats{}, fmt.Errorf("store: stats: %w", err)
	}
	return statsOf(&manifest{entries: entries}), nil
}
