package store

// The MANIFEST names the live segments. It is what makes a reader's view a
// consistent snapshot: the writer replaces it atomically (temp file, fsync,
// rename, directory fsync) and deletes a segment file only after publishing
// a manifest without it. A reader reads one manifest, then opens the files
// it lists; if one is gone a newer manifest exists, and the reader starts
// over from it. Listing the directory instead cannot give that guarantee:
// readdir concurrent with a rename and an unlink may return neither the new
// merged segment nor the originals it replaced.
//
// Manifest format, version 2, little endian:
//
//	0   8     magic "LOUPEMAN"
//	8   2     version (2)
//	10  2     reserved (0)
//	12  4     entry count K
//	16  8     generation, +1 on every publish
//	24  8     next segment id
//	32  40*K  entries sorted by id: id u64, records u64,
//	          min first_seen i64, max last_seen i64, file size u64
//	..  4     mark count M (at most maxMarks)
//	..  32*M  marks sorted by set: set u64, epoch u64, ring position u64,
//	          generation of the publish that last moved it u64
//	..  4     CRC32C of all preceding bytes
//
// Version 1 is the same without the marks; it is still read.
//
// A mark records which kernel tables the store holds (flow.Mark): the agent
// hands the records of a drained table to the store with the table's pin
// set and epoch, and the publish that lists their segments records the mark
// too, so that records and mark are committed together. An agent that
// restarts after a crash clears a table whose epoch the store holds instead
// of storing it twice. Marks of old pin sets are dropped, least recently
// moved first, beyond maxMarks.
//
// If the manifest is missing or corrupt, the segment headers are enough to
// rebuild it: every segment lists the ids it replaces (transitively), and a
// segment replaced by another present, valid segment is not live.

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
)

const (
	manifestMagic   = "LOUPEMAN"
	manifestVersion = 2
	manifestName    = "MANIFEST"
	manifestEntry   = 40
	manifestMark    = 32
	// maxMarks bounds the marks kept: one per pin set, and a host sees a
	// new pin set only when the agent's layout changes or its pins are
	// removed.
	maxMarks = 64
	lockName = "LOCK"
	// tmpPrefix starts every file that is not yet in place. Readers ignore
	// such names and a writer removes them when it opens the directory.
	tmpPrefix = ".tmp-"
	// quarantineSuffix is appended to a damaged segment's name when the
	// writer sets it aside: out of every reader's way, kept as evidence.
	quarantineSuffix = ".corrupt"
	segPrefix        = "seg-"
	segSuffix        = ".lseg"
)

// entry describes one live segment.
type entry struct {
	id       uint64
	records  uint64
	minFirst int64
	maxLast  int64
	size     int64
}

type manifest struct {
	gen     uint64
	nextID  uint64
	entries []entry     // sorted by id
	marks   []markEntry // sorted by set
}

// Mark is what the store holds of one set of kernel tables: the last
// epoch stored, and the ring-buffer position up to which diverted packets
// are stored (flow.Mark).
type Mark struct {
	Set, Epoch, RingPos uint64
}

type markEntry struct {
	Mark
	gen uint64 // the publish that last moved it
}

func (m *manifest) clone() *manifest {
	c := *m
	c.entries = slices.Clone(m.entries)
	c.marks = slices.Clone(m.marks)
	return &c
}

// mark returns the mark of set.
func (m *manifest) mark(set uint64) (Mark, bool) {
	i, ok := slices.BinarySearchFunc(m.marks, set, func(e markEntry, set uint64) int { return cmpU64(e.Set, set) })
	if !ok {
		return Mark{}, false
	}
	return m.marks[i].Mark, true
}

