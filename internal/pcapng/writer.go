package pcapng

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Direction is a packet's direction relative to the interface it was
// captured on.
type Direction uint8

// The values are those of epb_flags bits 0-1.
const (
	DirectionUnknown Direction = 0
	Inbound          Direction = 1
	Outbound         Direction = 2
)

// known reports whether d is Inbound or Outbound; any other value is
// written as unknown (no epb_flags).
func (d Direction) known() bool { return d == Inbound || d == Outbound }

func (d Direction) String() string {
	switch d {
	case Inbound:
		return "in"
	case Outbound:
		return "out"
	}
	return "unknown"
}

// LinkType is the LINKTYPE_ value of an interface: what a packet's data
// starts with.
type LinkType uint16

const (
	// LinkTypeEthernet: an Ethernet header (also what a zero LinkType in
	// a Packet means).
	LinkTypeEthernet LinkType = 1
	// LinkTypeRaw: an IPv4 or IPv6 header, for devices without a link
	// layer (tun, WireGuard).
	LinkTypeRaw LinkType = 101
)

// MaxSnapLen is the largest snap length written: Wireshark refuses an
// Ethernet packet whose captured length is larger (and stops reading the
// file there), and 262144 is tcpdump's default snap length.
const MaxSnapLen = 262144

// Packet is one captured packet.
type Packet struct {
	TimeNs    int64     // capture time, nanoseconds since the Unix epoch
	Ifindex   uint32    // interface index
	IfName    string    // interface name ("" if unknown)
	LinkType  LinkType  // 0 means LinkTypeEthernet
	Direction Direction // relative to the interface
	// OrigLen is the packet's length on the wire. 0, or anything less
	// than len(Data), means len(Data).
	OrigLen uint32
	// Data is the packet from its link-layer header; the Writer cuts it
	// to the snap length.
	Data []byte
	// Comment says why the packet was captured, e.g.
	// "trigger=http.status=500-599 status=500 GET /bar" ("" for none).
	Comment string
}

// Options configure a Writer.
type Options struct {
	// UserAppl names the writer in the section header (shb_userappl),
	// e.g. "loupe 0.4.0".
	UserAppl string
	// OS is shb_os; "" means this host's ("Linux 6.1.0-28-amd64").
	OS string
	// Comment is a comment on the section (the capture as a whole).
	Comment string
	// SnapLen is the largest captured length (if_snaplen); longer packets
	// are cut. 0, or anything above MaxSnapLen, means MaxSnapLen.
	SnapLen uint32
}

// Block types and option codes (draft-ietf-opsawg-pcapng).
const (
	blockSHB = 0x0A0D0D0A
	blockIDB = 0x00000001
	blockEPB = 0x00000006

	byteOrderMagic = 0x1A2B3C4D

	optEndOfOpt   = 0
	optComment    = 1
	optSHBOS      = 3
	optSHBUserApp = 4
	optIfName     = 2
	optIfDesc     = 3
	optIfTsresol  = 9
	optEPBFlags   = 2

	maxOptLen = 0xffff
	// flushAt is how much the Writer gathers before writing through.
	flushAt = 64 << 10
	// epbFixed is an EPB without data and options: type, length,
	// interface, two timestamp words, two lengths, trailing length.
	epbFixed = 32
)

var le = binary.LittleEndian

type ifaceKey struct {
	ifindex uint32
	name    string
	link    LinkType
}

// Writer encodes one pcapng section onto an io.Writer. It gathers blocks
// in memory and writes them through in pieces of about 64 KiB; Flush writes
// what is gathered. A Writer is not safe for concurrent use.
type Writer struct {
	dst    io.Writer
	opts   Options
	buf    []byte
	ifaces map[ifaceKey]uint32
	// last is the previous packet's interface, lastID its ID: packets
	// come in runs from one interface, and a map lookup hashes a string.
	last    ifaceKey
	lastID  uint32
	hasLast bool
	written int64 // bytes handed to dst
	err     error // sticky: the stream is broken after a failed write
	// valid is the last packet comment found to be valid UTF-8 of at
	// most maxOptLen bytes: the packets of a trace share one comment
	// string, and comparing a string with itself costs no scan.
	valid string
}

// NewWriter returns a Writer that starts a section on w. Nothing is
// written to w before the first WritePacket or Flush.
func NewWriter(w io.Writer, opts Options) *Writer {
	if opts.SnapLen == 0 || opts.SnapLen > MaxSnapLen {
		opts.SnapLen = MaxSnapLen
	}
	if opts.OS == "" {
		opts.OS = hostOS()
	}
	wr := &Writer{opts: opts, buf: make([]byte, 0, flushAt+16<<10), ifaces: make(map[ifaceKey]uint32)}
	wr.Reset(w)
	return wr
}

// hostOS is "<sysname> <release>" from uname, or "Linux".
func hostOS() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "Linux"
	}
	return unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
}

