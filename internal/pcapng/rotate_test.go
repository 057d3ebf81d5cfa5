package pcapng

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"loupe/internal/safedir"
	"loupe/internal/testutil"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 25, 7, 40, 55, 0, time.UTC)} }

// Sizes worked out by hand from the format, for testOptions and
// rotPacket (so that a Writer that miscounts cannot agree with itself):
//
//	SHB  28 + comment (4+40) + shb_os (4+16) + shb_userappl (4+16) + end 4 = 116
//	IDB  16 + if_name "eth0" (4+4) + if_description "ifindex 2" (4+12) + if_tsresol (4+4) + end 4 + 4 = 56
//	EPB  32 + 100 data + epb_flags (4+4) + end 4 = 144
const (
	headLen = 116 + 56
	epbLen  = 144
)

func rotPacket(i int) *Packet {
	return &Packet{TimeNs: base + int64(i), Ifindex: 2, IfName: "eth0", Direction: Inbound, Data: frame(100, uint16(40000+i))}
}

func newRotator(t *testing.T, dir string, opts RotatorOptions) *Rotator {
	t.Helper()
	opts.Writer = testOptions()
	r, err := NewRotator(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func openSeries(t *testing.T, r *Rotator, prefix string) *Series {
	t.Helper()
	s, err := r.Open(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func write(t *testing.T, s *Series, p *Packet) {
	t.Helper()
	if err := s.WritePacket(p); err != nil {
		t.Fatal(err)
	}
}

// captures returns the capture files in dir (sorted by name) and what
// each holds, checking that each is a complete capture on its own.
func captures(t *testing.T, dir string) ([]string, []section) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var secs []section
	for _, e := range ents {
		if _, ok := parseName(e.Name()); !ok || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		s, err := parse(b)
		if err != nil || len(s) != 1 {
			t.Fatalf("%s: %d sections, %v", e.Name(), len(s), err)
		}
		names = append(names, e.Name())
		secs = append(secs, s[0])
	}
	return names, secs
}

// TestRotateSize: a file never grows past MaxFileBytes, and the packet that
// would take it past goes into the next one; a file exactly at the limit is
// fine; a packet larger than the limit gets a file of its own.
func TestRotateSize(t *testing.T) {
	for _, c := range []struct {
		limit   int64
		perFile int
	}{
		{headLen + 3*epbLen + epbLen - 1, 3}, // one byte short of 4
		{headLen + 4*epbLen, 4},              // exactly 4
		{headLen + epbLen - 1, 1},            // no packet fits: one each
	} {
		dir := t.TempDir()
		clk := newClock()
		r := newRotator(t, dir, RotatorOptions{MaxFileBytes: c.limit, Now: clk.now})
		s := openSeries(t, r, DefaultPrefix)
		const n = 10
		for i := range n {
			write(t, s, rotPacket(i))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		names, secs := captures(t, dir)
		if want := (n + c.perFile - 1) / c.perFile; len(names) != want {
			t.Fatalf("limit %d: %d files, want %d", c.limit, len(names), want)
		}
		i := 0
		for f, sec := range secs {
			want := min(c.perFile, n-i)
			if len(sec.packets) != want || len(sec.ifaces) != 1 || sec.ifaces[0].name != "eth0" || sec.userAppl != testAppl {
				t.Errorf("limit %d, %s: %d packets, interfaces %+v; want %d packets and eth0 announced again",
					c.limit, names[f], len(sec.packets), sec.ifaces, want)
			}
			for _, p := range sec.packets {
				if p.ts != uint64(base+int64(i)) {
					t.Errorf("limit %d, %s: packet at %d, want %d", c.limit, names[f], p.ts, base+int64(i))
				}
				i++
			}
			fi, _ := os.Stat(filepath.Join(dir, names[f]))
			if size := int64(headLen + want*epbLen); fi.Size() != size {
				t.Errorf("limit %d, %s: %d bytes, want %d", c.limit, names[f], fi.Size(), size)
			}
		}
		if st := r.Stats(); st.Packets != n || st.Files != uint64(len(names)) {
			t.Errorf("stats %+v", st)
		}
	}
}

// TestRotateAge: the packet that arrives when a file is MaxFileAge old
// starts a new one, named after the clock; Flush closes an aged file.
func TestRotateAge(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	r := newRotator(t, dir, RotatorOptions{MaxFileAge: time.Minute, Now: clk.now})
	s := openSeries(t, r, DefaultPrefix)
	step := func(d time.Duration, i int) {
		clk.t = clk.t.Add(d)
		write(t, s, rotPacket(i))
	}
	step(0, 0)
	step(59*time.Second, 1)
	step(999*time.Millisecond, 2) // 59.999 s: same file
	first := s.File()
	step(time.Millisecond, 3) // 60 s: new file
	if err := s.Flush(); err != nil || s.File() == "" {
		t.Fatalf("flush of a young file closed it: %q %v", s.File(), err)
	}
	clk.t = clk.t.Add(time.Minute)
	if err := s.Flush(); err != nil || s.File() != "" {
		t.Fatalf("flush of an aged file left %q open: %v", s.File(), err)
	}
	step(time.Second, 4)
	s.Close()
	names, secs := captures(t, dir)
	want := []string{
		"loupe-20261125T074055Z-000001.pcapng",
		"loupe-20261125T074155Z-000002.pcapng",
		"loupe-20261125T074256Z-000003.pcapng",
	}
	if !slices.Equal(names, want) || first != want[0] {
		t.Fatalf("files %q (first %q), want %q", names, first, want)
	}
	for i, n := range []int{3, 1, 1} {
		if len(secs[i].packets) != n {
			t.Errorf("%s: %d packets, want %d", names[i], len(secs[i].packets), n)
		}
	}
}

// TestRetentionMaxFiles: the oldest capture files go first, those of an
// earlier run and of other series included; a file being written is never
// removed; anything that is not a regular file with a capture file name is
// never touched; sequence numbers go on from the earlier run's.
func TestRetentionMaxFiles(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	old := []string{"loupe-20200101T000000Z-000041.pcapng", "conn-x-20200101T000001Z-000042.pcapng"}
	keep := []string{"notes.txt", "loupe-20200101T000000Z-000099.pcapng.bak", "loupe-2020-000001.pcapng"}
	for _, path := range append([]string{victim}, append(old, keep...)...) {
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := "loupe-20000101T000000Z-000001.pcapng" // oldest of all, but a symlink
	if err := os.Symlink(victim, filepath.Join(dir, link)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "loupe-20000101T000000Z-000002.pcapng"), 0o700); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, link, "loupe-20000101T000000Z-000002.pcapng")

	clk := newClock()
	r := newRotator(t, dir, RotatorOptions{MaxFileBytes: 1, MaxFiles: 3, Now: clk.now}) // a file per packet
	conn := openSeries(t, r, "conn-1")
	write(t, conn, rotPacket(0)) // the oldest new file, kept open
	main := openSeries(t, r, DefaultPrefix)
	for i := 1; i <= 4; i++ {
		clk.t = clk.t.Add(time.Second)
		write(t, main, rotPacket(i))
	}
	conn.Flush()
	main.Flush()
	names, _ := captures(t, dir)
	want := []string{"conn-1-20261125T074055Z-000043.pcapng", "loupe-20261125T074058Z-000046.pcapng", "loupe-20261125T074059Z-000047.pcapng"}
	if !slices.Equal(names, want) {
		t.Fatalf("kept %q, want %q", names, want)
	}
	// Once closed, the open file is the oldest and goes with the next one.
	conn.Close()
	clk.t = clk.t.Add(time.Second)
	write(t, main, rotPacket(5))
	main.Flush()
	names, _ = captures(t, dir)
	want = []string{"loupe-20261125T074058Z-000046.pcapng", "loupe-20261125T074059Z-000047.pcapng", "loupe-20261125T074100Z-000048.pcapng"}
	if !slices.Equal(names, want) {
		t.Fatalf("kept %q, want %q", names, want)
	}
	if st := r.Stats(); st.Removed != 5 || st.Files != 6 {
		t.Errorf("stats %+v, want 5 removed of 6 started", st)
	}
	for _, n := range keep {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s was touched: %v", n, err)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "x" {
		t.Errorf("symlink target: %q %v", b, err)
	}
}

// TestRetentionMaxBytes: files go, oldest first, until the total fits,
// counting what the open file has gathered and not yet written.
func TestRetentionMaxBytes(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	const full = headLen + 3*epbLen // 604
	r := newRotator(t, dir, RotatorOptions{MaxFileBytes: full, MaxBytes: 2*full + 100, Now: clk.now})
	s := openSeries(t, r, DefaultPrefix)
	for i := range 6 { // two full files: 1208 bytes
		write(t, s, rotPacket(i))
	}
	s.Flush()
	if names, _ := captures(t, dir); len(names) != 2 || r.Stats().Removed != 0 {
		t.Fatalf("%d files, %d removed, before the limit is reached; want 2, 0", len(names), r.Stats().Removed)
	}
	// The third file starts with its section header (116 bytes) gathered:
	// 1324 > 1308, so the first file goes.
	write(t, s, rotPacket(6))
	s.Flush()
	names, secs := captures(t, dir)
	if len(names) != 2 || !strings.HasSuffix(names[0], "-000002.pcapng") || r.Stats().Removed != 1 {
		t.Fatalf("kept %q, removed %d; want files 2 and 3", names, r.Stats().Removed)
	}
	if p := secs[0].packets[0].ts; p != uint64(base+3) {
		t.Errorf("oldest kept file starts with packet at %d, want %d", p, base+3)
	}
}

// TestModes: the directory (and missing parents) are created 0700, files
// 0600, whatever the umask lets through.
func TestModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	top := filepath.Join(t.TempDir(), "a")
	dir := filepath.Join(top, "b", "captures")
	r := newRotator(t, dir, RotatorOptions{})
	s := openSeries(t, r, DefaultPrefix)
	write(t, s, rotPacket(0))
	s.Close()
	for _, d := range []string{top, filepath.Dir(dir), dir} {
		if fi, err := os.Stat(d); err != nil || fi.Mode() != os.ModeDir|0o700 {
			t.Errorf("%s: %v %v, want drwx------", d, fi.Mode(), err)
		}
	}
	names, _ := captures(t, dir)
	if len(names) != 1 {
		t.Fatalf("files %q", names)
	}
	if fi, err := os.Stat(filepath.Join(dir, names[0])); err != nil || fi.Mode() != 0o600 {
		t.Errorf("%s: %v %v, want -rw-------", names[0], fi.Mode(), err)
	}
}

// TestRefuseSymlinkDir: the directory itself must not be a symbolic link,
// dangling or not; nothing is created behind it.
func TestRefuseSymlinkDir(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link": real, "dangling": filepath.Join(base, "nowhere")} {
		link := filepath.Join(base, name)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if r, err := NewRotator(link, RotatorOptions{}); !errors.Is(err, safedir.ErrSymlink) {
			if r != nil {
				r.Close()
			}
			t.Errorf("%s: %v, want a refusal of the symlink", name, err)
		}
	}
	if ents, _ := os.ReadDir(real); len(ents) != 0 {
		t.Errorf("written behind the link: %v", ents)
	}
	if _, err := os.Lstat(filepath.Join(base, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dangling link's target was created: %v", err)
	}
}

// TestRefuseUnsafeDir: a directory another user owns, or that group or
// others may write, is refused; so is a file.
func TestRefuseUnsafeDir(t *testing.T) {
	testutil.RequirePrivileged(t) // chown to another uid
	parent := t.TempDir()
	foreign := filepath.Join(parent, "foreign")
	shared := filepath.Join(parent, "shared")
	file := filepath.Join(parent, "file")
	for _, d := range []string{foreign, shared} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, why := range map[string]string{
		foreign: "owned by uid 65534",
		shared:  "writable by group or others (mode 0770)",
		file:    "is not a directory",
	} {
		r, err := NewRotator(path, RotatorOptions{})
		if err == nil {
			r.Close()
		}
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want %q", filepath.Base(path), err, why)
		}
	}
	for _, d := range []string{foreign, shared} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s: written into: %v", d, ents)
		}
	}
}

