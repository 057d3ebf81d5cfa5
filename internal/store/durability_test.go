package store_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// blockAt returns the offset and length of the block of the given kind,
// read from the block directory as the format comment in format.go lays it
// out.
func blockAt(t *testing.T, b []byte, kind uint32) (int, int) {
	t.Helper()
	nBlocks := int(binary.LittleEndian.Uint32(b[12:]))
	dir := 80 + 8*int(binary.LittleEndian.Uint32(b[72:]))
	for i := range nBlocks {
		e := b[dir+32*i:]
		if binary.LittleEndian.Uint32(e) == kind {
			return int(binary.LittleEndian.Uint64(e[8:])), int(binary.LittleEndian.Uint64(e[16:]))
		}
	}
	t.Fatalf("no block of kind %d", kind)
	return 0, 0
}

func TestCorruptAndTruncatedSegmentsSkipped(t *testing.T) {
	const kindBytes, kindDSCP = 4, 13
	for _, damage := range []string{"flip bytes column", "flip dscp column", "flip header", "truncate", "empty", "trailer"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, store.Options{NoBackground: true})
			defer s.Close()
			recs := gen(rand.New(rand.NewPCG(21, 22)), 3000, t0)
			writeAll(t, s, recs, 1000)
			files := segFiles(t, dir)
			if len(files) != 3 {
				t.Fatalf("%d segments", len(files))
			}
			victim := files[1]
			b, err := os.ReadFile(victim)
			if err != nil {
				t.Fatal(err)
			}
			switch damage {
			case "flip bytes column":
				off, n := blockAt(t, b, kindBytes)
				b[off+n/2] ^= 0x40
			case "flip dscp column":
				off, n := blockAt(t, b, kindDSCP)
				b[off+n/2] ^= 0x01
			case "flip header":
				b[41] ^= 0x10 // min first_seen
			case "truncate":
				b = b[:len(b)-100]
			case "empty":
				b = nil
			case "trailer":
				b = b[:len(b)-4]
			}
			if err := os.WriteFile(victim, b, 0o644); err != nil {
				t.Fatal(err)
			}
			r := openReader(t, dir)
			var rep store.Report
			q := store.NewQuery()
			q.Report = &rep
			want := slices.Concat(recs[:1000], recs[2000:])
			sameRecords(t, "scan", scanAll(t, r, q), want)
			if len(rep.Corrupt) != 1 || rep.Corrupt[0].Path != victim || !errors.Is(rep.Corrupt[0].Err, store.ErrCorrupt) {
				t.Fatalf("scan report %+v", rep)
			}
			// Top verifies the header and the blocks it reads. Damage in a
			// block it does not read cannot change its answer, so it then
			// uses the segment: every byte behind an answer is verified.
			wantTop, wantCorrupt := want, 1
			if damage == "flip dscp column" {
				wantTop, wantCorrupt = recs, 0
			}
			for _, by := range allGroupings {
				sameTop(t, "top", top(t, r, q, by, 0), bruteTop(wantTop, store.NewQuery(), by, 0))
				if len(rep.Corrupt) != wantCorrupt || rep.Read != 3-wantCorrupt {
					t.Fatalf("top report %+v", rep)
				}
			}
			// Compaction must not merge (and so launder or lose) it either.
			if err := s.Maintain(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMissingSegmentReportedNotRetriedForever(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	recs := gen(rand.New(rand.NewPCG(23, 24)), 300, t0)
	writeAll(t, s, recs, 100)
	s.Close()
	files := segFiles(t, dir)
	os.Remove(files[0])
	var rep store.Report
	q := store.NewQuery()
	q.Report = &rep
	sameRecords(t, "scan", scanAll(t, openReader(t, dir), q), recs[100:])
	if len(rep.Corrupt) != 1 || !errors.Is(rep.Corrupt[0].Err, os.ErrNotExist) {
		t.Fatalf("report %+v", rep)
	}
	// The writer drops it from the manifest on open.
	s = openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	if st := s.Stats(); st.Segments != 2 || st.Records != 200 {
		t.Fatalf("stats %+v", st)
	}
}

// clock is a settable fake clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

func TestRetention(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{now: t0}
	s := openStore(t, dir, store.Options{NoBackground: true, Retention: time.Hour, Now: clk.Now})
	defer s.Close()
	rng := rand.New(rand.NewPCG(31, 32))
	old := gen(rng, 500, t0.Add(-3*time.Hour))    // ends by t0-1h59m
	mid := gen(rng, 500, t0.Add(-90*time.Minute)) // ends by t0-29m
	writeAll(t, s, old, 500)
	writeAll(t, s, mid, 500)
	r := openReader(t, dir)
	// The write of old itself already expired it: retention runs on Write.
	sameRecords(t, "old expired on write", scanAll(t, r, store.NewQuery()), mid)
	if st := s.Stats(); st.Segments != 1 || st.ExpiredSegments != 1 {
		t.Fatalf("stats %+v", st)
	}
	if n := len(segFiles(t, dir)); n != 1 {
		t.Fatalf("%d segment files left", n)
	}
	// Time passes without writes: Maintain (the periodic job) expires mid.
	clk.Set(t0.Add(35 * time.Minute))
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, r, store.NewQuery()); len(got) != 0 {
		t.Fatalf("%d records survive retention", len(got))
	}
	if n := len(segFiles(t, dir)); n != 0 {
		t.Fatalf("%d segment files left", n)
	}
	// A segment is kept while its newest record is within retention.
	fresh := gen(rng, 100, t0)
	writeAll(t, s, fresh, 100)
	clk.Set(t0.Add(2 * time.Hour)) // fresh's newest last_seen is at most t0+61m
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "fresh kept", scanAll(t, r, store.NewQuery()), fresh)
}