// Reset discards anything not yet written and starts a new section on w:
// a new Section Header Block, and interfaces announced again as packets
// use them. The buffers are kept.
func (w *Writer) Reset(dst io.Writer) {
	w.dst = dst
	w.buf = w.buf[:0]
	w.written = 0
	w.err = nil
	clear(w.ifaces)
	w.hasLast = false
	w.appendSHB()
}

// Size is the number of bytes of the section so far, written or gathered.
func (w *Writer) Size() int64 { return w.written + int64(len(w.buf)) }

// PacketSize is the number of bytes WritePacket(p) would add to the
// section: its Enhanced Packet Block, and an Interface Description Block if
// p's interface is new to the section.
func (w *Writer) PacketSize(p *Packet) int {
	n := epbFixed + pad4(w.capLen(p)) + w.epbOptsLen(p)
	if _, ok := w.lookup(keyOf(p)); !ok {
		n += w.idbLen(p)
	}
	return n
}

// ErrTimestamp is returned for a packet stamped before the epoch.
var ErrTimestamp = errors.New("pcapng: negative packet timestamp")

// WritePacket adds p to the section, announcing its interface first if the
// section has not seen it. It writes through to the destination when
// enough is gathered; an error from the destination breaks the stream, and
// every later call returns it until Reset.
func (w *Writer) WritePacket(p *Packet) error {
	if w.err != nil {
		return w.err
	}
	if p.TimeNs < 0 {
		return fmt.Errorf("%w: %d", ErrTimestamp, p.TimeNs)
	}
	key := keyOf(p)
	id, ok := w.lookup(key)
	if !ok {
		id = uint32(len(w.ifaces))
		w.ifaces[key] = id
		w.appendIDB(p)
	}
	w.last, w.lastID, w.hasLast = key, id, true
	w.appendEPB(id, p)
	if len(w.buf) >= flushAt {
		return w.Flush()
	}
	return nil
}

// Flush writes everything gathered to the destination. After an empty
// section is flushed, the destination holds a valid capture of no packets.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	n, err := w.dst.Write(w.buf)
	w.written += int64(n)
	if err == nil && n < len(w.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("pcapng: write: %w", err)
		return w.err
	}
	w.buf = w.buf[:0]
	return nil
}

// lookup returns the ID of an announced interface.
func (w *Writer) lookup(key ifaceKey) (uint32, bool) {
	if w.hasLast && key == w.last {
		return w.lastID, true
	}
	id, ok := w.ifaces[key]
	return id, ok
}

func keyOf(p *Packet) ifaceKey {
	return ifaceKey{ifindex: p.Ifindex, name: p.IfName, link: linkOf(p)}
}

func linkOf(p *Packet) LinkType {
	if p.LinkType == 0 {
		return LinkTypeEthernet
	}
	return p.LinkType
}

func (w *Writer) capLen(p *Packet) int {
	return min(len(p.Data), int(w.opts.SnapLen))
}

func pad4(n int) int { return (n + 3) &^ 3 }

// optLen is the size of an option holding n bytes of value.
func optLen(n int) int { return 4 + pad4(n) }

// appendSHB appends the Section Header Block.
func (w *Writer) appendSHB() {
	start := w.beginBlock(blockSHB)
	w.buf = le.AppendUint32(w.buf, byteOrderMagic)
	w.buf = le.AppendUint16(w.buf, 1) // major version
	w.buf = le.AppendUint16(w.buf, 0) // minor version
	w.buf = le.AppendUint64(w.buf, ^uint64(0))
	w.appendStringOpt(optComment, w.opts.Comment)
	w.appendStringOpt(optSHBOS, w.opts.OS)
	w.appendStringOpt(optSHBUserApp, w.opts.UserAppl)
	w.buf = le.AppendUint32(w.buf, optEndOfOpt)
	w.endBlock(start)
}

// idbLen is the size of the Interface Description Block for p's interface.
func (w *Writer) idbLen(p *Packet) int {
	n := 16 + optLen(1) + optLen(len("ifindex ")+digits(p.Ifindex)) + 4 + 4
	if p.IfName != "" {
		n += optLen(stringLen(p.IfName))
	}
	return n
}

// appendIDB appends an Interface Description Block for p's interface.
func (w *Writer) appendIDB(p *Packet) {
	start := w.beginBlock(blockIDB)
	w.buf = le.AppendUint16(w.buf, uint16(linkOf(p)))
	w.buf = le.AppendUint16(w.buf, 0) // reserved
	w.buf = le.AppendUint32(w.buf, w.opts.SnapLen)
	w.appendStringOpt(optIfName, p.IfName)
	// if_description "ifindex N", formatted in place.
	opt := len(w.buf)
	w.buf = le.AppendUint32(w.buf, 0)
	w.buf = append(w.buf, "ifindex "...)
	w.buf = strconv.AppendUint(w.buf, uint64(p.Ifindex), 10)
	w.finishOpt(opt, optIfDesc)
	w.buf = le.AppendUint16(w.buf, optIfTsresol)
	w.buf = le.AppendUint16(w.buf, 1)
	w.buf = append(w.buf, 9, 0, 0, 0) // 10^-9 s, padded
	w.buf = le.AppendUint32(w.buf, optEndOfOpt)
	w.endBlock(start)
}

