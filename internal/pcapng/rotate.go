package pcapng

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"loupe/internal/safedir"
)

// Capture files hold packet payloads, so they are private to the agent's
// user (and root); the directory is opened once and every file operation
// goes through it (see internal/safedir), so a link planted in it never
// redirects a write or a deletion.
const (
	dirMode  = 0o700
	fileMode = 0o600
)

// DefaultPrefix names the files of a capture's main series.
const DefaultPrefix = "loupe"

// fileSuffix ends every capture file name; timeLayout is the sortable UTC
// time in it.
const (
	fileSuffix = ".pcapng"
	timeLayout = "20060102T150405Z"
)

// RotatorOptions configure a Rotator. A zero limit is no limit.
type RotatorOptions struct {
	// Writer configures the section every file starts with.
	Writer Options
	// MaxFileBytes: a packet that would take a file past this size goes
	// into a new file instead (a file always takes its first packet, so
	// it exceeds the limit only when that packet alone does).
	MaxFileBytes int64
	// MaxFileAge: a file this old gets no more packets; the next one
	// starts a new file, and Flush closes it.
	MaxFileAge time.Duration
	// MaxFiles and MaxBytes bound the capture files kept in the directory
	// (of every series, including those of an earlier run): when a file
	// is started, the oldest are removed until both hold. Files being
	// written are never removed, so MaxBytes can be exceeded by what the
	// open files grow by before they rotate: keep MaxFileBytes well under
	// MaxBytes.
	MaxFiles int
	MaxBytes int64
	// Now is the clock for file names and ages (tests inject one).
	Now func() time.Time
	// Logger receives removals and failures, tagged component=pcapng.
	Logger *slog.Logger
}

// RotatorStats count what a Rotator did.
type RotatorStats struct {
	Files   uint64 // files started
	Removed uint64 // files removed by retention
	Packets uint64 // packets written
}

// Rotator writes capture files into one directory, in series: a series
// (Open) is a sequence of files <prefix>-<UTC time>-<seq>.pcapng, each a
// complete capture with its own section header and interfaces, started
// when the previous one reached its size or age limit. Names sort by start
// time, then by a sequence number that keeps growing across runs. A capture
// usually writes one series (DefaultPrefix) with each packet's trigger in
// its comment, and may open one for a single trigger or connection. All
// series share the directory's retention. A Rotator and its series are
// safe for concurrent use.
type Rotator struct {
	opts RotatorOptions
	dir  *safedir.Dir
	log  *slog.Logger

	mu     sync.Mutex
	seq    uint64
	series map[string]*Series
	stats  RotatorStats
	closed bool
}

// ErrClosed is returned by a closed Rotator or Series.
var ErrClosed = errors.New("pcapng: closed")

// NewRotator writes capture files under dir, creating it (mode 0700, and
// missing parents) if needed. It refuses a dir that is a symbolic link, is
// owned by another user, or that group or others may write into: they
// could plant names the rotator would then write or remove. Files of an
// earlier run count towards the retention limits, which are applied at
// once.
func NewRotator(dir string, opts RotatorOptions) (*Rotator, error) {
	switch {
	case opts.MaxFileBytes < 0:
		return nil, fmt.Errorf("pcapng: MaxFileBytes %d is negative", opts.MaxFileBytes)
	case opts.MaxFileAge < 0:
		return nil, fmt.Errorf("pcapng: MaxFileAge %s is negative", opts.MaxFileAge)
	case opts.MaxFiles < 0:
		return nil, fmt.Errorf("pcapng: MaxFiles %d is negative", opts.MaxFiles)
	case opts.MaxBytes < 0:
		return nil, fmt.Errorf("pcapng: MaxBytes %d is negative", opts.MaxBytes)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d, err := safedir.OpenNoFollow(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, dirMode); err != nil {
			return nil, fmt.Errorf("pcapng: create directory: %w", err)
		}
		d, err = safedir.OpenNoFollow(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("pcapng: capture directory: %w", err)
	}
	if err := d.CheckPrivate(); err != nil {
		d.Close()
		return nil, fmt.Errorf("pcapng: refusing capture directory: %w: "+
			"another user could plant files or links there; use a directory only the agent's user owns and can write", err)
	}
	r := &Rotator{
		opts:   opts,
		dir:    d,
		log:    opts.Logger.With("component", "pcapng", "dir", dir),
		seq:    1,
		series: make(map[string]*Series),
	}
	files, err := r.list()
	if err != nil {
		d.Close()
		return nil, err
	}
	for _, f := range files {
		r.seq = max(r.seq, f.seq+1)
	}
	r.retain()
	return r, nil
}

// Dir is the capture directory.
func (r *Rotator) Dir() string { return r.dir.Path() }

// Stats returns the counters so far.
func (r *Rotator) Stats() RotatorStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Close closes every series, then the directory.
func (r *Rotator) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	var errs []error
	for _, s := range r.series {
		errs = append(errs, s.closeLocked())
	}
	r.closed = true
	errs = append(errs, r.dir.Close())
	return errors.Join(errs...)
}

