package store

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"loupe/internal/flow"
	"loupe/internal/tunnel"
)

// ErrCorrupt marks a segment that failed verification: bad magic, wrong
// length (truncated), CRC mismatch or an inconsistent block directory.
var ErrCorrupt = errors.New("corrupt segment")

func corruptf(path, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrCorrupt, path, fmt.Sprintf(format, args...))
}

// ErrUnreadable marks a segment that cannot be read at all: permission
// denied, a directory or a symbolic link in its place.
var ErrUnreadable = errors.New("unreadable segment")

func unreadable(path string, err error) error {
	return fmt.Errorf("%w %s: %w", ErrUnreadable, path, err)
}

// damaged reports whether err is about one segment's file, which a query
// skips and reports and the writer quarantines, rather than about the
// process (out of memory, out of file descriptors), which fails the query.
func damaged(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnreadable)
}

// openSegment opens segment id of d for reading. A missing file is
// returned as fs.ErrNotExist; one that is there but cannot be opened as a
// segment is ErrUnreadable.
func openSegment(d *storeDir, id uint64) (*os.File, error) {
	f, err := d.open(segName(id))
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, err
	case errors.Is(err, fs.ErrPermission), errors.Is(err, errSymlink), errors.Is(err, syscall.ENXIO),
		errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR):
		return nil, unreadable(d.join(segName(id)), err)
	}
	return nil, err
}

// Block ids within a segment: the columns, then the dictionaries.
const (
	bAddrDict = numCols + iota
	bAddrFam
	bMACDict
	bNames
	numBlocks
)

// segment is a read-only view of one segment file whose header has been
// verified. Blocks are verified before use: all at once (verifyAll, the
// whole-file CRC) or one by one (verify, the per-block CRCs).
type segment struct {
	path     string
	data     []byte
	mapped   bool
	id       uint64
	n        int
	minFirst int64
	maxLast  int64
	maxFirst int64
	minLast  int64
	replaces []uint64
	cols     [numCols][]byte // aliases of blk[:numCols]
	blk      [numBlocks][]byte
	blkCRC   [numBlocks]uint32
	// vmu guards verified: queries of one Reader share a cached segment
	// (segcache.go).
	vmu      sync.Mutex
	verified [numBlocks]bool
	indexOK  [numCols]int // per column, the limit+1 checkIndex found every index below
	// ids are the global ids of the address entries in the interner
	// idsIn, which Top computes once per segment (interner.remapOf).
	idsMu  sync.Mutex
	idsIn  *interner
	ids    []uint32
	byID   []uint64  // global id << 32 | entry, in order (interner.sortedOf)
	rawIn  *interner // as idsIn, for the addresses as stored
	rawIDs []uint32
	// flowIDs are the flow ids of the records in flowIn, which Top
	// computes once per segment (flowIDs.idsOf).
	flowMu  sync.Mutex
	flowIn  *flowIDs
	flowIDs []uint32
	// sums are the records' sums per address (addrsums.go).
	sumsMu sync.Mutex
	sums   *segAddrSums
	// synRows are the rows the service pass reads, found once
	// (segment.syns).
	synMu   sync.Mutex
	synRows *synRows
	addrs   []byte // 16 bytes per entry
	fams    []byte // one per address entry
	macs    []byte // 6 bytes per entry
	names   []byte // kindNames block, decoded by nameDict
	nAddr   int
	nMAC    int
}

// mapSegment maps an open segment file and verifies its header, and the
// whole file too if full is set. Segments are immutable and only ever
// unlinked, never truncated in place, so a mapping stays valid for as long
// as we hold it even if the writer deletes the file.
func mapSegment(f *os.File, path string, full bool) (*segment, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat segment %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, unreadable(path, fmt.Errorf("not a regular file (%s)", fi.Mode().Type()))
	}
	size := fi.Size()
	if size < headerFixed+trailerSize {
		return nil, corruptf(path, "file is %d bytes, shorter than a header", size)
	}
	if size > math.MaxInt {
		return nil, corruptf(path, "file is too large to map (%d bytes)", size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENODEV) {
			return nil, unreadable(path, fmt.Errorf("mmap: %w", err))
		}
		return nil, fmt.Errorf("mmap segment %s: %w", path, err)
	}
	s, err := parseSegment(data, path)
	if err == nil && full {
		err = s.verifyAll()
	}
	if err != nil {
		syscall.Munmap(data)
		return nil, err
	}
	s.mapped = true
	return s, nil
}

