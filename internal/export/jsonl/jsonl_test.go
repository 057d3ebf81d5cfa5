package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"loupe/internal/export"
	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
	"loupe/internal/testutil"
)

func TestWritesOneObjectPerLine(t *testing.T) {
	var buf bytes.Buffer
	s := New("json:test", &buf)
	now := time.Date(2026, 11, 21, 0, 0, 0, 5, time.UTC)
	batch := []flow.Record{
		{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: 17, SrcPort: 1}, Iface: "a", Packets: 1, Bytes: 60, FirstSeen: now, LastSeen: now},
		{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: 6, SrcPort: 2, VlanID: 12}, Iface: "b", Packets: 2, Bytes: 120, Segments: 3, WireBytes: 186, FirstSeen: now, LastSeen: now},
	}
	if err := s.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatal("records reached the writer before Flush: the sink does not buffer")
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	var got []flow.Record
	for sc.Scan() {
		var r flow.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[0].Iface != "a" || got[1].Bytes != 120 || got[1].Segments != 3 || got[1].WireBytes != 186 || got[1].VlanID != 12 || !got[1].FirstSeen.Equal(now) {
		t.Fatalf("decoded %+v", got)
	}
}

// jsonRecords makes n records with varied packet counts.
func jsonRecords(from, n int) []flow.Record {
	recs := make([]flow.Record, n)
	for i := range recs {
		recs[i] = flow.Record{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: 17, SrcPort: uint16(from + i)},
			Iface: "eth0", Packets: uint64((from+i)%5 + 1), Bytes: 100}
	}
	return recs
}

// decodeAll parses every line of b, failing on a torn one.
func decodeAll(t *testing.T, b []byte) []flow.Record {
	t.Helper()
	var out []flow.Record
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r flow.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		out = append(out, r)
	}
	return out
}

func balanced(t *testing.T, s *Sink, written export.Count) export.Accounting {
	t.Helper()
	a := s.Accounting()
	sum := a.Stored
	sum.Add(a.Pending)
	for _, d := range a.Dropped {
		sum.Add(d)
	}
	if sum != written {
		t.Fatalf("stored %+v + pending %+v + dropped %+v != written %+v", a.Stored, a.Pending, a.Dropped, written)
	}
	return a
}

// TestFullDiskHeldRetriedAndCounted runs the JSON sink on a real file
// system that fills up: what does not fit is held (a torn line included)
// and written once space returns, past the bound records are dropped and
// counted, and the file ends with only whole lines: exactly the records
// counted as stored.
func TestFullDiskHeldRetriedAndCounted(t *testing.T) {
	mnt := testutil.Tmpfs(t, "1m")
	path := filepath.Join(mnt, "flows.jsonl")
	s, err := Open(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.SetMaxPending(256 << 10)
	filler := filepath.Join(mnt, "filler")
	testutil.Fill(t, filler)
	if err := os.Truncate(filler, 1<<20-64<<10); err != nil { // 64 KiB free
		t.Fatal(err)
	}
	ctx := context.Background()
	var written export.Count
	failed := 0
	for i := 0; i < 30; i++ {
		recs := jsonRecords(i*500, 500)
		written.Add(export.CountOf(recs))
		s.Write(ctx, recs)
		if err := s.Flush(ctx); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("flush: %v", err)
			}
			failed++
		}
		balanced(t, s, written)
	}
	a := balanced(t, s, written)
	if failed == 0 || a.Dropped[export.ReasonNoSpace].Records == 0 || a.Pending.Records == 0 || a.Dropped[export.ReasonWriteError] != (export.Count{}) {
		t.Fatalf("on a full disk: %d failed flushes, %+v", failed, a)
	}
	t.Logf("full disk: stored %+v held %+v dropped %+v", a.Stored, a.Pending, a.Dropped)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("flush after space returned: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	a = balanced(t, s, written)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got export.Count
	for _, r := range decodeAll(t, b) {
		got.Add(export.Count{Records: 1, Packets: r.Packets})
	}
	if got != a.Stored || a.Pending != (export.Count{}) {
		t.Fatalf("the file holds %+v, the sink counted %+v stored (%+v)", got, a.Stored, a)
	}
	sum := a.Stored
	sum.Add(a.Dropped[export.ReasonNoSpace])
	if sum != written {
		t.Fatalf("stored + dropped = %+v, written %+v", sum, written)
	}
}

