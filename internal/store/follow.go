package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"loupe/internal/flow"
)

// Follow is `loupe flows --follow`: it watches the manifest and hands over
// the records of each segment the writer publishes after Follow started.
// It reads the manifest as soon as the writer replaces it (inotify), and
// opens new segments at once, so that it normally reads each write before
// compaction could merge it.
//
// The writer's compaction may merge a new segment before the follower has
// read it (it runs right after a write). A merged segment lists the ids it
// replaces, and compaction concatenates its inputs in id order, so when
// exactly one id it replaces was never seen (in a manifest, or in the
// replaced lists of the segments seen), that unseen segment's records are
// the rows between the seen inputs with lower ids and those with higher
// ids: Follow reads them from the merged segment (and all of them from a
// merge of segments none of which it had read). Anything less certain
// (several unseen inputs: the follower did not read the manifest for
// several writes and merges) is not guessed at: the records are counted
// and reported as missed (they are in the store). Memory is bounded: one
// segment at a time, plus the ids of the live and replaced segments.

// FollowEvents receives what Follow reports besides records.
type FollowEvents struct {
	// Flush is called after the records of each batch of new segments
	// (nil: not called).
	Flush func() error
	// Missed is called with a number of records Follow could not place,
	// whether they match the query or not (nil: not called). They are in
	// the store; a query finds them.
	Missed func(records uint64, why string)
	// Skipped is called for a new segment that is damaged (nil: not
	// called).
	Skipped func(SegmentError)
}

// Follow calls fn for each record matching q in the segments published
// after it starts, in the order they were written, polling the manifest
// every poll, until ctx is done (then it returns nil). fn's *flow.Record is
// reused. An error from fn or from ev.Flush stops Follow and is returned.
func (r *Reader) Follow(ctx context.Context, q Query, poll time.Duration, ev FollowEvents, fn func(*flow.Record) error) error {
	cq, err := q.compile()
	if err != nil {
		return err
	}
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	d, err := openDir(r.dir)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer d.close()
	fw := &follower{r: r, d: d, cq: &cq, ev: ev, fn: fn, live: map[uint64]uint64{}, known: map[uint64]bool{}}
	m, err := readManifest(d)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A writer that has not published yet: everything is new.
	case err != nil:
		return fmt.Errorf("store: %w", err)
	default:
		fw.start(m)
	}
	// The manifest is read when it is replaced (inotify), so that a new
	// segment is opened before compaction can merge it, and every poll in
	// any case.
	changed, stop := watchManifest(r.dir)
	defer stop()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-changed:
		}
		if err := fw.step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

type follower struct {
	r     *Reader
	d     *storeDir
	cq    *compiled
	ev    FollowEvents
	fn    func(*flow.Record) error
	gen   uint64
	live  map[uint64]uint64 // id -> records, as the last manifest read lists them
	known map[uint64]bool   // live, read, or replaced by one of those
	rec   flow.Record
	warn  string // the last manifest error reported
}

// start takes m's segments as already there: their records are not new.
func (fw *follower) start(m *manifest) {
	fw.gen = m.gen
	for _, e := range m.entries {
		fw.live[e.id] = e.records
		fw.known[e.id] = true
		// Their replaced ids, so that a later merge of them does not
		// count those as unseen.
		f, err := openSegment(fw.d, e.id)
		if err != nil {
			continue
		}
		if s, err := mapSegment(f, fw.d.join(segName(e.id)), false); err == nil {
			for _, id := range s.replaces {
				fw.known[id] = true
			}
			s.release()
		}
		f.Close()
	}
}

// step reads the manifest and hands over the records of the segments it
// lists for the first time.
func (fw *follower) step(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		m, err := readManifest(fw.d)
		if err != nil {
			// A writer replaces the manifest atomically: an error here is
			// a missing or damaged manifest, which the writer rebuilds.
			if msg := err.Error(); msg != fw.warn {
				fw.warn = msg
				fw.r.log.Warn("cannot read the manifest; waiting for the writer", "err", err)
			}
			return nil
		}
		fw.warn = ""
		if m.gen == fw.gen {
			return nil
		}
		var news []entry
		for _, e := range m.entries {
			if _, ok := fw.live[e.id]; !ok {
				news = append(news, e)
			}
		}
		// Open them all before reading any: a file already gone means a
		// newer manifest replaced it (a merge), which is read instead.
		files, missing, err := fw.open(news)
		if err != nil {
			return err
		}
		if missing && attempt < maxSnapshotAttempts {
			closeAll(files)
			continue
		}
		err = fw.read(ctx, files)
		closeAll(files)
		if err != nil {
			return err
		}
		fw.gen = m.gen
		clear(fw.live)
		for _, e := range m.entries {
			fw.live[e.id] = e.records
			fw.known[e.id] = true
		}
		if fw.ev.Flush != nil {
			return fw.ev.Flush()
		}
		return nil
	}
}