// release unmaps the segment; its slices must not be used afterwards.
func (s *segment) release() {
	if s != nil && s.mapped {
		syscall.Munmap(s.data)
		s.data, s.mapped = nil, false
	}
}

// parseSegment checks the length, the trailer and the header CRC before
// trusting any offset, then checks every block against the record count so
// that query loops can index columns without further length checks. It
// reads nothing but the header: block contents are verified by verify or
// verifyAll.
func parseSegment(data []byte, path string) (*segment, error) {
	size := len(data)
	if size < headerFixed+trailerSize {
		return nil, corruptf(path, "file is %d bytes, shorter than a header", size)
	}
	if string(data[:8]) != segMagic {
		return nil, corruptf(path, "bad magic %q", data[:8])
	}
	if v := le.Uint16(data[8:]); v != segVersion {
		return nil, corruptf(path, "unsupported format version %d (this build reads %d)", v, segVersion)
	}
	if total := le.Uint64(data[16:]); total != uint64(size) {
		return nil, corruptf(path, "file is %d bytes, header says %d (truncated?)", size, total)
	}
	if string(data[size-4:]) != trailerMagic {
		return nil, corruptf(path, "bad trailer (truncated?)")
	}
	body := data[:size-trailerSize]
	s := &segment{
		path:     path,
		data:     data,
		id:       le.Uint64(data[24:]),
		minFirst: int64(le.Uint64(data[40:])),
		maxLast:  int64(le.Uint64(data[48:])),
		maxFirst: int64(le.Uint64(data[56:])),
		minLast:  int64(le.Uint64(data[64:])),
	}
	nBlocks := uint64(le.Uint32(data[12:]))
	n := le.Uint64(data[32:])
	nRepl := uint64(le.Uint32(data[72:]))
	dirOff := headerFixed + 8*nRepl
	hdrEnd := dirOff + dirEntrySize*nBlocks
	if n > uint64(len(body)) || hdrEnd+4 > uint64(len(body)) {
		return nil, corruptf(path, "header counts exceed the file")
	}
	if crc32c(data[:hdrEnd]) != le.Uint32(data[hdrEnd:]) {
		return nil, corruptf(path, "header CRC32C mismatch")
	}
	s.n = int(n)
	s.replaces = make([]uint64, nRepl)
	for i := range s.replaces {
		s.replaces[i] = le.Uint64(data[headerFixed+8*i:])
	}
	var seen [numBlocks]bool
	for i := range nBlocks {
		e := data[dirOff+dirEntrySize*i:]
		kind, width := le.Uint32(e), uint64(le.Uint32(e[4:]))
		off, length := le.Uint64(e[8:]), le.Uint64(e[16:])
		if off > uint64(len(body)) || length > uint64(len(body))-off {
			return nil, corruptf(path, "block kind %d at %d+%d is outside the file", kind, off, length)
		}
		var b int
		switch {
		case kind >= 1 && kind <= numCols:
			b = int(kind - 1)
			if width != uint64(colWidth(b)) || length != n*width {
				return nil, corruptf(path, "column %d: width %d length %d for %d records", kind, width, length, n)
			}
		case kind >= kindAddrDict && kind <= kindNames:
			b = bAddrDict + int(kind-kindAddrDict)
			if want := [...]uint64{16, 1, 6, 0}[b-bAddrDict]; width != want || (width > 0 && length%width != 0) {
				return nil, corruptf(path, "dictionary block %d has width %d length %d", kind, width, length)
			}
		default:
			continue // unknown kinds: a later minor revision may add blocks
		}
		s.blk[b], s.blkCRC[b], seen[b] = body[off:off+length], le.Uint32(e[24:]), true
	}
	for _, lc := range laterCols {
		if seen[lc.col] {
			continue
		}
		seen[lc.col] = true
		switch {
		case lc.from >= 0 && seen[lc.from]:
			s.blk[lc.col], s.blkCRC[lc.col] = s.blk[lc.from], s.blkCRC[lc.from]
		case sparseCol(lc.col):
			s.verified[lc.col] = true // empty: every record exact
		default:
			s.blk[lc.col], s.verified[lc.col] = make([]byte, n*uint64(colWidth(lc.col))), true
		}
	}
	for b, ok := range seen {
		if !ok {
			return nil, corruptf(path, "block %d missing", b)
		}
	}
	copy(s.cols[:], s.blk[:numCols])
	s.addrs, s.fams, s.macs, s.names = s.blk[bAddrDict], s.blk[bAddrFam], s.blk[bMACDict], s.blk[bNames]
	s.nAddr, s.nMAC = len(s.addrs)/16, len(s.macs)/6
	if len(s.fams) != s.nAddr {
		return nil, corruptf(path, "%d address families for %d addresses", len(s.fams), s.nAddr)
	}
	return s, nil
}

