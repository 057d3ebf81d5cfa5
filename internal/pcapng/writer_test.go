package pcapng

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"loupe/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.pcapng")

const (
	testSnap    = 200
	testAppl    = "loupe 0.0.0-test"
	testOS      = "Linux 6.1.0-test"
	testSection = "capture of trigger=http.status=500-599"
)

// base is 2026-11-25T07:40:55.123456789Z.
var base = time.Date(2026, 11, 25, 7, 40, 55, 123456789, time.UTC).UnixNano()

func testOptions() Options {
	return Options{UserAppl: testAppl, OS: testOS, Comment: testSection, SnapLen: testSnap}
}

// frame is an Ethernet/IPv4/UDP frame of size bytes from source port port.
func frame(size int, port uint16) []byte {
	src := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	dst := net.HardwareAddr{2, 0, 0, 0, 0, 2}
	return testutil.UDPFrame(src, dst, nil, port, size)
}

// testPackets are packets of every shape: two interfaces, then the second
// renamed (a third IDB), both directions and unknown, lengths 0-3 mod 4,
// packets the Writer cuts to the snap length and packets the datapath cut
// (OrigLen > len(Data)), comments of every length mod 4, non-ASCII and
// invalid UTF-8, and timestamps whose nanoseconds all matter.
func testPackets() []Packet {
	const trig = "trigger=http.status=500-599 status=500 GET /bar"
	return []Packet{
		{TimeNs: base, Ifindex: 2, IfName: "eth0", Direction: Inbound, Data: frame(60, 40000), Comment: trig},
		{TimeNs: base + 1, Ifindex: 2, IfName: "eth0", Direction: Outbound, Data: frame(61, 40001), Comment: "a"},
		{TimeNs: base + 999_999_999, Ifindex: 7, IfName: "veth-a1", Direction: Inbound, Data: frame(62, 40002), Comment: "ab"},
		{TimeNs: base + 1_000_000_001, Ifindex: 7, IfName: "veth-a1", Direction: DirectionUnknown, Data: frame(63, 40003), Comment: "abc"},
		{TimeNs: base + 2_000_000_000, Ifindex: 2, IfName: "eth0", Direction: Outbound, Data: frame(1514, 40004), Comment: "abcd"},
		{TimeNs: base + 2_000_000_007, Ifindex: 7, IfName: "veth-a1", Direction: Inbound, Data: frame(128, 40005), OrigLen: 9000, Comment: "snap=128 héllo ✓"},
		{TimeNs: base + 3_000_000_000, Ifindex: 2, IfName: "eth0", Direction: DirectionUnknown, Data: frame(64, 40006)},
		{TimeNs: base + 3_000_000_500, Ifindex: 7, IfName: "veth-b2", Direction: Outbound, Data: frame(201, 40007), OrigLen: 100, Comment: "bad\xffutf8"},
		{TimeNs: base + 4_123_456_789, Ifindex: 7, IfName: "veth-b2", Direction: Inbound, Data: frame(9000, 40008), OrigLen: 9000, Comment: trig},
	}
}

// want is what a reader must find for p, worked out from the format rather
// than from the Writer.
type want struct {
	ifid            uint32
	capLen, origLen uint32
	dir             Direction
	comment         string
}

func expect(pkts []Packet, snap int) ([]want, []string) {
	var ws []want
	var names []string // interface names in IDB order
	ids := map[string]uint32{}
	for _, p := range pkts {
		key := fmt.Sprint(p.IfName, "/", p.Ifindex)
		id, ok := ids[key]
		if !ok {
			id = uint32(len(ids))
			ids[key] = id
			names = append(names, p.IfName)
		}
		w := want{ifid: id, capLen: uint32(min(len(p.Data), snap)), origLen: max(p.OrigLen, uint32(len(p.Data))), dir: p.Direction, comment: p.Comment}
		if w.comment == "bad\xffutf8" {
			w.comment = "bad\uFFFDutf8"
		}
		ws = append(ws, w)
	}
	return ws, names
}