// ValidPrefix reports whether prefix can start a capture file name: 1 to
// 64 ASCII letters, digits, '.', '_' or '-', starting with a letter or
// digit (so never a hidden file, a path, or a name a shell mangles).
func ValidPrefix(prefix string) bool {
	if len(prefix) == 0 || len(prefix) > 64 {
		return false
	}
	for i, c := range []byte(prefix) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// Open starts a series of files named <prefix>-<time>-<seq>.pcapng. Its
// first file is created with its first packet. A prefix names one open
// series at a time.
func (r *Rotator) Open(prefix string) (*Series, error) {
	if !ValidPrefix(prefix) {
		return nil, fmt.Errorf("pcapng: invalid file prefix %q (1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit)", prefix)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if _, ok := r.series[prefix]; ok {
		return nil, fmt.Errorf("pcapng: a series with prefix %q is already open", prefix)
	}
	s := &Series{r: r, prefix: prefix}
	r.series[prefix] = s
	return s, nil
}

// Series is one sequence of rotating files of a Rotator.
type Series struct {
	r      *Rotator
	prefix string
	w      *Writer // kept across files, for its buffers
	f      *os.File
	name   string
	opened time.Time
	n      int // packets in the current file
	closed bool
}

// File is the name (in the Rotator's Dir) of the file being written, ""
// between files.
func (s *Series) File() string {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return s.name
}

// WritePacket writes p into the series' current file, first starting a
// new file if the current one is too old or p would take it past
// MaxFileBytes. After a failed write the file is closed, and the next
// packet starts a new one.
func (s *Series) WritePacket(p *Packet) error {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.closed || r.closed {
		return ErrClosed
	}
	now := r.opts.Now()
	if s.f != nil && (s.aged(now) || s.full(p)) {
		if err := s.closeFile(); err != nil {
			return err
		}
	}
	if s.f == nil {
		if err := s.openFile(now); err != nil {
			return err
		}
	}
	if err := s.w.WritePacket(p); err != nil {
		if s.w.err != nil { // the file is broken, not just the packet
			s.closeFile()
		}
		return err
	}
	s.n++
	r.stats.Packets++
	return nil
}

// Flush writes the current file's gathered packets to it, so readers see
// them, and closes it if it reached MaxFileAge (a quiet series does not
// keep a stale file open). Call it regularly, e.g. every second.
func (s *Series) Flush() error {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.closed || r.closed {
		return ErrClosed
	}
	if s.f == nil {
		return nil
	}
	if s.aged(r.opts.Now()) {
		return s.closeFile()
	}
	if err := s.w.Flush(); err != nil {
		s.closeFile()
		return err
	}
	return nil
}

// Close writes out and closes the current file, and frees the prefix.
func (s *Series) Close() error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.closed || s.r.closed {
		return nil
	}
	return s.closeLocked()
}

func (s *Series) closeLocked() error {
	s.closed = true
	delete(s.r.series, s.prefix)
	if s.f == nil {
		return nil
	}
	return s.closeFile()
}

func (s *Series) aged(now time.Time) bool {
	return s.r.opts.MaxFileAge > 0 && now.Sub(s.opened) >= s.r.opts.MaxFileAge
}

func (s *Series) full(p *Packet) bool {
	limit := s.r.opts.MaxFileBytes
	return limit > 0 && s.n > 0 && s.w.Size()+int64(s.w.PacketSize(p)) > limit
}

// openFile creates the series' next file and applies retention. O_EXCL
// fails on any existing name (a planted link included); the sequence
// number then moves on.
func (s *Series) openFile(now time.Time) error {
	r := s.r
	var f *os.File
	var name string
	for tries := 0; ; tries++ {
		name = fileName(s.prefix, now, r.seq)
		r.seq++
		var err error
		f, err = r.dir.Create(name, fileMode)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || tries == 99 {
			return fmt.Errorf("pcapng: create capture file: %w", err)
		}
	}
	if s.w == nil {
		s.w = NewWriter(f, r.opts.Writer)
	} else {
		s.w.Reset(f)
	}
	s.f, s.name, s.opened, s.n = f, name, now, 0
	r.stats.Files++
	r.retain()
	return nil
}

// closeFile writes out and closes the current file.
func (s *Series) closeFile() error {
	err := s.w.Flush()
	if cerr := s.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("pcapng: close %s: %w", s.name, cerr)
	}
	s.f, s.name = nil, ""
	return err
}