// failingWriter takes room bytes, then fails with ENOSPC after a partial
// write, as a full file system does.
type failingWriter struct {
	bytes.Buffer
	room int
}

func (w *failingWriter) Write(p []byte) (int, error) {
	n := min(len(p), w.room)
	w.room -= n
	w.Buffer.Write(p[:n])
	if n < len(p) {
		return n, &os.PathError{Op: "write", Path: "flows.jsonl", Err: syscall.ENOSPC}
	}
	return n, nil
}

func TestPartialWriteCompletedOnRetry(t *testing.T) {
	w := &failingWriter{room: 1000}
	s := New("json:test", w)
	recs := jsonRecords(0, 100)
	s.Write(context.Background(), recs)
	if err := s.Flush(context.Background()); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush: %v", err)
	}
	a := balanced(t, s, export.CountOf(recs))
	whole := bytes.Count(w.Bytes(), []byte("\n"))
	if a.Stored.Records != uint64(whole) || whole == 0 || w.Len() != 1000 {
		t.Fatalf("%d whole lines in %d bytes, %+v", whole, w.Len(), a)
	}
	w.room = 1 << 30
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := decodeAll(t, w.Bytes())
	if len(got) != len(recs) {
		t.Fatalf("%d records after the retry, want %d", len(got), len(recs))
	}
	for i := range got {
		if got[i].SrcPort != recs[i].SrcPort {
			t.Fatalf("record %d is %d: order or identity lost", i, got[i].SrcPort)
		}
	}
	if a := balanced(t, s, export.CountOf(recs)); a.Stored != export.CountOf(recs) {
		t.Fatalf("%+v", a)
	}
}

// TestCoverage is the JSON sink's field-coverage test: what it writes for
// a record, one line, carries every field of flow.Fields under its name.
func TestCoverage(t *testing.T) {
	flowtest.Coverage{
		Encode: func(t testing.TB, r *flow.Record) flowtest.Parts {
			var buf bytes.Buffer
			s := New("json:test", &buf)
			if err := s.Write(context.Background(), []flow.Record{*r}); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			line, rest, _ := bytes.Cut(buf.Bytes(), []byte("\n"))
			if len(rest) != 0 {
				t.Fatalf("more than one line: %q", buf.Bytes())
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatal(err)
			}
			p := flowtest.Parts{}
			for k, v := range m {
				p[k] = string(v)
			}
			return p
		},
		IDs: func(f *flow.Field) []string { return []string{f.Name} },
	}.Check(t)
}

// TestOpenCutsTornLine: a file left with a torn last line (an agent killed
// in the middle of a write) is cut back to its last whole line on open,
// so the lines written next parse; a file of whole lines is left alone.
func TestOpenCutsTornLine(t *testing.T) {
	whole := `{"a":1}` + "\n" + `{"a":2}` + "\n"
	for _, tc := range []struct {
		name, before, after string
	}{
		{"torn", whole + `{"a":3,"b`, whole},
		{"whole", whole, whole},
		{"only torn", `{"a":`, ""},
		{"empty", "", ""},
		{"long torn tail", whole + `{"x":"` + string(bytes.Repeat([]byte("y"), 200<<10)), whole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "flows.jsonl")
			if err := os.WriteFile(path, []byte(tc.before), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.after {
				t.Fatalf("after open: %q, want %q", got, tc.after)
			}
		})
	}
}