// TestPrefixes: bad prefixes and a second series of one prefix are
// refused; names parse back and sort in time order.
func TestPrefixes(t *testing.T) {
	r := newRotator(t, t.TempDir(), RotatorOptions{})
	for _, p := range []string{"", ".hidden", "-x", "a/b", "../x", "a b", "é", strings.Repeat("x", 65)} {
		if s, err := r.Open(p); err == nil {
			s.Close()
			t.Errorf("prefix %q accepted", p)
		}
	}
	s := openSeries(t, r, "trig-http.500_conn-7")
	if _, err := r.Open("trig-http.500_conn-7"); err == nil {
		t.Error("a second series of one prefix was opened")
	}
	s.Close()
	openSeries(t, r, "trig-http.500_conn-7").Close() // free again

	t0 := time.Date(2026, 11, 25, 7, 40, 55, 0, time.UTC)
	var names []string
	for i, d := range []time.Duration{0, 0, time.Second, time.Hour, 400 * 24 * time.Hour} {
		names = append(names, fileName("trig-1", t0.Add(d), uint64(998+i)))
	}
	if !slices.IsSorted(names) {
		t.Errorf("names do not sort in time order: %q", names)
	}
	if names[0] != "trig-1-20261125T074055Z-000998.pcapng" {
		t.Errorf("name %q", names[0])
	}
	if f, ok := parseName(names[2]); !ok || f.seq != 1000 || !f.t.Equal(t0.Add(time.Second)) {
		t.Errorf("parse %q: %+v %v", names[2], f, ok)
	}
	for _, bad := range []string{"loupe-20261125T074055Z-00001.pcapng", "loupe-20261125T074055Z-000001.pcap",
		"-20261125T074055Z-000001.pcapng", "loupe-20261325T074055Z-000001.pcapng", "loupe_20261125T074055Z-000001.pcapng"} {
		if _, ok := parseName(bad); ok {
			t.Errorf("%q parsed as a capture file name", bad)
		}
	}
}

