package store

// The latency log: per-hop latency records (hop.Request) kept beside the
// flows in the same store directory, in a file family of their own, so
// that `loupe latency` reads them while the agent runs and after it
// stopped. Records are few (a request's first segment, a sampled segment)
// and read whole, so the format is a log, not columns:
//
//	hop-<id as %016x>.lhop
//	0   8   magic "LOUPEHOP"
//	8   1   format version (2; 1 is still read)
//	9   7   reserved (0)
//	16      records, each: u32 length L, u32 CRC32C of the payload, L bytes
//	        of payload: the record (hop.Request) in its binary form
//	        (hop.Request.AppendBinary); in version 1, as one JSON object
//
// Integers are little endian. The writer appends each batch of records
// with one write(2) to the newest file and starts a new file past FileSize or at
// every open, so a file is only ever appended to by one writer and an
// older file never changes. A reader stops at the first record that is
// cut short (the writer is writing it, or crashed during it) or fails its
// CRC, and counts it. Retention deletes whole files: those last written
// (mtime) before now-Retention, then the oldest while the files take more
// than MaxSize, never the one being written. The writer holds its own
// lock, HOPLOCK, since the flow store's writer holds LOCK.

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"loupe/internal/hop"
)

const (
	hopMagic = "LOUPEHOP"
	// hopVersion is what the writer writes: records in binary. Version 1
	// files are read as well: records in JSON, about 3.5 times the bytes
	// (a three-hop record: 788 against 217), and in BenchmarkPipeline 4.4
	// µs a request against 3.0 to match and store.
	hopVersion     = 2
	hopVersionJSON = 1
	hopHeaderSize  = 16
	hopPrefix      = "hop-"
	hopSuffix      = ".lhop"
	hopLockName    = "HOPLOCK"
	// DefaultHopFileSize is where the writer starts a new file.
	DefaultHopFileSize = 4 << 20
	// maxHopRecord bounds one record: a path of a few dozen hooks is a few
	// KB; anything larger is damage.
	maxHopRecord = 1 << 20
	// hopMaintainEvery is how often Append applies retention.
	hopMaintainEvery = time.Minute
)

func hopName(id uint64) string { return fmt.Sprintf("%s%016x%s", hopPrefix, id, hopSuffix) }

func parseHopName(name string) (uint64, bool) {
	h, ok := strings.CutPrefix(name, hopPrefix)
	if !ok {
		return 0, false
	}
	if h, ok = strings.CutSuffix(h, hopSuffix); !ok || len(h) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(h, 16, 64)
	return id, err == nil
}

func isHopName(name string) bool {
	_, ok := parseHopName(name)
	return ok || name == hopLockName
}

// HopOptions configure a latency log writer.
type HopOptions struct {
	Retention time.Duration // 0: keep by age forever
	MaxSize   int64         // 0: no size bound
	FileSize  int64         // default DefaultHopFileSize
	Now       func() time.Time
	Logger    *slog.Logger
}

// HopStats are a latency log writer's counters.
type HopStats struct {
	Files          int
	Bytes          int64
	Records        uint64 // appended since Open
	WriteErrors    uint64 // records lost to a failed write
	ExpiredFiles   uint64
	ExpiredBytes   uint64
	ExpiredRecords uint64 // unknown for files of an earlier run: not counted
}

// HopLog appends latency records to a store directory. Safe for
// concurrent use.
type HopLog struct {
	dir  *storeDir
	opts HopOptions
	log  *slog.Logger
	lock *os.File

	mu       sync.Mutex
	cur      *os.File
	curID    uint64
	curSize  int64
	files    map[uint64]hopFile
	nextID   uint64
	lastMain time.Time
	stats    HopStats
	// buf holds the records of an Append being encoded.
	buf    []byte
	closed bool
}

type hopFile struct {
	size    int64
	records uint64
	mtime   time.Time
}