func encode(t testing.TB, pkts []Packet, opts Options) []byte {
	t.Helper()
	var b bytes.Buffer
	w := NewWriter(&b, opts)
	for i := range pkts {
		if err := w.WritePacket(&pkts[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestRoundTrip reads the capture back with the strict parser and checks
// every field of every block.
func TestRoundTrip(t *testing.T) {
	pkts := testPackets()
	secs, err := parse(encode(t, pkts, testOptions()))
	if err != nil {
		t.Fatal(err)
	}
	if len(secs) != 1 {
		t.Fatalf("%d sections, want 1", len(secs))
	}
	s := secs[0]
	if s.comment != testSection || s.os != testOS || s.userAppl != testAppl {
		t.Errorf("section: comment %q os %q userappl %q", s.comment, s.os, s.userAppl)
	}
	ws, names := expect(pkts, testSnap)
	if len(s.ifaces) != 3 || len(names) != 3 {
		t.Fatalf("%d interfaces (want %d: eth0, veth-a1, and veth-a1 renamed veth-b2)", len(s.ifaces), len(names))
	}
	idx := []uint32{2, 7, 7}
	for i, ifc := range s.ifaces {
		if ifc.link != 1 || ifc.snapLen != testSnap || ifc.name != names[i] || !bytes.Equal(ifc.tsresol, []byte{9}) ||
			ifc.desc != fmt.Sprint("ifindex ", idx[i]) {
			t.Errorf("interface %d: %+v, want Ethernet, snaplen %d, name %q, tsresol 9, ifindex %d", i, ifc, testSnap, names[i], idx[i])
		}
	}
	if len(s.packets) != len(pkts) {
		t.Fatalf("%d packets, want %d", len(s.packets), len(pkts))
	}
	for i, p := range s.packets {
		w := ws[i]
		if p.ifid != w.ifid || p.ts != uint64(pkts[i].TimeNs) || p.capLen != w.capLen || p.origLen != w.origLen {
			t.Errorf("packet %d: interface %d ts %d caplen %d origlen %d, want %d %d %d %d",
				i, p.ifid, p.ts, p.capLen, p.origLen, w.ifid, pkts[i].TimeNs, w.capLen, w.origLen)
		}
		if !bytes.Equal(p.data, pkts[i].Data[:w.capLen]) {
			t.Errorf("packet %d: data differs", i)
		}
		switch {
		case w.dir == DirectionUnknown && p.flags != nil:
			t.Errorf("packet %d: epb_flags %#x for an unknown direction", i, *p.flags)
		case w.dir != DirectionUnknown && (p.flags == nil || *p.flags != uint32(w.dir)):
			t.Errorf("packet %d: epb_flags %v, want %d", i, p.flags, w.dir)
		}
		if got := strings.Join(p.comments, "|"); got != w.comment {
			t.Errorf("packet %d: comment %q, want %q", i, got, w.comment)
		}
	}
}

// TestPcapgoReads checks the same capture with gopacket's reader, written
// independently of this package.
func TestPcapgoReads(t *testing.T) {
	pkts := testPackets()
	r, err := pcapgo.NewNgReader(bytes.NewReader(encode(t, pkts, testOptions())), pcapgo.NgReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if si := r.SectionInfo(); si.Application != testAppl || si.OS != testOS || si.Comment != testSection {
		t.Errorf("section info %+v", si)
	}
	ws, names := expect(pkts, testSnap)
	for i := range pkts {
		data, ci, opts, err := r.ReadPacketDataWithOptions()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		w := ws[i]
		if !ci.Timestamp.Equal(time.Unix(0, pkts[i].TimeNs)) || ci.CaptureLength != int(w.capLen) || ci.Length != int(w.origLen) ||
			ci.InterfaceIndex != int(w.ifid) || len(data) != int(w.capLen) {
			t.Errorf("packet %d: %+v, want %+v at %d", i, ci, w, pkts[i].TimeNs)
		}
		if intf, err := r.Interface(ci.InterfaceIndex); err != nil || intf.Name != names[w.ifid] ||
			intf.LinkType != layers.LinkTypeEthernet || intf.TimestampResolution != 9 {
			t.Errorf("packet %d: interface %+v %v", i, intf, err)
		}
		var dir pcapgo.NgEpbFlag
		if opts.Flags != nil {
			dir = opts.Flags.Direction
		}
		if uint32(dir) != uint32(w.dir) {
			t.Errorf("packet %d: direction %d, want %d", i, dir, w.dir)
		}
		if got := strings.Join(opts.Comments, "|"); got != w.comment {
			t.Errorf("packet %d: comment %q, want %q", i, got, w.comment)
		}
	}
	if _, _, err := r.ReadPacketData(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last packet: %v", err)
	}
}

// TestGolden pins the bytes (go test -update rewrites the file; open it in
// Wireshark to review a change).
func TestGolden(t *testing.T) {
	got := encode(t, testPackets(), testOptions())
	path := filepath.Join("testdata", "golden.pcapng")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (%d bytes, want %d)", path, len(got), len(want))
	}
}

// TestPacketSize: PacketSize predicts exactly what WritePacket adds, with
// and without a new interface.
func TestPacketSize(t *testing.T) {
	w := NewWriter(io.Discard, testOptions())
	pkts := testPackets()
	pkts = append(pkts, Packet{TimeNs: 1, Ifindex: 1234567890, Data: frame(60, 1), Comment: strings.Repeat("\xff", 30000)})
	for i := range pkts {
		before, predicted := w.Size(), w.PacketSize(&pkts[i])
		if err := w.WritePacket(&pkts[i]); err != nil {
			t.Fatal(err)
		}
		if got := w.Size() - before; got != int64(predicted) {
			t.Errorf("packet %d: PacketSize %d, WritePacket added %d", i, predicted, got)
		}
	}
}

// TestLongComment: a comment is cut at 65535 bytes on a character
// boundary (a 16-bit option length), not wrapped around.
func TestLongComment(t *testing.T) {
	long := strings.Repeat("é", 40000) // 80000 bytes
	secs, err := parse(encode(t, []Packet{{TimeNs: base, Ifindex: 1, Data: frame(60, 1), Comment: long}}, testOptions()))
	if err != nil {
		t.Fatal(err)
	}
	c := secs[0].packets[0].comments
	if len(c) != 1 || len(c[0]) != 65534 || c[0] != long[:65534] {
		t.Errorf("comment of %d bytes, want the first 65534 of %d", len(c[0]), len(long))
	}
}

// TestCommentInvalidAtTheLimit: a comment of exactly 65535 bytes whose
// first byte is invalid UTF-8 is written valid (U+FFFD, then as many of the
// rest as fit), though its written length equals its own, and so is the
// same comment on the next packet, whatever the writer remembers of it.
func TestCommentInvalidAtTheLimit(t *testing.T) {
	c := "\xff" + strings.Repeat("a", 65534)
	secs, err := parse(encode(t, []Packet{
		{TimeNs: base, Ifindex: 1, Data: frame(60, 1), Comment: c},
		{TimeNs: base + 1, Ifindex: 1, Data: frame(60, 1), Comment: c},
	}, testOptions()))
	if err != nil {
		t.Fatal(err)
	}
	want := "\uFFFD" + strings.Repeat("a", 65532)
	for i, p := range secs[0].packets {
		if len(p.comments) != 1 || p.comments[0] != want {
			t.Errorf("packet %d: comment of %d bytes (valid %v), want U+FFFD and 65532 a's", i, len(p.comments[0]), utf8.ValidString(p.comments[0]))
		}
	}
}

// TestDefaults: an empty stream is a valid capture; the snap length is at
// most MaxSnapLen; OS defaults to the host's; link types are kept apart.
func TestDefaults(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, Options{SnapLen: 1 << 30})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	secs, err := parse(b.Bytes())
	if err != nil || len(secs) != 1 || len(secs[0].packets) != 0 || !strings.HasPrefix(secs[0].os, "Linux ") {
		t.Fatalf("empty capture: %+v %v", secs, err)
	}
	big := make([]byte, MaxSnapLen+100)
	raw := frame(60, 1)[14:]
	for _, p := range []Packet{
		{TimeNs: 5, Ifindex: 3, IfName: "wg0", Data: big},
		{TimeNs: 6, Ifindex: 3, IfName: "wg0", LinkType: LinkTypeRaw, Data: raw},
	} {
		if err := w.WritePacket(&p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WritePacket(&Packet{TimeNs: -1, Data: raw}); !errors.Is(err, ErrTimestamp) {
		t.Errorf("negative timestamp: %v", err)
	}
	w.Flush()
	secs, err = parse(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	s := secs[0]
	if len(s.ifaces) != 2 || s.ifaces[0].snapLen != MaxSnapLen || s.ifaces[0].link != 1 || s.ifaces[1].link != 101 {
		t.Fatalf("interfaces %+v", s.ifaces)
	}
	if p := s.packets[0]; p.capLen != MaxSnapLen || p.origLen != MaxSnapLen+100 {
		t.Errorf("oversized packet: caplen %d origlen %d", p.capLen, p.origLen)
	}
	if p := s.packets[1]; p.ifid != 1 || !bytes.Equal(p.data, raw) {
		t.Errorf("raw packet on interface %d", p.ifid)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("disk on fire")
	}
	f.n--
	return len(p), nil
}

// TestWriteErrorSticks: after a failed write the stream is broken (half a
// block may be out), so every later call fails until Reset.
func TestWriteErrorSticks(t *testing.T) {
	w := NewWriter(&failWriter{}, testOptions())
	p := testPackets()[0]
	if err := w.WritePacket(&p); err != nil {
		t.Fatal(err) // gathered, not written yet
	}
	if err := w.Flush(); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("flush: %v", err)
	}
	if err := w.WritePacket(&p); err == nil {
		t.Error("write after a failed flush succeeded")
	}
	var b bytes.Buffer
	w.Reset(&b)
	if err := w.WritePacket(&p); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if secs, err := parse(b.Bytes()); err != nil || len(secs[0].ifaces) != 1 || len(secs[0].packets) != 1 {
		t.Errorf("after Reset: %+v %v", secs, err)
	}
}

// TestWritesThrough: without Flush, the Writer holds back at most about
// 64 KiB, and what it has written is whole blocks.
func TestWritesThrough(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, testOptions())
	p := benchPacket(1514, benchComment)
	p.Ifindex, p.IfName = 3, "eth1"
	for i := range 1000 {
		p.TimeNs = base + int64(i)
		if err := w.WritePacket(p); err != nil {
			t.Fatal(err)
		}
		if held := w.Size() - int64(b.Len()); held > flushAt+2048 {
			t.Fatalf("after packet %d: %d bytes held back", i, held)
		}
	}
	if b.Len() == 0 {
		t.Fatal("nothing written before Flush")
	}
	secs, err := parse(b.Bytes())
	if err != nil || len(secs[0].packets) == 0 {
		t.Fatalf("written part: %v", err)
	}
}

// TestNoAllocs: once the buffer has grown, writing a packet allocates
// nothing, whether it flushes or not.
func TestNoAllocs(t *testing.T) {
	w := NewWriter(io.Discard, testOptions())
	pkts := testPackets()
	for i := range pkts {
		w.WritePacket(&pkts[i])
	}
	i := 0
	allocs := testing.AllocsPerRun(10000, func() {
		if err := w.WritePacket(&pkts[i%len(pkts)]); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("%.2f allocations per packet, want 0", allocs)
	}
}

func benchPacket(size int, comment string) *Packet {
	return &Packet{TimeNs: base, Ifindex: 2, IfName: "eth0", Direction: Inbound, Data: frame(size, 40000), OrigLen: uint32(size), Comment: comment}
}

const benchComment = "trigger=http.status=500-599 status=500 GET /bar"

func BenchmarkWritePacket(b *testing.B) {
	for _, c := range []struct {
		name    string
		size    int
		comment string
	}{{"64B", 64, ""}, {"64B+comment", 64, benchComment}, {"1514B+comment", 1514, benchComment}} {
		b.Run(c.name, func(b *testing.B) {
			p := benchPacket(c.size, c.comment)
			w := NewWriter(io.Discard, Options{UserAppl: testAppl})
			b.SetBytes(int64(c.size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				p.TimeNs = base + int64(i)
				if err := w.WritePacket(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWritePacketInterleaved alternates two interfaces, so every
// packet looks its interface up in the map.
func BenchmarkWritePacketInterleaved(b *testing.B) {
	p := [2]*Packet{benchPacket(64, benchComment), benchPacket(64, benchComment)}
	p[1].Ifindex, p[1].IfName = 3, "eth1"
	w := NewWriter(io.Discard, Options{UserAppl: testAppl})
	b.SetBytes(64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := w.WritePacket(p[i&1]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSeriesWritePacket writes files for real (the test's temporary
// directory), rotating every 16 MiB and keeping four.
func BenchmarkSeriesWritePacket(b *testing.B) {
	r, err := NewRotator(b.TempDir(), RotatorOptions{Writer: Options{UserAppl: testAppl}, MaxFileBytes: 16 << 20, MaxFiles: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	s, err := r.Open(DefaultPrefix)
	if err != nil {
		b.Fatal(err)
	}
	p := benchPacket(1514, benchComment)
	b.SetBytes(1514)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.TimeNs = base + int64(i)
		if err := s.WritePacket(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPcapgoWritePacket is the same packet through gopacket's writer,
// for comparison (see the package comment).
func BenchmarkPcapgoWritePacket(b *testing.B) {
	p := benchPacket(1514, benchComment)
	w, err := pcapgo.NewNgWriterInterface(io.Discard, pcapgo.NgInterface{Name: "eth0", LinkType: layers.LinkTypeEthernet}, pcapgo.DefaultNgWriterOptions)
	if err != nil {
		b.Fatal(err)
	}
	flags := pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionInbound}
	b.SetBytes(1514)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, base+int64(i)), CaptureLength: len(p.Data), Length: len(p.Data)}
		if err := w.WritePacketWithOptions(ci, p.Data, pcapgo.NgPacketOptions{Comments: []string{p.Comment}, Flags: &flags}); err != nil {
			b.Fatal(err)
		}
	}
}