// TestConcurrentSeries: series written from several goroutines, with
// flushes and retention running meanwhile, lose and mix up no packet (run
// with -race).
func TestConcurrentSeries(t *testing.T) {
	dir := t.TempDir()
	r := newRotator(t, dir, RotatorOptions{MaxFileBytes: 2000, MaxFiles: 1000})
	const writers, each = 4, 300
	var wg sync.WaitGroup
	for g := range writers {
		s := openSeries(t, r, fmt.Sprintf("conn-%d", g))
		wg.Go(func() {
			for i := range each {
				p := rotPacket(i)
				p.Ifindex = uint32(g)
				if err := s.WritePacket(p); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					s.Flush()
					r.Stats()
				}
			}
			s.Close()
		})
	}
	wg.Wait()
	_, secs := captures(t, dir)
	seen := make([]int, writers)
	for _, sec := range secs {
		for _, p := range sec.packets {
			g := int(sec.ifaces[p.ifid].desc[len("ifindex ")] - '0')
			if want := uint64(base + int64(seen[g])); p.ts != want {
				t.Fatalf("series %d: packet at %d, want %d", g, p.ts, want)
			}
			seen[g]++
		}
	}
	for g, n := range seen {
		if n != each {
			t.Errorf("series %d: %d packets, want %d", g, n, each)
		}
	}
}

