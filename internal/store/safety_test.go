package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"loupe/internal/flow"
	"loupe/internal/store"
	"loupe/internal/testutil"
)

// snapshotFiles returns every name in dir (recursively) with its mode and
// content, so that a test can prove nothing was written, renamed or
// deleted.
func snapshotFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		desc := fi.Mode().String()
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d:\n got %v\nwant %v", what, len(got), len(want), got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s is %q, want %q", what, k, got[k], v)
		}
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// TestNotAStoreRefused: a directory that is not a store is refused by the
// writer and by readers, and nothing in it is touched, not even the names a
// store would clean up (.tmp-*, seg-*.lseg).
func TestNotAStoreRefused(t *testing.T) {
	cases := map[string]func(dir string){
		"foreign files": func(dir string) {
			writeFile(t, filepath.Join(dir, "notes.txt"), "keep me", 0o600)
			writeFile(t, filepath.Join(dir, ".tmp-0123456789abcdef-MANIFEST"), "someone else's temp file", 0o600)
			writeFile(t, filepath.Join(dir, "seg-0000000000000001.lseg"), "not a segment", 0o600)
		},
		"store names without a valid segment": func(dir string) {
			writeFile(t, filepath.Join(dir, "seg-0000000000000002.lseg"), "not a segment either", 0o600)
			writeFile(t, filepath.Join(dir, ".tmp-seg-0000000000000003.lseg"), "half", 0o600)
		},
		"another program's MANIFEST": func(dir string) {
			writeFile(t, filepath.Join(dir, "MANIFEST"), "Manifest-Version: 1.0\n", 0o600)
			writeFile(t, filepath.Join(dir, "seg-0000000000000004.lseg"), "x", 0o600)
		},
		"like /tmp": func(dir string) {
			writeFile(t, filepath.Join(dir, ".X0-lock"), "x", 0o644)
			if err := os.Chmod(dir, 0o1777); err != nil {
				t.Fatal(err)
			}
		},
		"a subdirectory": func(dir string) {
			if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			setup(dir)
			before := snapshotFiles(t, dir)
			_, err := store.Open(dir, store.Options{NoBackground: true})
			if !errors.Is(err, store.ErrNotStore) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Open: %v, want ErrNotStore naming the directory", err)
			}
			t.Logf("Open: %v", err)
			if _, err := store.OpenReader(dir); !errors.Is(err, store.ErrNotStore) {
				t.Fatalf("OpenReader: %v, want ErrNotStore", err)
			}
			sameFiles(t, "after the refused opens", snapshotFiles(t, dir), before)
		})
	}

	// An empty directory, or a fresh file system's root, becomes a store.
	for _, withLostFound := range []bool{false, true} {
		dir := t.TempDir()
		if withLostFound {
			if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		s := openStore(t, dir, store.Options{NoBackground: true})
		openReader(t, dir)
		s.Close()
	}
	// A store whose manifest was lost is still a store (it is rebuilt).
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	recs := gen(rand.New(rand.NewPCG(3, 4)), 100, t0)
	writeAll(t, s, recs, 50)
	s.Close()
	for _, n := range []string{"MANIFEST", "LOCK"} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	sameRecords(t, "no manifest", scanAll(t, openReader(t, dir), store.NewQuery()), recs)
	s = openStore(t, dir, store.Options{NoBackground: true})
	s.Close()
}

// storeWithLeftovers makes a store holding records, a temp file and an
// unpublished segment: what a writer would clean up if it accepted the
// directory.
func storeWithLeftovers(t *testing.T, dir string) {
	t.Helper()
	s := openStore(t, dir, store.Options{NoBackground: true})
	writeAll(t, s, gen(rand.New(rand.NewPCG(5, 6)), 300, t0), 100)
	s.Close()
	writeFile(t, filepath.Join(dir, ".tmp-seg-00000000000000ff.lseg"), "half a file", 0o600)
	copyFile(t, segFiles(t, dir)[0], filepath.Join(dir, "seg-00000000000000fe.lseg"))
}

// TestForeignDirectoryRefused: a directory another user owns, or that
// group or others can write into, is refused before anything in it is
// opened for writing or deleted.
func TestForeignDirectoryRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o770, 0o730, 0o702, 0o1777} {
		t.Run(fmt.Sprintf("mode %04o", mode), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			storeWithLeftovers(t, dir)
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			before := snapshotFiles(t, dir)
			_, err := store.Open(dir, store.Options{NoBackground: true})
			if err == nil || !strings.Contains(err.Error(), "writable by group or others") {
				t.Fatalf("Open of a mode %04o directory: %v", mode, err)
			}
			sameFiles(t, "after the refused open", snapshotFiles(t, dir), before)
		})
	}
	t.Run("owned by nobody", func(t *testing.T) {
		testutil.RequirePrivileged(t) // chown
		dir := filepath.Join(t.TempDir(), "store")
		storeWithLeftovers(t, dir)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		before := snapshotFiles(t, dir)
		_, err := store.Open(dir, store.Options{NoBackground: true})
		if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("Open of a directory owned by nobody: %v", err)
		}
		t.Logf("Open: %v", err)
		sameFiles(t, "after the refused open", snapshotFiles(t, dir), before)
	})
}