// OpenHopLog opens the latency log of the store directory dir, creating
// the directory if needed, with the same checks as the flow store's
// writer (Open): dir must be a store or empty, private to the agent's
// user. Only one writer may hold it (ErrLocked).
func OpenHopLog(dir string, o HopOptions) (*HopLog, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FileSize <= 0 {
		o.FileSize = DefaultHopFileSize
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("latency log: create directory: %w", err)
	}
	d, err := openDir(dir)
	if err != nil {
		return nil, fmt.Errorf("latency log: %w", err)
	}
	h, err := openHopLog(d, o)
	if err != nil {
		d.close()
		return nil, err
	}
	return h, nil
}

func openHopLog(d *storeDir, o HopOptions) (*HopLog, error) {
	kind, why, err := d.classify()
	if err != nil {
		return nil, fmt.Errorf("latency log: %w", err)
	}
	if kind == kindOther {
		return nil, fmt.Errorf("latency log: %s is %w: %s; refusing to write there", d.path, ErrNotStore, why)
	}
	if err := d.checkWritable(); err != nil {
		return nil, fmt.Errorf("latency log: refusing %w", err)
	}
	lock, err := lockFile(d, hopLockName)
	if err != nil {
		return nil, err
	}
	h := &HopLog{dir: d, opts: o, log: o.Logger.With("component", "store.latency", "dir", d.path), lock: lock, files: map[uint64]hopFile{}, nextID: 1}
	ids, err := listHopFiles(d)
	if err != nil {
		releaseLock(lock)
		return nil, err
	}
	for _, id := range ids {
		st, err := d.lstat(hopName(id))
		if err != nil {
			continue
		}
		h.files[id] = hopFile{size: st.Size, mtime: time.Unix(st.Mtim.Unix())}
		h.nextID = max(h.nextID, id+1)
	}
	h.maintain()
	return h, nil
}

