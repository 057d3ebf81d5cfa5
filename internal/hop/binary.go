package hop

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// The binary form of a Request: what the store's latency log keeps (format
// version 2). JSON is what `loupe latency` prints, but encoding every record
// as JSON at the rate a loaded node makes them, and writing it, took more
// of the agent's CPU than matching the records did; this form is a third
// of the bytes and costs a copy per field.
//
//	u8      flags: binTraceRaw (trace id as 16 bytes, else a string),
//	        binSpanRaw (span id as 8 bytes, else a string), binClockSync,
//	        binTimeSet (a time follows)
//	...     trace id, span id (raw or string, as flags say)
//	str     trace source, kind
//	addr    source, destination (uvarint length, then netip's binary form)
//	u16 u16 source port, destination port
//	u8      protocol
//	u32     sequence number
//	i64     time, unix ns (if binTimeSet)
//	str     node, boot id
//	i64     clock offset (ns)
//	uvarint hops, each: str from_iface, to_iface, direction; i64 latency;
//	        str from_node, to_node, from_pod, to_pod (none written when
//	        binHopsOfPath: they are Hops(path), as the matcher makes them)
//	uvarint points, each: str iface; u32 ifindex; str kind, pod, hook;
//	        u64 time_ns; u8 tunneled; u32 seq, len
//
// str is a uvarint length and the bytes; integers are little endian. A
// nil Hops or Path reads back nil, an empty one empty (binNilHops,
// binNilPath), as JSON keeps them apart.
const (
	binTraceRaw = 1 << iota
	binSpanRaw
	binClockSync
	binTimeSet
	binNilHops
	binNilPath
	binHopsOfPath
)

// AppendBinary appends r's binary form to b.
func (r *Request) AppendBinary(b []byte) []byte {
	var flags byte
	trace, traceRaw := rawID(r.TraceID, 16)
	span, spanRaw := rawID(r.SpanID, 8)
	if traceRaw {
		flags |= binTraceRaw
	}
	if spanRaw {
		flags |= binSpanRaw
	}
	if r.ClockSync {
		flags |= binClockSync
	}
	if !r.Time.IsZero() {
		flags |= binTimeSet
	}
	if r.Hops == nil {
		flags |= binNilHops
	}
	if r.Path == nil {
		flags |= binNilPath
	}
	ofPath := r.Hops != nil && hopsOfPath(r.Hops, r.Path)
	if ofPath {
		flags |= binHopsOfPath
	}
	b = append(b, flags)
	if traceRaw {
		b = append(b, trace[:16]...)
	} else {
		b = appendStr(b, r.TraceID)
	}
	if spanRaw {
		b = append(b, span[:8]...)
	} else {
		b = appendStr(b, r.SpanID)
	}
	b = appendStr(b, r.TraceSource)
	b = appendStr(b, r.Kind)
	b = appendAddr(b, r.SrcAddr)
	b = appendAddr(b, r.DstAddr)
	b = binary.LittleEndian.AppendUint16(b, r.SrcPort)
	b = binary.LittleEndian.AppendUint16(b, r.DstPort)
	b = append(b, r.Proto)
	b = binary.LittleEndian.AppendUint32(b, r.Seq)
	if !r.Time.IsZero() {
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Time.UnixNano()))
	}
	b = appendStr(b, r.Node)
	b = appendStr(b, r.BootID)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.ClockOffsetNs))
	if ofPath {
		b = append(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(r.Hops)))
	}
	for i := range r.Hops {
		if ofPath {
			break
		}
		h := &r.Hops[i]
		b = appendStr(b, h.FromIface)
		b = appendStr(b, h.ToIface)
		b = appendStr(b, h.Direction)
		b = binary.LittleEndian.AppendUint64(b, uint64(h.LatencyNs))
		b = appendStr(b, h.FromNode)
		b = appendStr(b, h.ToNode)
		b = appendStr(b, h.FromPod)
		b = appendStr(b, h.ToPod)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Path)))
	for i := range r.Path {
		p := &r.Path[i]
		b = appendStr(b, p.Iface)
		b = binary.LittleEndian.AppendUint32(b, p.IfIndex)
		b = appendStr(b, p.Kind)
		b = appendStr(b, p.Pod)
		b = appendStr(b, p.Hook)
		b = binary.LittleEndian.AppendUint64(b, p.TimeNs)
		var tun byte
		if p.Tunneled {
			tun = 1
		}
		b = append(b, tun)
		b = binary.LittleEndian.AppendUint32(b, p.Seq)
		b = binary.LittleEndian.AppendUint32(b, p.Len)
	}
	return b
}

// hopsOfPath tells whether hops are what Hops makes of path.
func hopsOfPath(hops []Hop, path []Point) bool {
	if len(path) < 2 || len(hops) != len(path)-1 || len(path) > 8 {
		return false
	}
	var buf [7]Hop
	return slices.Equal(hops, appendHops(buf[:0], path))
}