// addMark merges mk into the set's mark (epoch and position only grow) at
// generation gen, and drops the least recently moved marks past maxMarks.
func (m *manifest) addMark(mk Mark, gen uint64) {
	if mk.Set == 0 {
		return
	}
	i, ok := slices.BinarySearchFunc(m.marks, mk.Set, func(e markEntry, set uint64) int { return cmpU64(e.Set, set) })
	if ok {
		e := &m.marks[i]
		e.Epoch, e.RingPos, e.gen = max(e.Epoch, mk.Epoch), max(e.RingPos, mk.RingPos), gen
	} else {
		m.marks = slices.Insert(m.marks, i, markEntry{Mark: mk, gen: gen})
	}
	for len(m.marks) > maxMarks {
		oldest := 0
		for j := range m.marks {
			if m.marks[j].gen < m.marks[oldest].gen {
				oldest = j
			}
		}
		m.marks = slices.Delete(m.marks, oldest, oldest+1)
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (m *manifest) has(id uint64) bool {
	_, ok := slices.BinarySearchFunc(m.entries, id, func(e entry, id uint64) int {
		switch {
		case e.id < id:
			return -1
		case e.id > id:
			return 1
		}
		return 0
	})
	return ok
}

func segName(id uint64) string { return fmt.Sprintf("%s%016x%s", segPrefix, id, segSuffix) }

// parseSegName returns the id of a segment file name.
func parseSegName(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, segPrefix)
	if !ok {
		return 0, false
	}
	hex, ok = strings.CutSuffix(hex, segSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil
}

func encodeManifest(m *manifest) []byte {
	b := make([]byte, 0, 32+manifestEntry*len(m.entries)+4+manifestMark*len(m.marks)+4)
	b = append(b, manifestMagic...)
	b = le.AppendUint16(b, manifestVersion)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, uint32(len(m.entries)))
	b = le.AppendUint64(b, m.gen)
	b = le.AppendUint64(b, m.nextID)
	for _, e := range m.entries {
		b = le.AppendUint64(b, e.id)
		b = le.AppendUint64(b, e.records)
		b = le.AppendUint64(b, uint64(e.minFirst))
		b = le.AppendUint64(b, uint64(e.maxLast))
		b = le.AppendUint64(b, uint64(e.size))
	}
	b = le.AppendUint32(b, uint32(len(m.marks)))
	for _, mk := range m.marks {
		b = le.AppendUint64(b, mk.Set)
		b = le.AppendUint64(b, mk.Epoch)
		b = le.AppendUint64(b, mk.RingPos)
		b = le.AppendUint64(b, mk.gen)
	}
	return le.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// errManifestCorrupt is returned for a manifest that fails verification.
var errManifestCorrupt = errors.New("corrupt manifest")

func decodeManifest(b []byte) (*manifest, error) {
	if len(b) < 36 || string(b[:8]) != manifestMagic {
		return nil, fmt.Errorf("%w: bad magic or too short (%d bytes)", errManifestCorrupt, len(b))
	}
	v := le.Uint16(b[8:])
	if v != 1 && v != manifestVersion {
		return nil, fmt.Errorf("%w: unsupported version %d", errManifestCorrupt, v)
	}
	k := int(le.Uint32(b[12:]))
	marksAt, nm := 32+manifestEntry*k, 0
	switch {
	case v == 1 && len(b) != marksAt+4:
		return nil, fmt.Errorf("%w: %d bytes for %d entries", errManifestCorrupt, len(b), k)
	case v >= 2:
		if len(b) < marksAt+8 {
			return nil, fmt.Errorf("%w: %d bytes for %d entries", errManifestCorrupt, len(b), k)
		}
		nm = int(le.Uint32(b[marksAt:]))
		if nm > maxMarks || len(b) != marksAt+4+manifestMark*nm+4 {
			return nil, fmt.Errorf("%w: %d bytes for %d entries and %d marks", errManifestCorrupt, len(b), k, nm)
		}
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)) != le.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: CRC32C mismatch", errManifestCorrupt)
	}
	m := &manifest{gen: le.Uint64(b[16:]), nextID: le.Uint64(b[24:]), entries: make([]entry, k)}
	for i := range m.entries {
		e := b[32+manifestEntry*i:]
		m.entries[i] = entry{
			id:       le.Uint64(e),
			records:  le.Uint64(e[8:]),
			minFirst: int64(le.Uint64(e[16:])),
			maxLast:  int64(le.Uint64(e[24:])),
			size:     int64(le.Uint64(e[32:])),
		}
		if i > 0 && m.entries[i].id <= m.entries[i-1].id {
			return nil, fmt.Errorf("%w: entries out of order", errManifestCorrupt)
		}
	}
	for i := range nm {
		e := b[marksAt+4+manifestMark*i:]
		mk := markEntry{Mark: Mark{Set: le.Uint64(e), Epoch: le.Uint64(e[8:]), RingPos: le.Uint64(e[16:])}, gen: le.Uint64(e[24:])}
		if i > 0 && mk.Set <= m.marks[i-1].Set {
			return nil, fmt.Errorf("%w: marks out of order", errManifestCorrupt)
		}
		m.marks = append(m.marks, mk)
	}
	return m, nil
}