// TestPrivatePermissions: a new store is 0700 with 0600 files whatever the
// umask; an older version's 0755/0644 store is made private, and the
// agent says so.
func TestPrivatePermissions(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "new", "store")
	s := openStore(t, dir, store.Options{NoBackground: true})
	writeAll(t, s, gen(rand.New(rand.NewPCG(9, 10)), 100, t0), 50)
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkPrivate := func(what string) {
		t.Helper()
		for _, p := range []string{filepath.Dir(dir), dir} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: directory %s: %v %v, want 0700", what, p, fi.Mode(), err)
			}
		}
		des, err := os.ReadDir(dir)
		if err != nil || len(des) < 3 {
			t.Fatalf("%s: %d entries, %v", what, len(des), err)
		}
		for _, de := range des {
			if fi, err := de.Info(); err != nil || fi.Mode() != 0o600 {
				t.Errorf("%s: %s: %v %v, want 0600", what, de.Name(), fi.Mode(), err)
			}
		}
	}
	checkPrivate("new store")
	s.Close()
	checkPrivate("closed store")

	// What an older version left: 0755 and 0644.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if err := os.Chmod(filepath.Join(dir, de.Name()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	s = openStore(t, dir, store.Options{NoBackground: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s.Close()
	checkPrivate("old store reopened")
	for _, want := range []string{"store directory was readable by other users", "old_mode=0755", "new_mode=0700",
		"store files were readable by other users", "files=" + fmt.Sprint(len(des))} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// TestPlantedLinksNeverRedirectWrites plants symbolic and hard links where
// the writer writes (LOCK, MANIFEST, the temp names an older version used,
// the next segment names) and checks that the file they point at is
// unchanged byte for byte and keeps its mode.
func TestPlantedLinksNeverRedirectWrites(t *testing.T) {
	victimDir := t.TempDir()
	victim := filepath.Join(victimDir, "precious")
	const content = "root's precious file\n"
	writeFile(t, victim, content, 0o644)
	intact := func(what string) {
		t.Helper()
		b, err := os.ReadFile(victim)
		fi, _ := os.Stat(victim)
		if err != nil || string(b) != content || fi.Mode() != 0o644 {
			t.Fatalf("%s: the victim now holds %q (mode %v, %v)", what, b, fi.Mode(), err)
		}
	}

	t.Run("LOCK symlink", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink(victim, filepath.Join(dir, "LOCK")); err != nil {
			t.Fatal(err)
		}
		_, err := store.Open(dir, store.Options{NoBackground: true})
		if err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Fatalf("Open with LOCK a symlink: %v", err)
		}
		intact("LOCK symlink")
	})
	t.Run("LOCK hard link", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, store.Options{NoBackground: true})
		s.Close()
		os.Remove(filepath.Join(dir, "LOCK"))
		if err := os.Link(victim, filepath.Join(dir, "LOCK")); err != nil {
			t.Fatal(err)
		}
		_, err := store.Open(dir, store.Options{NoBackground: true})
		if err == nil || !strings.Contains(err.Error(), "2 links") {
			t.Fatalf("Open with LOCK a hard link: %v", err)
		}
		intact("LOCK hard link")
	})
	t.Run("MANIFEST symlink", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, store.Options{NoBackground: true})
		writeAll(t, s, gen(rand.New(rand.NewPCG(11, 12)), 10, t0), 10)
		s.Close()
		os.Remove(filepath.Join(dir, "MANIFEST"))
		if err := os.Symlink(victim, filepath.Join(dir, "MANIFEST")); err != nil {
			t.Fatal(err)
		}
		before := snapshotFiles(t, dir)
		_, err := store.Open(dir, store.Options{NoBackground: true})
		if !errors.Is(err, store.ErrNotStore) || !strings.Contains(err.Error(), "MANIFEST is not a regular file") {
			t.Fatalf("Open with MANIFEST a symlink: %v", err)
		}
		sameFiles(t, "store after the refused open", snapshotFiles(t, dir), before)
		intact("MANIFEST symlink")
	})
	t.Run("temp and segment names", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, compactOpts())
		// The names the writer would use next if they were predictable:
		// an older version's temp names, and the next segment files.
		var planted []string
		for id := 1; id <= 64; id++ {
			planted = append(planted, fmt.Sprintf(".tmp-seg-%016x.lseg", id), fmt.Sprintf("seg-%016x.lseg", id))
		}
		planted = append(planted, ".tmp-MANIFEST")
		for _, n := range planted {
			if err := os.Symlink(victim, filepath.Join(dir, n)); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(13, 14))
		var recs []flow.Record
		for range 12 {
			b := gen(rng, 100, t0)
			recs = append(recs, b...)
			writeAll(t, s, b, 100)
		}
		if err := s.Maintain(context.Background()); err != nil { // compaction writes too
			t.Fatal(err)
		}
		if st := s.Stats(); st.Compactions == 0 {
			t.Fatalf("no compaction ran: %+v", st)
		}
		s.Close()
		intact("writes, compaction and close with planted links")
		sameRecords(t, "records", scanAll(t, openReader(t, dir), store.NewQuery()), recs)
		// Reopening removes the planted links the writes did not replace
		// (the links, never their target).
		s = openStore(t, dir, store.Options{NoBackground: true})
		s.Close()
		intact("reopen")
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range des {
			if de.Type()&os.ModeSymlink != 0 {
				t.Errorf("%s is still a symlink after reopen", de.Name())
			}
		}
		sameRecords(t, "records after reopen", scanAll(t, openReader(t, dir), store.NewQuery()), recs)
	})
}