func fileName(prefix string, t time.Time, seq uint64) string {
	return fmt.Sprintf("%s-%s-%06d%s", prefix, t.UTC().Format(timeLayout), seq, fileSuffix)
}

// capFile is a capture file in the directory.
type capFile struct {
	name string
	t    time.Time
	seq  uint64
	size int64
}

// parseName parses <prefix>-<time>-<seq>.pcapng.
func parseName(name string) (capFile, bool) {
	rest, ok := strings.CutSuffix(name, fileSuffix)
	if !ok {
		return capFile{}, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 || len(rest)-i-1 < 6 {
		return capFile{}, false
	}
	seq, err := strconv.ParseUint(rest[i+1:], 10, 64)
	if err != nil {
		return capFile{}, false
	}
	rest = rest[:i]
	j := len(rest) - len(timeLayout) - 1
	if j < 1 || rest[j] != '-' || !ValidPrefix(rest[:j]) {
		return capFile{}, false
	}
	t, err := time.Parse(timeLayout, rest[j+1:])
	if err != nil {
		return capFile{}, false
	}
	return capFile{name: name, t: t, seq: seq}, true
}

// list returns the directory's capture files (regular files with a
// capture file name; anything else is never touched), oldest first.
func (r *Rotator) list() ([]capFile, error) {
	names, err := r.dir.Names()
	if err != nil {
		return nil, fmt.Errorf("pcapng: list capture directory: %w", err)
	}
	var files []capFile
	for _, n := range names {
		f, ok := parseName(n)
		if !ok {
			continue
		}
		st, err := r.dir.Lstat(n)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		f.size = st.Size
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b capFile) int {
		return cmp.Or(a.t.Compare(b.t), cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name))
	})
	return files, nil
}

// retain removes the oldest capture files until MaxFiles and MaxBytes
// hold, never one being written. A failure is logged, not returned: the
// capture goes on, and the next file retries.
func (r *Rotator) retain() {
	if r.opts.MaxFiles == 0 && r.opts.MaxBytes == 0 {
		return
	}
	files, err := r.list()
	if err != nil {
		r.log.Warn("retention skipped", "err", err)
		return
	}
	open := make(map[string]*Writer, len(r.series))
	for _, s := range r.series {
		if s.f != nil {
			open[s.name] = s.w
		}
	}
	count, total := len(files), int64(0)
	for i, f := range files {
		if w, ok := open[f.name]; ok {
			files[i].size = w.Size() // gathered bytes are on their way
		}
		total += files[i].size
	}
	for _, f := range files {
		if (r.opts.MaxFiles == 0 || count <= r.opts.MaxFiles) && (r.opts.MaxBytes == 0 || total <= r.opts.MaxBytes) {
			return
		}
		if _, ok := open[f.name]; ok {
			continue
		}
		switch err := r.dir.Remove(f.name); {
		case err == nil:
			r.stats.Removed++
			r.log.Debug("removed old capture file", "file", f.name, "bytes", f.size)
		case !errors.Is(err, fs.ErrNotExist): // (gone already is as good)
			r.log.Warn("cannot remove old capture file", "file", f.name, "err", err)
			continue
		}
		count--
		total -= f.size
	}
}

// FileInfo is a capture file of the rotator's directory.
type FileInfo struct {
	Name string    `json:"name"`
	Size int64     `json:"size"`
	Time time.Time `json:"time"` // when the file was started
}

// Files lists the directory's capture files, oldest first (the file
// being written among them, as far as it was flushed).
func (r *Rotator) Files() ([]FileInfo, error) {
	files, err := r.list()
	if err != nil {
		return nil, err
	}
	out := make([]FileInfo, len(files))
	for i, f := range files {
		out[i] = FileInfo{Name: f.name, Size: f.size, Time: f.t}
	}
	return out, nil
}

// OpenFile opens the capture file name for reading. Only a name Files
// lists is opened: a regular file with a capture file's name, directly in
// the directory, never through a symbolic link.
func (r *Rotator) OpenFile(name string) (*os.File, error) {
	if _, ok := parseName(name); !ok || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("pcapng: %q is not a capture file's name: %w", name, os.ErrNotExist)
	}
	f, err := r.dir.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("pcapng: %s is not a regular file: %w", name, os.ErrNotExist)
	}
	return f, nil
}
