package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
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