// verifyAll checks the whole-file CRC, which covers every block.
func (s *segment) verifyAll() error {
	body := s.data[:len(s.data)-trailerSize]
	want := le.Uint32(s.data[len(s.data)-trailerSize:])
	if got := crc32c(body); got != want {
		return corruptf(s.path, "CRC32C mismatch: stored %08x, computed %08x", want, got)
	}
	for b := range s.verified {
		s.verified[b] = true
	}
	if _, err := s.nameDict(); err != nil {
		return err
	}
	return nil
}

// verify checks the CRCs of the given blocks (once each).
func (s *segment) verify(blocks ...int) error {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	for _, b := range blocks {
		if s.verified[b] {
			continue
		}
		if got := crc32c(s.blk[b]); got != s.blkCRC[b] {
			return corruptf(s.path, "block %d: CRC32C mismatch: stored %08x, computed %08x", b, s.blkCRC[b], got)
		}
		s.verified[b] = true
	}
	return nil
}

// nameDict decodes the interface name dictionary.
func (s *segment) nameDict() ([]string, error) {
	b := s.names
	if len(b) < 4 {
		return nil, corruptf(s.path, "name dictionary too short")
	}
	k := uint64(le.Uint32(b))
	if 4+4*(k+1) > uint64(len(b)) {
		return nil, corruptf(s.path, "name dictionary of %d entries does not fit", k)
	}
	strs := b[4+4*(k+1):]
	names := make([]string, k)
	prev := uint32(0)
	for i := range names {
		lo, hi := le.Uint32(b[4+4*i:]), le.Uint32(b[8+4*i:])
		if lo != prev || hi < lo || uint64(hi) > uint64(len(strs)) {
			return nil, corruptf(s.path, "name dictionary offsets out of order")
		}
		names[i] = string(strs[lo:hi])
		prev = hi
	}
	return names, nil
}

func (s *segment) addrKey(i uint32) addrKey {
	var k addrKey
	copy(k.a[:], s.addrs[16*i:])
	k.fam = s.fams[i]
	return k
}

func (s *segment) mac(i uint32) [6]byte {
	var m [6]byte
	copy(m[:], s.macs[6*i:])
	return m
}

// recordDecoder turns rows of a verified segment back into flow.Records.
type recordDecoder struct {
	s     *segment
	names []string
}

func newRecordDecoder(s *segment) (*recordDecoder, error) {
	names, err := s.nameDict()
	if err != nil {
		return nil, err
	}
	return &recordDecoder{s: s, names: names}, nil
}