type followFile struct {
	e   entry
	sf  *snapFile
	err error // damaged
}

func closeAll(files []followFile) {
	for _, f := range files {
		if f.sf != nil {
			f.sf.f.Close()
		}
	}
}

func (fw *follower) open(news []entry) (files []followFile, missing bool, err error) {
	for _, e := range news {
		path := fw.d.join(segName(e.id))
		f, err := openSegment(fw.d, e.id)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			missing = true
			files = append(files, followFile{e: e, err: fmt.Errorf("segment %s: %w", path, err)})
		case damaged(err):
			files = append(files, followFile{e: e, err: err})
		case err != nil:
			closeAll(files)
			return nil, false, fmt.Errorf("store: open segment: %w", err)
		default:
			files = append(files, followFile{e: e, sf: &snapFile{e: e, path: path, f: f}})
		}
	}
	return files, missing, nil
}

func (fw *follower) read(ctx context.Context, files []followFile) error {
	for _, ff := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		fw.known[ff.e.id] = true
		if ff.err != nil {
			fw.skipped(ff.sf, ff.e, ff.err)
			continue
		}
		s, err := mapFile(*ff.sf, true)
		if damaged(err) {
			fw.skipped(ff.sf, ff.e, err)
			continue
		}
		if err != nil {
			return err
		}
		err = fw.segment(s)
		s.release()
		if damaged(err) {
			fw.skipped(ff.sf, ff.e, err)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (fw *follower) skipped(sf *snapFile, e entry, err error) {
	path := fw.d.join(segName(e.id))
	if sf != nil {
		path = sf.path
	}
	fw.r.log.Warn("skipping damaged segment", "path", path, "err", err)
	if fw.ev.Skipped != nil {
		fw.ev.Skipped(SegmentError{Path: path, Err: err})
	}
	if fw.ev.Missed != nil {
		fw.ev.Missed(e.records, "a damaged segment")
	}
}

// newRows returns the rows of s that no segment seen before holds.
func (fw *follower) newRows(s *segment) (from, to int, ok bool) {
	if len(s.replaces) == 0 {
		return 0, s.n, true // a write
	}
	var seenRows uint64
	var unseen []uint64
	for _, id := range s.replaces {
		if n, ok := fw.live[id]; ok {
			seenRows += n
		} else if !fw.known[id] {
			unseen = append(unseen, id)
		}
	}
	for _, id := range s.replaces {
		fw.known[id] = true
	}
	switch {
	case seenRows == uint64(s.n):
		return 0, 0, true // a merge of segments already read
	case seenRows == 0 && len(unseen) > 0:
		return 0, s.n, true // a merge of segments none of which was read
	case seenRows > uint64(s.n) || len(unseen) != 1:
		if fw.ev.Missed != nil && seenRows < uint64(s.n) {
			fw.ev.Missed(uint64(s.n)-seenRows, "written and merged between two reads of the manifest")
		}
		return 0, 0, false
	}
	// The one unseen input lies after the seen inputs with lower ids.
	x := unseen[0]
	var before uint64
	for _, id := range s.replaces {
		if n, ok := fw.live[id]; ok && id < x {
			before += n
		}
	}
	return int(before), int(before) + s.n - int(seenRows), true
}

func (fw *follower) segment(s *segment) error {
	from, to, ok := fw.newRows(s)
	if !ok || from == to {
		return nil
	}
	f, ok, err := fw.cq.forSegment(s)
	if err != nil || !ok {
		return err
	}
	dec, err := checkedDecoder(s)
	if err != nil {
		return err
	}
	simple := f.simple()
	for i := from; i < to; i++ {
		if !simple && !f.match(s, i) {
			continue
		}
		if err := dec.decode(i, &fw.rec); err != nil {
			return err
		}
		if err := fw.fn(&fw.rec); err != nil {
			return err
		}
	}
	return nil
}

// watchManifest returns a channel that receives when a file is renamed
// into dir (the writer publishes a manifest by renaming it into place).
// Without inotify the channel never receives: the caller polls.
func watchManifest(dir string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return ch, func() {}
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return ch, func() {}
	}
	// Non-blocking, so that the runtime's poller waits for it and Close
	// ends the Read below.
	f := os.NewFile(uintptr(fd), "inotify")
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				if i := bytes.IndexByte(name, 0); i >= 0 {
					name = name[:i]
				}
				if string(name) == manifestName {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	return ch, func() {
		f.Close()
		<-done
	}
}