func listHopFiles(d *storeDir) ([]uint64, error) {
	names, err := d.names()
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, n := range names {
		if id, ok := parseHopName(n); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// Append writes records at the end of the log, all in one write(2) per
// file they go to: a write for each record cost more than encoding it,
// and a record is only ever appended whole or cut at the end of the file.
// A record that cannot be written is counted (WriteErrors) and the error
// returned; the next Append starts a new file.
func (h *HopLog) Append(rs ...*hop.Request) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	var errs []error
	h.buf = h.buf[:0]
	for _, r := range rs {
		var err error
		if h.buf, err = EncodeHop(h.buf, r); err != nil {
			h.stats.WriteErrors++
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, h.appendEncoded(h.buf))...)
}

// AppendEncoded is Append of records EncodeHop put in b, one after the
// other: for a caller that encodes each record as it comes, rather than
// keep it until the write.
func (h *HopLog) AppendEncoded(b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	return h.appendEncoded(b)
}

// EncodeHop appends r to b as one record of the latency log: length,
// checksum, the record's binary form.
func EncodeHop(b []byte, r *hop.Request) ([]byte, error) {
	at := len(b)
	b = append(b, make([]byte, 8)...)
	b = r.AppendBinary(b)
	payload := b[at+8:]
	if len(payload) > maxHopRecord {
		return b[:at], fmt.Errorf("latency log: a record of %d bytes", len(payload))
	}
	binary.LittleEndian.PutUint32(b[at:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[at+4:], crc32c(payload))
	return b, nil
}

// appendEncoded writes the records of b, a write per file they go to: a
// file takes records while it is under FileSize. h.mu is held.
func (h *HopLog) appendEncoded(b []byte) error {
	var errs []error
	for len(b) > 0 {
		if h.cur == nil || h.curSize >= h.opts.FileSize {
			if err := h.rotate(); err != nil {
				h.stats.WriteErrors += uint64(wholeRecords(b))
				errs = append(errs, err)
				break
			}
		}
		n, records := 0, 0
		for n+8 <= len(b) && (records == 0 || h.curSize+int64(n) < h.opts.FileSize) {
			l := 8 + int(binary.LittleEndian.Uint32(b[n:]))
			if l > len(b)-n {
				break
			}
			n, records = n+l, records+1
		}
		if records == 0 {
			// Not a record EncodeHop made: nothing of it is written.
			h.stats.WriteErrors++
			errs = append(errs, errors.New("latency log: a record cut short"))
			break
		}
		if err := h.write(b[:n], records); err != nil {
			errs = append(errs, err)
		}
		b = b[n:]
	}
	if now := h.opts.Now(); now.Sub(h.lastMain) >= hopMaintainEvery {
		h.maintain()
	}
	return errors.Join(errs...)
}

// write writes records, whole records of b, to the current file. The
// records a failed write did not take whole are counted lost.
func (h *HopLog) write(b []byte, records int) error {
	n, err := h.cur.Write(b)
	h.curSize += int64(n)
	written := records
	if err != nil {
		written = wholeRecords(b[:n])
		h.stats.WriteErrors += uint64(records - written)
		// A record cut short ends the file for readers: start another.
		h.finishFile()
		err = fmt.Errorf("latency log: write %s: %w", hopName(h.curID), err)
	}
	f := h.files[h.curID]
	f.size, f.records, f.mtime = h.curSize, f.records+uint64(written), h.opts.Now()
	h.files[h.curID] = f
	h.stats.Records += uint64(written)
	return err
}

// wholeRecords counts the records b holds whole.
func wholeRecords(b []byte) int {
	n := 0
	for len(b) >= 8 {
		l := uint64(binary.LittleEndian.Uint32(b)) + 8
		if uint64(len(b)) < l {
			break
		}
		b, n = b[l:], n+1
	}
	return n
}

// rotate closes the current file and creates the next.
func (h *HopLog) rotate() error {
	h.finishFile()
	id := h.nextID
	f, err := h.dir.openFile(hopName(id), syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_APPEND, fileMode)
	if err != nil {
		return fmt.Errorf("latency log: create %s: %w", hopName(id), err)
	}
	h.nextID++
	hdr := make([]byte, hopHeaderSize)
	copy(hdr, hopMagic)
	hdr[8] = hopVersion
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		return fmt.Errorf("latency log: write %s: %w", hopName(id), err)
	}
	h.cur, h.curID, h.curSize = f, id, hopHeaderSize
	h.files[id] = hopFile{size: hopHeaderSize, mtime: h.opts.Now()}
	return nil
}

// finishFile syncs and closes the current file, if any.
func (h *HopLog) finishFile() {
	if h.cur == nil {
		return
	}
	if err := h.cur.Sync(); err != nil {
		h.log.Warn("latency log: sync failed", "file", hopName(h.curID), "err", err)
	}
	h.cur.Close()
	h.cur = nil
}

// maintain applies retention; h.mu must be held (or h not shared yet).
func (h *HopLog) maintain() {
	now := h.opts.Now()
	h.lastMain = now
	type idFile struct {
		id uint64
		hopFile
	}
	var files []idFile
	var total int64
	for id, f := range h.files {
		files = append(files, idFile{id, f})
		total += f.size
	}
	slices.SortFunc(files, func(a, b idFile) int { return cmp.Compare(a.id, b.id) })
	for _, f := range files {
		if h.cur != nil && f.id == h.curID {
			continue
		}
		old := h.opts.Retention > 0 && f.mtime.Before(now.Add(-h.opts.Retention))
		big := h.opts.MaxSize > 0 && total > h.opts.MaxSize
		if !old && !big {
			continue
		}
		if err := h.dir.remove(hopName(f.id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			h.log.Warn("latency log: retention could not delete a file", "file", hopName(f.id), "err", err)
			continue
		}
		delete(h.files, f.id)
		total -= f.size
		h.stats.ExpiredFiles++
		h.stats.ExpiredBytes += uint64(f.size)
		h.stats.ExpiredRecords += f.records
	}
}

// Stats returns the writer's counters and the log's size.
func (h *HopLog) Stats() HopStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats
	s.Files = len(h.files)
	for _, f := range h.files {
		s.Bytes += f.size
	}
	return s
}

// Close syncs the current file and releases the lock.
func (h *HopLog) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	h.closed = true
	h.finishFile()
	releaseLock(h.lock)
	h.dir.close()
	return nil
}

