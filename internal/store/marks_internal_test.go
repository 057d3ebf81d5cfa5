package store

import (
	"hash/crc32"
	"testing"
)

// TestManifestMarks: marks round-trip through the manifest, only grow,
// are bounded (the least recently moved go first), and a version 1
// manifest (no marks) still reads.
func TestManifestMarks(t *testing.T) {
	m := &manifest{gen: 5, nextID: 9, entries: []entry{{id: 3, records: 10, minFirst: 1, maxLast: 2, size: 100}}}
	m.addMark(Mark{Set: 7, Epoch: 4, RingPos: 100}, 1)
	m.addMark(Mark{Set: 2, Epoch: 9, RingPos: 5}, 2)
	m.addMark(Mark{Set: 7, Epoch: 3, RingPos: 200}, 3) // an older epoch never moves it back
	m.addMark(Mark{Set: 0, Epoch: 1}, 4)               // no set: not recorded
	got, err := decodeManifest(encodeManifest(m))
	if err != nil {
		t.Fatal(err)
	}
	if mk, ok := got.mark(7); !ok || mk != (Mark{Set: 7, Epoch: 4, RingPos: 200}) {
		t.Fatalf("mark of set 7: %+v %v", mk, ok)
	}
	if mk, ok := got.mark(2); !ok || mk.Epoch != 9 || len(got.marks) != 2 || got.entries[0] != m.entries[0] {
		t.Fatalf("decoded %+v", got)
	}

	for set := range uint64(maxMarks + 5) {
		m.addMark(Mark{Set: 100 + set, Epoch: 1}, 10+set)
	}
	if len(m.marks) != maxMarks {
		t.Fatalf("%d marks kept, want %d", len(m.marks), maxMarks)
	}
	if _, ok := m.mark(7); ok {
		t.Fatal("the least recently moved mark was kept")
	}
	if _, ok := m.mark(100 + maxMarks + 4); !ok {
		t.Fatal("the newest mark was dropped")
	}

	// Version 1: the same without the mark count and marks.
	v1 := encodeManifest(&manifest{gen: 5, nextID: 9, entries: m.entries})
	v1 = v1[:len(v1)-8] // the CRC and the (zero) mark count
	v1[8] = 1
	v1 = le.AppendUint32(v1, crc32.Checksum(v1, crc32.MakeTable(crc32.Castagnoli)))
	old, err := decodeManifest(v1)
	if err != nil || len(old.entries) != 1 || len(old.marks) != 0 {
		t.Fatalf("version 1 manifest: %+v, %v", old, err)
	}
}