// compactOpts makes compaction happen with little data.
func compactOpts() store.Options {
	return store.Options{NoBackground: true, CompactFanIn: 4, CompactMaxRecords: 3000, CompactMaxSpan: 24 * time.Hour}
}

func answers(t *testing.T, r *store.Reader) (recs []flow.Record, tops [4][]store.TopEntry) {
	q := store.NewQuery()
	q.Since = t0.Add(10 * time.Minute)
	recs = scanAll(t, r, store.NewQuery())
	for by := store.BySrc; by <= store.ByPort; by++ {
		tops[by] = top(t, r, q, by, 0)
	}
	return recs, tops
}

func sameAnswers(t *testing.T, what string, r *store.Reader, wantRecs []flow.Record, wantTops [4][]store.TopEntry) {
	t.Helper()
	recs, tops := answers(t, r)
	sameRecords(t, what, recs, wantRecs)
	for by := range tops {
		sameTop(t, what, tops[by], wantTops[by])
	}
}

func TestCompactionEquivalence(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, compactOpts())
	rng := rand.New(rand.NewPCG(41, 42))
	var recs []flow.Record
	for k := range 60 {
		b := gen(rng, 10+rng.IntN(200), t0)
		if k%3 == 0 {
			// Exact records only: segments without the accuracy
			// columns, merged with segments that have them.
			for i := range b {
				b[i].Accuracy, b[i].MaxErrorPackets, b[i].MaxErrorBytes, b[i].ErrorConfidence = flow.Exact, 0, 0, 0
			}
		}
		recs = append(recs, b...)
		writeAll(t, s, b, len(b))
	}
	r := openReader(t, dir)
	wantRecs, wantTops := answers(t, r)
	sameRecords(t, "before", wantRecs, recs)
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Compactions == 0 || st.Segments >= 60 || st.Records != uint64(len(recs)) {
		t.Fatalf("stats after compaction %+v", st)
	}
	if n := len(segFiles(t, dir)); n != st.Segments {
		t.Fatalf("%d files for %d live segments", n, st.Segments)
	}
	sameAnswers(t, "after compaction", r, wantRecs, wantTops)
	s.Close()
	// The segment headers alone (replaced ids, transitive) give the same
	// answer when the manifest is lost.
	os.Remove(filepath.Join(dir, "MANIFEST"))
	var rep store.Report
	q := store.NewQuery()
	q.Report = &rep
	sameRecords(t, "fallback", scanAll(t, r, q), recs)
	if !rep.Fallback {
		t.Error("fallback not reported")
	}
	s = openStore(t, dir, compactOpts())
	defer s.Close()
	sameAnswers(t, "rebuilt manifest", r, wantRecs, wantTops)
}

