package jsonl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"loupe/internal/flow"
)

func TestWritesOneObjectPerLine(t *testing.T) {
	var buf bytes.Buffer
	s := New("json:test", &buf)
	now := time.Date(2026, 11, 21, 0, 0, 0, 5, time.UTC)
	batch := []flow.Record{
		{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: 17, SrcPort: 1}, Iface: "a", Packets: 1, Bytes: 60, FirstSeen: now, LastSeen: now},
		{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: 6, SrcPort: 2}, Iface: "b", Packets: 2, Bytes: 120, FirstSeen: now, LastSeen: now},
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
	if len(got) != 2 || got[0].Iface != "a" || got[1].Bytes != 120 || !got[1].FirstSeen.Equal(now) {
		t.Fatalf("decoded %+v", got)
	}
}