// decode fills r with row i. Dictionary indices are checked here because the
// CRC only proves the file is what the writer wrote, not that it is sane.
func (d *recordDecoder) decode(i int, r *flow.Record) error {
	c := &d.s.cols
	src, dst := le.Uint32(c[cSrcAddr][4*i:]), le.Uint32(c[cDstAddr][4*i:])
	smac, dmac := le.Uint32(c[cSrcMAC][4*i:]), le.Uint32(c[cDstMAC][4*i:])
	iface := le.Uint32(c[cIface][4*i:])
	if src >= uint32(d.s.nAddr) || dst >= uint32(d.s.nAddr) ||
		smac >= uint32(d.s.nMAC) || dmac >= uint32(d.s.nMAC) || iface >= uint32(len(d.names)) {
		return corruptf(d.s.path, "record %d: dictionary index out of range", i)
	}
	*r = flow.Record{
		Key: flow.Key{
			SrcMAC:    d.s.mac(smac),
			DstMAC:    d.s.mac(dmac),
			IfIndex:   le.Uint32(c[cIfIndex][4*i:]),
			EtherType: le.Uint16(c[cEthType][2*i:]),
			SrcPort:   le.Uint16(c[cSrcPort][2*i:]),
			DstPort:   le.Uint16(c[cDstPort][2*i:]),
			VlanID:    le.Uint16(c[cVlanID][2*i:]),
			Proto:     c[cProto][i],
			Direction: flow.Direction(c[cDirection][i]),
			AggPrefix: c[cAggPrefix][i],
		},
		Iface:     d.names[iface],
		Packets:   le.Uint64(c[cPackets][8*i:]),
		Bytes:     le.Uint64(c[cBytes][8*i:]),
		Segments:  le.Uint64(c[cSegments][8*i:]),
		WireBytes: le.Uint64(c[cWireBytes][8*i:]),
		FirstSeen: nsTime(int64(le.Uint64(c[cFirst][8*i:]))),
		LastSeen:  nsTime(int64(le.Uint64(c[cLast][8*i:]))),
		Sampling:  le.Uint32(c[cSampling][4*i:]),
		TCPFlags:  le.Uint16(c[cTCPFlags][2*i:]),
		DSCP:      c[cDSCP][i],

		Accuracy:        flow.Accuracy(sparseU8(c[cAccuracy], i)),
		MaxErrorPackets: sparseU64(c[cMaxErrPackets], i),
		MaxErrorBytes:   sparseU64(c[cMaxErrBytes], i),
		ErrorConfidence: math.Float64frombits(sparseU64(c[cErrConfidence], i)),

		Has:            flow.Presence(sparseU32(c[cPresence], i)),
		RTTMinNs:       sparseU64(c[cRTTMin], i),
		RTTMaxNs:       sparseU64(c[cRTTMax], i),
		RTTLastNs:      sparseU64(c[cRTTLast], i),
		HandshakeRTTNs: sparseU64(c[cHandshakeRTT], i),
		Retransmits:    sparseU64(c[cRetransmits], i),
		DropPackets:    sparseU64(c[cDropPackets], i),
		DropBytes:      sparseU64(c[cDropBytes], i),
		DNSID:          sparseU16(c[cDNSID], i),
		DNSRcode:       sparseU16(c[cDNSRcode], i),
		DNSLatencyNs:   sparseU64(c[cDNSLatency], i),
		TunnelType:     tunnel.Type(sparseU8(c[cTunnelType], i)),
		TunnelID:       sparseU32(c[cTunnelID], i),
		OuterSrcPort:   sparseU16(c[cOuterSrcPort], i),
		OuterDstPort:   sparseU16(c[cOuterDstPort], i),
	}
	copy(r.SrcAddr[:], d.s.addrs[16*src:])
	copy(r.DstAddr[:], d.s.addrs[16*dst:])
	return d.decodeOptional(i, r)
}