// TestCompactionCrashWindows rebuilds the directory states a crash can leave
// during a merge and checks that nothing is counted twice or lost.
func TestCompactionCrashWindows(t *testing.T) {
	base := t.TempDir()
	opts := compactOpts()
	opts.CompactFanIn = 8
	s := openStore(t, base, opts)
	rng := rand.New(rand.NewPCG(51, 52))
	recs := gen(rng, 8*200, t0)
	writeAll(t, s, recs, 200)
	before := copyDir(t, base) // 8 originals + their manifest
	originals := segFiles(t, before)
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	after := copyDir(t, base) // merged segment + its manifest
	merged := segFiles(t, after)
	if len(originals) != 8 || len(merged) != 1 {
		t.Fatalf("%d originals, %d merged", len(originals), len(merged))
	}
	want, wantTops := answers(t, openReader(t, before))

	windows := map[string]func(dir string){
		// Crash after the merged file was renamed in, before the manifest.
		"merged unpublished": func(dir string) {
			copyDir2(t, before, dir)
			copyFile(t, merged[0], filepath.Join(dir, filepath.Base(merged[0])))
		},
		// Crash after the manifest swap, before the originals were deleted.
		"originals not deleted": func(dir string) {
			copyDir2(t, after, dir)
			for _, o := range originals {
				copyFile(t, o, filepath.Join(dir, filepath.Base(o)))
			}
		},
		// As above, with a lost manifest: the replaced ids decide.
		"originals not deleted, no manifest": func(dir string) {
			copyDir2(t, after, dir)
			for _, o := range originals {
				copyFile(t, o, filepath.Join(dir, filepath.Base(o)))
			}
			os.Remove(filepath.Join(dir, "MANIFEST"))
		},
		// Only some originals deleted.
		"half deleted": func(dir string) {
			copyDir2(t, after, dir)
			for _, o := range originals[4:] {
				copyFile(t, o, filepath.Join(dir, filepath.Base(o)))
			}
		},
	}
	for name, setup := range windows {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			setup(dir)
			r := openReader(t, dir)
			sameAnswers(t, "reader during the window", r, want, wantTops)
			w := openStore(t, dir, opts) // recovery
			sameAnswers(t, "after recovery", r, want, wantTops)
			st := w.Stats()
			if n := len(segFiles(t, dir)); n != st.Segments {
				t.Errorf("%d files for %d live segments after recovery", n, st.Segments)
			}
			// A later compaction and reopen still agree.
			if err := w.Maintain(context.Background()); err != nil {
				t.Fatal(err)
			}
			w.Close()
			sameAnswers(t, "after maintain", r, want, wantTops)
		})
	}
}

func copyDir2(t *testing.T, src, dst string) {
	t.Helper()
	des, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.Type().IsRegular() && de.Name() != "LOCK" {
			copyFile(t, filepath.Join(src, de.Name()), filepath.Join(dst, de.Name()))
		}
	}
}