// maxManifestSize bounds what a reader loads as a manifest: a million
// segments, far beyond any store.
const maxManifestSize = 40 + manifestEntry<<20 + manifestMark*maxMarks

// readManifest returns fs.ErrNotExist (wrapped) if there is none.
func readManifest(d *storeDir) (*manifest, error) {
	b, err := d.readSmall(manifestName, maxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return decodeManifest(b)
}

// writeManifest publishes m atomically and durably. renamed reports whether
// the new manifest replaced the old one (readers may see it), which is also
// the case when only the final directory fsync failed.
func writeManifest(d *storeDir, m *manifest) (renamed bool, err error) {
	f, tmp, err := d.createTemp(manifestName)
	if err != nil {
		return false, fmt.Errorf("create manifest: %w", err)
	}
	_, err = f.Write(encodeManifest(m))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		d.remove(tmp)
		return false, fmt.Errorf("write manifest: %w", err)
	}
	// Renaming over a symlink replaces the link, never its target.
	if err := d.rename(tmp, manifestName); err != nil {
		d.remove(tmp)
		return false, fmt.Errorf("publish manifest: %w", err)
	}
	return true, d.sync()
}

// listSegments returns the ids of the segment files present in d.
func listSegments(d *storeDir) ([]uint64, error) {
	names, err := d.names()
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, n := range names {
		if id, ok := parseSegName(n); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// dirState is what the segment headers alone say about a directory.
type dirState struct {
	live     []entry  // valid segments not replaced by another valid one
	replaced []uint64 // valid but superseded segments (crash after merge)
	corrupt  []SegmentError
	maxID    uint64
}

// scanDir rebuilds the live set from the segment files themselves. It reads
// and verifies every segment, so it is only the fallback for a missing or
// corrupt manifest.
func scanDir(d *storeDir, log *slog.Logger) (*dirState, error) {
	ids, err := listSegments(d)
	if err != nil {
		return nil, err
	}
	st := &dirState{}
	var valid []entry
	superseded := make(map[uint64]bool)
	for _, id := range ids {
		st.maxID = max(st.maxID, id)
		path := d.join(segName(id))
		f, err := d.open(segName(id))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var s *segment
		if err == nil {
			s, err = mapSegment(f, path, true)
			f.Close()
		}
		if err != nil && !damaged(err) {
			return nil, fmt.Errorf("open segment: %w", err)
		}
		if err == nil && s.id != id {
			s.release()
			err = corruptf(path, "header id %d does not match the file name", s.id)
		}
		if err != nil {
			log.Warn("segment unreadable while rebuilding the manifest", "path", path, "err", err)
			st.corrupt = append(st.corrupt, SegmentError{Path: path, Err: err})
			continue
		}
		for _, r := range s.replaces {
			superseded[r] = true
		}
		valid = append(valid, entry{id: id, records: uint64(s.n), minFirst: s.minFirst, maxLast: s.maxLast, size: int64(len(s.data))})
		s.release()
	}
	for _, e := range valid {
		if superseded[e.id] {
			st.replaced = append(st.replaced, e.id)
		} else {
			st.live = append(st.live, e)
		}
	}
	return st, nil
}