// TestDamagedListedSegmentsQuarantined: a listed segment that is empty, or
// a directory, or a symlink, is reported by readers until a writer opens
// the store, which sets it aside (seg-*.lseg.corrupt) and counts it; then
// readers no longer warn.
func TestDamagedListedSegmentsQuarantined(t *testing.T) {
	for _, damage := range []string{"zero bytes", "directory", "symlink"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, store.Options{NoBackground: true})
			recs := gen(rand.New(rand.NewPCG(15, 16)), 3000, t0)
			writeAll(t, s, recs, 1000)
			s.Close()
			victim := segFiles(t, dir)[1]
			switch damage {
			case "zero bytes":
				if err := os.Truncate(victim, 0); err != nil {
					t.Fatal(err)
				}
			case "directory":
				os.Remove(victim)
				if err := os.Mkdir(victim, 0o700); err != nil {
					t.Fatal(err)
				}
			case "symlink":
				os.Remove(victim)
				if err := os.Symlink(segFiles(t, dir)[0], victim); err != nil {
					t.Fatal(err)
				}
			}
			want := slices.Concat(recs[:1000], recs[2000:])
			r := openReader(t, dir)
			var rep store.Report
			q := store.NewQuery()
			q.Report = &rep
			for range 2 {
				sameRecords(t, "scan before the writer opens", scanAll(t, r, q), want)
				if len(rep.Corrupt) != 1 || rep.Corrupt[0].Path != victim {
					t.Fatalf("report %+v", rep)
				}
			}
			s = openStore(t, dir, store.Options{NoBackground: true})
			st := s.Stats()
			s.Close()
			if st.QuarantinedSegments != 1 || st.QuarantinedRecords != 1000 || st.Segments != 2 || st.Records != 2000 {
				t.Fatalf("stats after open: %+v", st)
			}
			if _, err := os.Lstat(victim); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there: %v", victim, err)
			}
			if _, err := os.Lstat(victim + ".corrupt"); err != nil {
				t.Errorf("not set aside: %v", err)
			}
			sameRecords(t, "scan after quarantine", scanAll(t, r, q), want)
			if len(rep.Corrupt) != 0 {
				t.Fatalf("still reported after quarantine: %+v", rep)
			}
			// The quarantined file does not make the directory foreign,
			// and is left alone by later opens.
			s = openStore(t, dir, store.Options{NoBackground: true})
			s.Close()
			if _, err := os.Lstat(victim + ".corrupt"); err != nil {
				t.Errorf("quarantined file removed by a later open: %v", err)
			}
		})
	}
}

// TestCompactionQuarantines: a segment found corrupt by compaction is set
// aside at once rather than reported by every later query.
func TestCompactionQuarantines(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, compactOpts())
	defer s.Close()
	recs := gen(rand.New(rand.NewPCG(17, 18)), 400, t0)
	writeAll(t, s, recs, 100)
	victim := segFiles(t, dir)[2]
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x20
	writeFile(t, victim, string(b), 0o600)
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.QuarantinedSegments != 1 || st.QuarantinedRecords != 100 || st.Records != 300 {
		t.Fatalf("stats %+v", st)
	}
	var rep store.Report
	q := store.NewQuery()
	q.Report = &rep
	sameRecords(t, "after quarantine", scanAll(t, openReader(t, dir), q), slices.Concat(recs[:200], recs[300:]))
	if len(rep.Corrupt) != 0 {
		t.Fatalf("report %+v", rep)
	}
}