// HopReport says what ReadHops read and skipped.
type HopReport struct {
	Files, Records int
	// Torn are files whose last record was cut short (being written, or
	// a crash); Corrupt are files with a record that failed its checksum
	// or did not decode: what follows it in the file is not read.
	Torn, Corrupt []string
}

// ReadHops hands fn the latency records of the store at dir whose Time is
// not before since (the zero time: all), file by file in the order they
// were written. It takes no lock: the writer only appends.
func ReadHops(dir string, since time.Time, fn func(*hop.Request) error) (HopReport, error) {
	var rep HopReport
	d, err := openDir(dir)
	if err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	defer d.close()
	switch kind, why, err := d.classify(); {
	case err != nil:
		return rep, fmt.Errorf("store: %w", err)
	case kind == kindEmpty:
		return rep, fmt.Errorf("store: %s is %w: it is empty", dir, ErrNotStore)
	case kind == kindOther:
		return rep, fmt.Errorf("store: %s is %w: %s", dir, ErrNotStore, why)
	}
	ids, err := listHopFiles(d)
	if err != nil {
		return rep, err
	}
	for _, id := range ids {
		name := hopName(id)
		st, err := d.lstat(name)
		if err != nil {
			continue // deleted by retention meanwhile
		}
		if !since.IsZero() && time.Unix(st.Mtim.Unix()).Before(since) {
			continue // every record was made before its last write
		}
		f, err := d.openRegular(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return rep, err
		}
		b, err := io.ReadAll(io.LimitReader(f, maxHopFile))
		f.Close()
		if err != nil {
			return rep, fmt.Errorf("store: read %s: %w", d.join(name), err)
		}
		rep.Files++
		if err := readHopFile(b, name, since, &rep, fn); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// maxHopFile bounds what a reader loads of one file: a file grows past
// FileSize by at most one record.
const maxHopFile = 1 << 30

func readHopFile(b []byte, name string, since time.Time, rep *HopReport, fn func(*hop.Request) error) error {
	if len(b) < hopHeaderSize || !bytes.HasPrefix(b, []byte(hopMagic)) || (b[8] != hopVersion && b[8] != hopVersionJSON) {
		if len(b) < hopHeaderSize {
			rep.Torn = append(rep.Torn, name)
		} else {
			rep.Corrupt = append(rep.Corrupt, name)
		}
		return nil
	}
	decode := decodeHopJSON
	if b[8] == hopVersion {
		decode = hop.DecodeBinary
	}
	for b = b[hopHeaderSize:]; len(b) > 0; {
		if len(b) < 8 {
			rep.Torn = append(rep.Torn, name)
			return nil
		}
		n, sum := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		if n > maxHopRecord {
			rep.Corrupt = append(rep.Corrupt, name)
			return nil
		}
		if uint64(len(b)-8) < uint64(n) {
			rep.Torn = append(rep.Torn, name)
			return nil
		}
		payload := b[8 : 8+n]
		b = b[8+n:]
		if crc32c(payload) != sum {
			rep.Corrupt = append(rep.Corrupt, name)
			return nil
		}
		r, err := decode(payload)
		if err != nil {
			rep.Corrupt = append(rep.Corrupt, name)
			return nil
		}
		if !since.IsZero() && r.Time.Before(since) {
			continue
		}
		rep.Records++
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// decodeHopJSON decodes a version 1 record.
func decodeHopJSON(b []byte) (*hop.Request, error) {
	r := &hop.Request{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	return r, nil
}