// rawID is id's bytes when it is n bytes in lowercase hex, as hexID writes
// it (the decoder gives back the same string).
func rawID(id string, n int) ([16]byte, bool) {
	var out [16]byte
	if len(id) != 2*n {
		return out, false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return out, false
		}
	}
	if _, err := hex.Decode(out[:n], []byte(id)); err != nil {
		return out, false
	}
	return out, true
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendAddr(b []byte, a netip.Addr) []byte {
	// The length in one byte, written once the address is: 0, 4 or 16
	// bytes and a zone, which is an interface name. AppendBinary never
	// fails, and unlike MarshalBinary does not allocate.
	at := len(b)
	b = append(b, 0)
	b, _ = a.AppendBinary(b)
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	m := append([]byte(nil), b[at+1:]...)
	return append(binary.AppendUvarint(b[:at], uint64(n)), m...)
}

// errBinShort is a record that ends before its fields do.
var errBinShort = errors.New("latency record cut short")

// binReader takes a record's fields in turn; the first error sticks.
type binReader struct {
	b   []byte
	err error
}

func (d *binReader) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b) < n {
		d.err = errBinShort
		d.b = nil
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *binReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBinShort
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count is a length or a count, bounded by the bytes left (each element
// takes at least one).
func (d *binReader) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err, d.b = errBinShort, nil
		return 0
	}
	return int(n)
}

func (d *binReader) str() string     { return string(d.take(d.count())) }
func (d *binReader) u8() byte        { return d.fixed(1)[0] }
func (d *binReader) u16() uint16     { return binary.LittleEndian.Uint16(d.fixed(2)) }
func (d *binReader) u32() uint32     { return binary.LittleEndian.Uint32(d.fixed(4)) }
func (d *binReader) u64() uint64     { return binary.LittleEndian.Uint64(d.fixed(8)) }
func (d *binReader) id(n int) string { return hex.EncodeToString(d.take(n)) }

// fixed is n bytes, zeroes once an error stuck (so the callers above need
// no test of their own).
func (d *binReader) fixed(n int) []byte {
	if v := d.take(n); v != nil {
		return v
	}
	return make([]byte, n)
}

func (d *binReader) addr() netip.Addr {
	var a netip.Addr
	if m := d.take(d.count()); d.err == nil {
		if err := a.UnmarshalBinary(m); err != nil {
			d.err = err
		}
	}
	return a
}

// DecodeBinary reads a Request that AppendBinary wrote.
func DecodeBinary(b []byte) (*Request, error) {
	d := &binReader{b: b}
	r := &Request{}
	flags := d.u8()
	if flags&binTraceRaw != 0 {
		r.TraceID = d.id(16)
	} else {
		r.TraceID = d.str()
	}
	if flags&binSpanRaw != 0 {
		r.SpanID = d.id(8)
	} else {
		r.SpanID = d.str()
	}
	r.TraceSource = d.str()
	r.Kind = d.str()
	r.SrcAddr = d.addr()
	r.DstAddr = d.addr()
	r.SrcPort = d.u16()
	r.DstPort = d.u16()
	r.Proto = d.u8()
	r.Seq = d.u32()
	if flags&binTimeSet != 0 {
		r.Time = time.Unix(0, int64(d.u64())).UTC()
	}
	r.Node = d.str()
	r.BootID = d.str()
	r.ClockOffsetNs = int64(d.u64())
	r.ClockSync = flags&binClockSync != 0
	// Hops of the path are made from it, once it is read.
	if n := d.count(); flags&binHopsOfPath != 0 {
		if n != 0 {
			d.err = errors.New("latency record: hops both written and of the path")
		}
	} else if n > 0 || flags&binNilHops == 0 {
		r.Hops = make([]Hop, n)
		for i := range r.Hops {
			h := &r.Hops[i]
			h.FromIface, h.ToIface, h.Direction = d.str(), d.str(), d.str()
			h.LatencyNs = int64(d.u64())
			h.FromNode, h.ToNode, h.FromPod, h.ToPod = d.str(), d.str(), d.str(), d.str()
		}
	}
	if n := d.count(); n > 0 || flags&binNilPath == 0 {
		r.Path = make([]Point, n)
		for i := range r.Path {
			p := &r.Path[i]
			p.Iface = d.str()
			p.IfIndex = d.u32()
			p.Kind, p.Pod, p.Hook = d.str(), d.str(), d.str()
			p.TimeNs = d.u64()
			p.Tunneled = d.u8() != 0
			p.Seq, p.Len = d.u32(), d.u32()
		}
	}
	if flags&binHopsOfPath != 0 && d.err == nil {
		if len(r.Path) < 2 {
			d.err = errors.New("latency record: hops of a path of fewer than two points")
		}
		r.Hops = Hops(r.Path)
	}
	switch {
	case d.err != nil:
		return nil, d.err
	case len(d.b) > 0:
		return nil, fmt.Errorf("latency record: %d bytes past its end", len(d.b))
	}
	return r, nil
}