// unreadableDirEnv hands the store of TestUnreadableSegmentSkipped to the
// copy of the test binary that runs as nobody.
const unreadableDirEnv = "LOUPE_TEST_UNREADABLE_STORE"

// TestUnreadableSegmentSkipped: a segment that cannot be read (permission
// denied; a directory in its place) is skipped and reported by Scan and by
// Top, like a checksum failure, instead of failing the query.
func TestUnreadableSegmentSkipped(t *testing.T) {
	recs := gen(rand.New(rand.NewPCG(19, 20)), 3000, t0)
	want := slices.Concat(recs[:1000], recs[2000:])
	check := func(t *testing.T, dir string, wantErr error) {
		t.Helper()
		victim := segFiles(t, dir)[1]
		r := openReader(t, dir)
		var rep store.Report
		q := store.NewQuery()
		q.Report = &rep
		sameRecords(t, "scan", scanAll(t, r, q), want)
		if len(rep.Corrupt) != 1 || rep.Corrupt[0].Path != victim || !errors.Is(rep.Corrupt[0].Err, wantErr) ||
			!errors.Is(rep.Corrupt[0].Err, store.ErrUnreadable) || rep.Read != 2 {
			t.Fatalf("scan report %+v", rep)
		}
		for by := store.BySrc; by <= store.ByPort; by++ {
			sameTop(t, "top", top(t, r, q, by, 0), bruteTop(want, store.NewQuery(), by, 0))
			if len(rep.Corrupt) != 1 || rep.Corrupt[0].Path != victim || !errors.Is(rep.Corrupt[0].Err, wantErr) || rep.Read != 2 {
				t.Fatalf("top report %+v", rep)
			}
		}
	}
	if dir := os.Getenv(unreadableDirEnv); dir != "" {
		check(t, dir, os.ErrPermission) // the copy running as nobody
		return
	}
	mkStore := func(t *testing.T, parent string) string {
		dir := filepath.Join(parent, "store")
		s := openStore(t, dir, store.Options{NoBackground: true})
		writeAll(t, s, recs, 1000)
		s.Close()
		return dir
	}

	t.Run("directory", func(t *testing.T) {
		dir := mkStore(t, t.TempDir())
		victim := segFiles(t, dir)[1]
		os.Remove(victim)
		if err := os.Mkdir(victim, 0o700); err != nil {
			t.Fatal(err)
		}
		check(t, dir, store.ErrUnreadable)
	})

	t.Run("permission denied", func(t *testing.T) {
		if os.Geteuid() != 0 {
			dir := mkStore(t, t.TempDir())
			if err := os.Chmod(segFiles(t, dir)[1], 0); err != nil {
				t.Fatal(err)
			}
			check(t, dir, os.ErrPermission)
			return
		}
		// Root reads any file: read as nobody, from a copy of this test
		// binary that nobody can run, in a store nobody can list.
		parent, err := os.MkdirTemp("", "loupe-unreadable-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(parent) })
		dir := mkStore(t, parent)
		for _, p := range []string{parent, dir} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for i, f := range segFiles(t, dir) {
			mode := os.FileMode(0o644)
			if i == 1 {
				mode = 0 // root's own, private
			}
			if err := os.Chmod(f, mode); err != nil {
				t.Fatal(err)
			}
		}
		os.Chmod(filepath.Join(dir, "MANIFEST"), 0o644)
		self, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(parent, "store.test")
		writeFile(t, bin, string(self), 0o755)
		cmd := exec.Command(bin, "-test.run=^TestUnreadableSegmentSkipped$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), unreadableDirEnv+"="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestUnreadableSegmentSkipped") {
			t.Fatalf("the check as nobody: %v\n%s", err, out)
		}
	})
}

// TestRunningWriterQuarantines: a segment emptied while the writer runs is
// found by its periodic maintenance, not only at the next start.
func TestRunningWriterQuarantines(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	recs := gen(rand.New(rand.NewPCG(21, 22)), 3000, t0)
	writeAll(t, s, recs, 1000)
	victim := segFiles(t, dir)[0]
	if err := os.Truncate(victim, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.QuarantinedSegments != 1 || st.QuarantinedRecords != 1000 || st.Records != 2000 {
		t.Fatalf("stats %+v", st)
	}
	var rep store.Report
	q := store.NewQuery()
	q.Report = &rep
	sameRecords(t, "after quarantine", scanAll(t, openReader(t, dir), q), recs[1000:])
	if len(rep.Corrupt) != 0 {
		t.Fatalf("report %+v", rep)
	}
}