// decodeOptional reads the dictionary columns of the fields present only
// where measured: indices plus one, 0 for none.
func (d *recordDecoder) decodeOptional(i int, r *flow.Record) error {
	c := &d.s.cols
	name := func(col int) (string, bool, error) {
		x := sparseU32(c[col], i)
		if x == 0 {
			return "", false, nil
		}
		if x > uint32(len(d.names)) {
			return "", false, corruptf(d.s.path, "record %d: column %d: string index out of range", i, col+1)
		}
		return d.names[x-1], true, nil
	}
	ip := func(col int) (netip.Addr, error) {
		x := sparseU32(c[col], i)
		if x == 0 {
			return netip.Addr{}, nil
		}
		if x > uint32(d.s.nAddr) {
			return netip.Addr{}, corruptf(d.s.path, "record %d: column %d: address index out of range", i, col+1)
		}
		k := d.s.addrKey(x - 1)
		switch k.fam {
		case famV4:
			return netip.AddrFrom16(k.a).Unmap(), nil
		case famV6:
			return netip.AddrFrom16(k.a), nil
		}
		return netip.Addr{}, corruptf(d.s.path, "record %d: column %d: an outer address of no IP family", i, col+1)
	}
	var err error
	if r.DNSQName, _, err = name(cDNSQName); err != nil {
		return err
	}
	reasons, ok, err := name(cDropReasons)
	if err != nil {
		return err
	}
	if ok {
		if r.DropReasons, err = parseReasons(reasons); err != nil {
			return corruptf(d.s.path, "record %d: drop reasons %q: %v", i, reasons, err)
		}
	}
	if r.OuterSrcAddr, err = ip(cOuterSrcAddr); err != nil {
		return err
	}
	if r.OuterDstAddr, err = ip(cOuterDstAddr); err != nil {
		return err
	}
	return d.decodeK8s(i, r, name)
}

// decodeK8s reads the Kubernetes names, if the segment has them: a record
// without any has no K8s.
func (d *recordDecoder) decodeK8s(i int, r *flow.Record, name func(col int) (string, bool, error)) error {
	c := &d.s.cols
	if len(c[cSrcKind]) == 0 && len(c[cDstKind]) == 0 && len(c[cIfacePod]) == 0 {
		return nil // a segment without names (or from before them)
	}
	k := flow.K8s{Src: flow.K8sEnd{Kind: flow.K8sKind(sparseU8(c[cSrcKind], i))}, Dst: flow.K8sEnd{Kind: flow.K8sKind(sparseU8(c[cDstKind], i))}}
	for j, p := range k8sNamePtrs(&k) {
		var err error
		if *p, _, err = name(k8sNameCols[j]); err != nil {
			return err
		}
	}
	if k != (flow.K8s{}) {
		r.K8s = &k
	}
	return nil
}

// parseReasons reads drop reasons as the strings dictionary holds them:
// flow.DropReasons.String's "NAME=packets,...".
func parseReasons(s string) (flow.DropReasons, error) {
	out := flow.DropReasons{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		name, n, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("no name=packets in %q", kv)
		}
		v, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

// sparseU8, sparseU16, sparseU32 and sparseU64 read element i of a sparse
// column (sparseCol), which is empty where it would be all zeros.
func sparseU8(col []byte, i int) uint8 {
	if len(col) == 0 {
		return 0
	}
	return col[i]
}

func sparseU64(col []byte, i int) uint64 {
	if len(col) == 0 {
		return 0
	}
	return le.Uint64(col[8*i:])
}

func sparseU32(col []byte, i int) uint32 {
	if len(col) == 0 {
		return 0
	}
	return le.Uint32(col[4*i:])
}

func sparseU16(col []byte, i int) uint16 {
	if len(col) == 0 {
		return 0
	}
	return le.Uint16(col[2*i:])
}

// checkIndex verifies once that every index in dictionary column c is below
// limit, so that query loops can use the column without per-record checks.
func (s *segment) checkIndex(c, limit int) error {
	// A segment is immutable: its largest index in a column is too, and
	// a Reader's queries share a cached segment (segcache.go).
	s.vmu.Lock()
	defer s.vmu.Unlock()
	if s.indexOK[c] == limit+1 {
		return nil
	}
	b := s.cols[c]
	var hi uint32
	for i := 0; i+4 <= len(b); i += 4 {
		hi = max(hi, le.Uint32(b[i:]))
	}
	if s.n > 0 && uint64(hi) >= uint64(limit) {
		return corruptf(s.path, "column %d: index %d out of dictionary of %d", c+1, hi, limit)
	}
	s.indexOK[c] = limit + 1
	return nil
}