// TestRetentionBySize: past MaxSize the oldest segments (by newest record)
// go first, the newest is always kept, and what retention deleted is
// counted by reason, in segments, records and file bytes.
func TestRetentionBySize(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	// Six hours of data, one segment an hour, written out of order: the
	// third batch is the oldest.
	bases := []time.Duration{-6, -5, -8, -4, -3, -2}
	batches := make([][]flow.Record, len(bases))
	for i, h := range bases {
		batches[i] = gen(rng, 200+10*i, t0.Add(h*time.Hour))
	}
	// Segment sizes, measured: the same batch always encodes alike.
	sizes := make([]int64, len(batches))
	{
		dir := t.TempDir()
		s := openStore(t, dir, store.Options{NoBackground: true})
		for i, b := range batches {
			writeAll(t, s, b, len(b))
			fi, err := os.Stat(segFiles(t, dir)[i])
			if err != nil {
				t.Fatal(err)
			}
			sizes[i] = fi.Size()
		}
		s.Close()
	}
	// Room for the three newest segments (batches 3, 4, 5), not four.
	limit := sizes[3] + sizes[4] + sizes[5]
	dir := t.TempDir()
	clk := &clock{now: t0}
	s := openStore(t, dir, store.Options{NoBackground: true, MaxSize: limit, Retention: 7 * time.Hour, Now: clk.Now})
	defer s.Close()
	for _, b := range batches {
		writeAll(t, s, b, len(b))
		if st := s.Stats(); st.DiskBytes > limit {
			t.Fatalf("%d bytes live, limit %d", st.DiskBytes, limit)
		}
	}
	r := openReader(t, dir)
	sameRecords(t, "newest three kept", scanAll(t, r, store.NewQuery()), slices.Concat(batches[3], batches[4], batches[5]))
	st := s.Stats()
	wantSize := store.Deleted{Segments: 3, Records: uint64(len(batches[0]) + len(batches[1]) + len(batches[2])),
		Bytes: uint64(sizes[0] + sizes[1] + sizes[2])}
	if st.Retention[store.RetentionSize] != wantSize || st.Retention[store.RetentionAge] != (store.Deleted{}) || st.ExpiredSegments != 3 {
		t.Fatalf("retention by size %+v, want %+v; by age %+v", st.Retention[store.RetentionSize], wantSize, st.Retention[store.RetentionAge])
	}
	if n := len(segFiles(t, dir)); n != 3 {
		t.Fatalf("%d segment files left", n)
	}

	// Age retention counts under its own reason.
	clk.Set(t0.Add(4*time.Hour + 5*time.Minute)) // batch 3 (t0-4h, ends by t0-2h59m) is older than 7h now
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	st = s.Stats()
	wantAge := store.Deleted{Segments: 1, Records: uint64(len(batches[3])), Bytes: uint64(sizes[3])}
	if st.Retention[store.RetentionAge] != wantAge || st.Retention[store.RetentionSize] != wantSize || st.ExpiredSegments != 4 {
		t.Fatalf("retention by age %+v, want %+v; by size %+v", st.Retention[store.RetentionAge], wantAge, st.Retention[store.RetentionSize])
	}
	sameRecords(t, "after age retention", scanAll(t, r, store.NewQuery()), slices.Concat(batches[4], batches[5]))

	// A limit below one segment still keeps the newest one.
	dir = t.TempDir()
	s2 := openStore(t, dir, store.Options{NoBackground: true, MaxSize: 1})
	defer s2.Close()
	for _, b := range batches {
		writeAll(t, s2, b, len(b))
	}
	sameRecords(t, "tiny limit", scanAll(t, openReader(t, dir), store.NewQuery()), batches[5])
}

// TestMaxSizeCapsMerges: with a size limit, compaction never builds a
// segment bigger than an eighth of it, so that size retention deletes a
// small part of the store at a time.
func TestMaxSizeCapsMerges(t *testing.T) {
	dir := t.TempDir()
	opts := compactOpts()
	opts.CompactFanIn = 2
	rng := rand.New(rand.NewPCG(35, 36))
	var recs []flow.Record
	var sizes int64
	{
		s := openStore(t, t.TempDir(), opts)
		b := gen(rng, 100, t0)
		writeAll(t, s, b, 100)
		sizes = s.Stats().DiskBytes
		s.Close()
	}
	opts.MaxSize = 8 * (2*sizes + sizes/2) // room for merges of two, not four
	s := openStore(t, dir, opts)
	defer s.Close()
	for range 16 {
		b := gen(rng, 100, t0)
		recs = append(recs, b...)
		writeAll(t, s, b, 100)
	}
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Compactions == 0 || st.Records != uint64(len(recs)) {
		t.Fatalf("stats %+v", st)
	}
	for _, f := range segFiles(t, dir) {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > opts.MaxSize/8 {
			t.Errorf("%s is %d bytes, more than MaxSize/8 = %d", f, fi.Size(), opts.MaxSize/8)
		}
	}
	sameRecords(t, "after capped merges", scanAll(t, openReader(t, dir), store.NewQuery()), recs)
}