// epbOptsLen is the size of p's Enhanced Packet Block options.
func (w *Writer) epbOptsLen(p *Packet) int {
	n := 0
	if p.Direction.known() {
		n += optLen(4)
	}
	if p.Comment != "" {
		n += optLen(w.commentLen(p.Comment))
	}
	if n > 0 {
		n += 4 // opt_endofopt
	}
	return n
}

// appendEPB appends p's Enhanced Packet Block on interface id.
func (w *Writer) appendEPB(id uint32, p *Packet) {
	capLen := w.capLen(p)
	orig := max(p.OrigLen, uint32(len(p.Data)))
	ts := uint64(p.TimeNs)
	start := w.beginBlock(blockEPB)
	w.buf = le.AppendUint32(w.buf, id)
	w.buf = le.AppendUint32(w.buf, uint32(ts>>32))
	w.buf = le.AppendUint32(w.buf, uint32(ts))
	w.buf = le.AppendUint32(w.buf, uint32(capLen))
	w.buf = le.AppendUint32(w.buf, orig)
	w.buf = append(w.buf, p.Data[:capLen]...)
	w.buf = append(w.buf, zeros[:pad4(capLen)-capLen]...)
	if p.Direction.known() || p.Comment != "" {
		if p.Direction.known() {
			w.buf = le.AppendUint16(w.buf, optEPBFlags)
			w.buf = le.AppendUint16(w.buf, 4)
			w.buf = le.AppendUint32(w.buf, uint32(p.Direction))
		}
		if p.Comment != "" && w.validComment(p.Comment) {
			// Valid as it is: appendStringOpt's check, made once.
			opt := len(w.buf)
			w.buf = le.AppendUint32(w.buf, 0)
			w.buf = append(w.buf, p.Comment...)
			w.finishOpt(opt, optComment)
		} else {
			w.appendStringOpt(optComment, p.Comment)
		}
		w.buf = le.AppendUint32(w.buf, optEndOfOpt)
	}
	w.endBlock(start)
}

var zeros [4]byte

// beginBlock appends a block's type and a placeholder for its length, and
// returns where the block starts.
func (w *Writer) beginBlock(typ uint32) int {
	start := len(w.buf)
	w.buf = le.AppendUint32(w.buf, typ)
	w.buf = le.AppendUint32(w.buf, 0)
	return start
}

// endBlock appends the trailing length and fills in the leading one.
func (w *Writer) endBlock(start int) {
	n := uint32(len(w.buf) - start + 4)
	w.buf = le.AppendUint32(w.buf, n)
	le.PutUint32(w.buf[start+4:], n)
}

// appendStringOpt appends option code holding s as UTF-8 (see
// appendString), unless s is empty.
func (w *Writer) appendStringOpt(code uint16, s string) {
	if s == "" {
		return
	}
	opt := len(w.buf)
	w.buf = le.AppendUint32(w.buf, 0)
	w.buf = appendString(w.buf, s)
	w.finishOpt(opt, code)
}

// finishOpt fills in the header of the option starting at opt, whose value
// runs to the end of the buffer, and pads the value.
func (w *Writer) finishOpt(opt int, code uint16) {
	n := len(w.buf) - opt - 4
	le.PutUint16(w.buf[opt:], code)
	le.PutUint16(w.buf[opt+2:], uint16(n))
	w.buf = append(w.buf, zeros[:pad4(n)-n]...)
}

// appendString appends s as valid UTF-8 of at most maxOptLen bytes: each
// invalid byte becomes U+FFFD, and s is cut at a character boundary.
func appendString(dst []byte, s string) []byte {
	if len(s) <= maxOptLen && utf8.ValidString(s) {
		return append(dst, s...)
	}
	n := 0
	for _, r := range s { // invalid bytes come as utf8.RuneError
		size := utf8.RuneLen(r)
		if n+size > maxOptLen {
			break
		}
		dst = utf8.AppendRune(dst, r)
		n += size
	}
	return dst
}

// validComment tells whether s can be written as it is (valid UTF-8 of
// at most maxOptLen bytes), remembering the last s that can. Tested as
// such, not inferred from stringLen: an invalid byte grows by two and a
// cut can take two back, so a length that stays the same says nothing.
func (w *Writer) validComment(s string) bool {
	if s == w.valid {
		return true
	}
	if len(s) <= maxOptLen && utf8.ValidString(s) {
		w.valid = s
		return true
	}
	return false
}

// commentLen is stringLen(s), without its scan for a valid s.
func (w *Writer) commentLen(s string) int {
	if w.validComment(s) {
		return len(s)
	}
	return stringLen(s)
}

// stringLen is len(appendString(nil, s)).
func stringLen(s string) int {
	if len(s) <= maxOptLen && utf8.ValidString(s) {
		return len(s)
	}
	n := 0
	for _, r := range s {
		size := utf8.RuneLen(r)
		if n+size > maxOptLen {
			break
		}
		n += size
	}
	return n
}

// digits is the number of decimal digits of v.
func digits(v uint32) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}
