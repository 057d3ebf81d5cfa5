package store_test

import (
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"loupe/internal/hop"
	"loupe/internal/store"
)

func hopRecord(i int, at time.Time) *hop.Request {
	return &hop.Request{
		TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331", Kind: "request",
		SrcAddr: netip.MustParseAddr("10.1.0.2"), DstAddr: netip.MustParseAddr("10.2.0.2"),
		SrcPort: uint16(40000 + i), DstPort: 80, Proto: 6, Seq: uint32(i), Time: at.UTC(), Node: "a",
		Hops: []hop.Hop{{FromIface: "veth1", ToIface: "vxlan0", Direction: "out", LatencyNs: int64(1000 + i)}},
		Path: []hop.Point{{Iface: "veth1", IfIndex: 3, Kind: "veth", Hook: "ingress", TimeNs: 5, Seq: uint32(i), Len: 10}},
	}
}

func readAllHops(t *testing.T, dir string, since time.Time) ([]*hop.Request, store.HopReport) {
	t.Helper()
	var got []*hop.Request
	rep, err := store.ReadHops(dir, since, func(r *hop.Request) error { got = append(got, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return got, rep
}

func TestHopLogRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	now := time.Unix(1700000000, 0)
	h, err := store.OpenHopLog(dir, store.HopOptions{FileSize: 600, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var want []*hop.Request
	for i := range 10 {
		r := hopRecord(i, now.Add(time.Duration(i)*time.Second))
		want = append(want, r)
		if err := h.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	// Readable while the writer holds it.
	got, rep := readAllHops(t, dir, time.Time{})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %d records, differing from the %d written:\n%+v\n%+v", len(got), len(want), got[0], want[0])
	}
	if rep.Files < 2 || rep.Records != 10 || len(rep.Torn)+len(rep.Corrupt) != 0 {
		t.Errorf("report %+v: want several files (600-byte files), 10 records", rep)
	}
	if _, err := store.OpenHopLog(dir, store.HopOptions{}); err == nil {
		t.Error("a second writer opened the latency log")
	}
	// The flow store's writer and readers accept the directory.
	st, err := store.Open(dir, store.Options{NoBackground: true})
	if err != nil {
		t.Fatalf("flow store refuses a directory with a latency log: %v", err)
	}
	st.Close()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// And after the writer stopped, with a time bound.
	got, _ = readAllHops(t, dir, now.Add(7*time.Second))
	if len(got) != 3 || got[0].Seq != 7 {
		t.Errorf("since +7s: %d records, first seq %d; want 3 from seq 7", len(got), got[0].Seq)
	}
}

// One Append of many records writes them as one batch per file, and
// starts new files as records one by one do.
func TestHopLogBatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	now := time.Unix(1700000000, 0)
	h, err := store.OpenHopLog(dir, store.HopOptions{FileSize: 600, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var want []*hop.Request
	for i := range 10 {
		want = append(want, hopRecord(i, now.Add(time.Duration(i)*time.Second)))
	}
	if err := h.Append(want...); err != nil {
		t.Fatal(err)
	}
	got, rep := readAllHops(t, dir, time.Time{})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %d records, differing from the %d written", len(got), len(want))
	}
	if st := h.Stats(); rep.Files < 2 || st.Files != rep.Files || st.Records != 10 || st.WriteErrors != 0 {
		t.Errorf("report %+v, stats %+v: want several files (600-byte files), 10 records", rep, st)
	}
}

// A record cut short (the writer in the middle of it, or a crash) ends
// the file's records; a damaged one is reported.
func TestHopLogTornAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	h, err := store.OpenHopLog(dir, store.HopOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := h.Append(hopRecord(i, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "hop-*.lhop"))
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	if err := os.WriteFile(files[0], b[:len(b)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	got, rep := readAllHops(t, dir, time.Time{})
	if len(got) != 2 || len(rep.Torn) != 1 {
		t.Errorf("torn: %d records, report %+v; want 2 and one torn file", len(got), rep)
	}
	b[len(b)-3] ^= 0xff
	os.WriteFile(files[0], b, 0o600)
	got, rep = readAllHops(t, dir, time.Time{})
	if len(got) != 2 || len(rep.Corrupt) != 1 {
		t.Errorf("corrupt: %d records, report %+v; want 2 and one corrupt file", len(got), rep)
	}
}

func TestHopLogRetention(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1700000000, 0)
	clock := func() time.Time { return now }
	h, err := store.OpenHopLog(dir, store.HopOptions{FileSize: 100, Retention: time.Hour, MaxSize: 2000, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		now = now.Add(time.Second)
		if err := h.Append(hopRecord(i, now)); err != nil {
			t.Fatal(err)
		}
	}
	// One record a file (100-byte files): 20 files of ~450 bytes, but the
	// size bound keeps what fits in 2000 bytes.
	now = now.Add(2 * time.Minute)
	h.Append(hopRecord(20, now))
	st := h.Stats()
	if st.Bytes > 2000+600 || st.Files < 2 || st.ExpiredFiles == 0 || st.Files+int(st.ExpiredFiles) != 21 {
		t.Errorf("stats %+v: want the size bound kept, expired counted", st)
	}
	// Age: everything but the file being written is older than an hour.
	now = now.Add(2 * time.Hour)
	h.Append(hopRecord(21, now))
	if st := h.Stats(); st.Files != 1 || st.Records != 22 {
		t.Errorf("after the retention: %+v, want 1 file", st)
	}
	h.Close()
}

// Files of format version 1, whose records are JSON, are still read; the
// writer's files are version 2 (binary) and a fraction of the size.
func TestHopLogReadsVersion1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	now := time.Unix(1700000000, 0)
	h, err := store.OpenHopLog(dir, store.HopOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var want []*hop.Request
	v1 := append([]byte("LOUPEHOP"), 1, 0, 0, 0, 0, 0, 0, 0)
	for i := range 3 {
		r := hopRecord(i, now.Add(time.Duration(i)*time.Second))
		want = append(want, r)
		js, _ := json.Marshal(r)
		v1 = binary.LittleEndian.AppendUint32(v1, uint32(len(js)))
		v1 = binary.LittleEndian.AppendUint32(v1, crc32.Checksum(js, crc32.MakeTable(crc32.Castagnoli)))
		v1 = append(v1, js...)
	}
	// The older file has the lower id, as the writer would have named it.
	if err := os.WriteFile(filepath.Join(dir, "hop-0000000000000000.lhop"), v1, 0o600); err != nil {
		t.Fatal(err)
	}
	r := hopRecord(3, now.Add(3*time.Second))
	want = append(want, r)
	if err := h.Append(r); err != nil {
		t.Fatal(err)
	}
	h.Close()
	got, rep := readAllHops(t, dir, time.Time{})
	if !reflect.DeepEqual(got, want) || rep.Files != 2 || len(rep.Torn)+len(rep.Corrupt) != 0 {
		t.Fatalf("read %d records (report %+v), want %d from two files", len(got), rep, len(want))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "hop-*.lhop"))
	b, _ := os.ReadFile(files[len(files)-1])
	js, _ := json.Marshal(r)
	if b[8] != 2 || len(b)-16 > (len(js)+8)*2/3 {
		t.Errorf("the writer's file: version %d, %d bytes of records; want 2, and under 2/3 of JSON's %d", b[8], len(b)-16, len(js)+8)
	}
}