// TestRecoverFromFullDisk: a write that fails closes the file; once there
// is room again the next packet starts a new, complete file.
func TestRecoverFromFullDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, "1m")
	r := newRotator(t, dir, RotatorOptions{})
	s := openSeries(t, r, DefaultPrefix)
	filler := filepath.Join(dir, "filler")
	testutil.Fill(t, filler)
	write(t, s, rotPacket(0)) // gathered, not yet written
	if err := s.Flush(); !errors.Is(err, syscall.ENOSPC) || s.File() != "" {
		t.Fatalf("flush on a full disk: %v, file %q", err, s.File())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	write(t, s, rotPacket(1))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	cur := s.File()
	b, err := os.ReadFile(filepath.Join(dir, cur))
	if err != nil {
		t.Fatal(err)
	}
	if secs, err := parse(b); err != nil || len(secs[0].packets) != 1 || secs[0].packets[0].ts != uint64(base+1) {
		t.Errorf("%s after the disk had room again: %+v %v", cur, secs, err)
	}
	// A write-through that fails inside WritePacket closes the file too.
	testutil.Fill(t, filler)
	var err2 error
	for i := 0; err2 == nil && i < 10000; i++ {
		err2 = s.WritePacket(rotPacket(i))
	}
	if !errors.Is(err2, syscall.ENOSPC) || s.File() != "" {
		t.Fatalf("writes on a full disk: %v, file %q", err2, s.File())
	}
}
