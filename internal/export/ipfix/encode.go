package ipfix

import (
	"encoding/binary"
	"math"
	"slices"
	"time"

	"loupe/internal/flow"
)

// Wire constants of RFC 7011.
const (
	version         = 10 // §3.1
	headerLen       = 16 // message header
	setHeaderLen    = 4
	templateSetID   = 2 // §3.3.2
	enterpriseBit   = 0x8000
	maxMessageLen   = 65535 // the header's 16-bit length
	minMessageLen   = 512   // RFC 7011 §10.3.3: the size to assume when the PMTU is unknown
	mappedPrefixLen = 12
)

// encoder turns flow records into IPFIX messages. It owns one reusable
// buffer and writes every field with fixed offsets, so encoding a record
// allocates nothing: at 200 000 records/s, a per-field allocation (as a
// generic element-value library needs) costs more than the encoding itself.
type encoder struct {
	domain uint32
	maxLen int
	pen    uint32
	// tpls are the templates by ID less 256: the six of templates(), then
	// the extension templates of the records with fields present only
	// where measured (ext.go), made as they first come; byKey finds
	// those by shape and parts.
	tpls  []template
	byKey map[uint64]int
	// fresh are the extension templates made since the client last sent
	// templates: it sends them before the records that use them.
	fresh []int
	// head is every template set, to ride at the head of a data message
	// (message), or nil where they and one record of the largest
	// template do not fit in maxLen: the templates then travel in
	// messages of their own (tplMsgs), sent just before. Both are made
	// again when a template is added.
	head    []byte
	tplMsgs [][]byte // the template sets, as many a message as fit
	buf     []byte
	vals    []byte // the variable-length values of the record being encoded
}

func newEncoder(domain uint32, maxLen int, pen uint32) *encoder {
	e := &encoder{domain: domain, maxLen: maxLen, pen: pen, buf: make([]byte, 0, maxLen), tpls: templates(), byKey: map[uint64]int{}}
	e.pack()
	return e
}

// pack makes head and tplMsgs of the templates there are.
func (e *encoder) pack() {
	biggest := 0
	for _, t := range e.tpls {
		biggest = max(biggest, t.recordLen)
	}
	sets := templateSets(e.tpls, e.pen)
	e.tplMsgs = packSets(sets, e.maxLen)
	var all []byte
	for _, set := range sets {
		all = append(all, set...)
	}
	e.head = nil
	if headerLen+len(all)+setHeaderLen+biggest <= e.maxLen {
		e.head = all
	}
}

// packSets puts template sets into as few message bodies of at most maxLen
// bytes (with the header) as their order allows.
func packSets(sets [][]byte, maxLen int) [][]byte {
	var out [][]byte
	for _, set := range sets {
		if n := len(out); n > 0 && headerLen+len(out[n-1])+len(set) <= maxLen {
			out[n-1] = append(out[n-1], set...)
		} else {
			out = append(out, slices.Clone(set))
		}
	}
	return out
}

// templateSets returns the template sets Loupe sends: the records'
// templates, then the estimates', then one set per extension template.
// Sets rather than one, so that a small MTU can carry them in several
// messages.
func templateSets(ts []template, pen uint32) [][]byte {
	sets := [][]byte{appendTemplateSet(nil, ts[:shapes], pen), appendTemplateSet(nil, ts[shapes:2*shapes], pen)}
	for i := 2 * shapes; i < len(ts); i++ {
		sets = append(sets, appendTemplateSet(nil, ts[i:i+1], pen))
	}
	return sets
}

// minMaxLen is the smallest message size the encoder can work with: a
// message carrying a template set, and one carrying a record of the
// largest template, the largest extension template's included (but for
// the values of variable length, which a record may lack room for: see
// message).
func minMaxLen(pen uint32) int {
	ts := append(templates(), extensionTemplate(2*shapes-1, 1<<len(extParts)-1))
	n := 0
	for _, t := range ts {
		n = max(n, headerLen+setHeaderLen+t.recordLen)
	}
	for _, set := range templateSets(ts, pen) {
		n = max(n, headerLen+len(set))
	}
	return n
}

// appendTemplateSet appends one template set (§3.4.1) holding ts.
func appendTemplateSet(b []byte, ts []template, pen uint32) []byte {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, templateSetID)
	b = append(b, 0, 0) // length, below
	for _, t := range ts {
		b = binary.BigEndian.AppendUint16(b, t.id)
		b = binary.BigEndian.AppendUint16(b, uint16(len(t.fields)))
		for _, f := range t.fields {
			if f.Enterprise {
				b = binary.BigEndian.AppendUint16(b, f.ID|enterpriseBit)
				b = binary.BigEndian.AppendUint16(b, f.Length)
				b = binary.BigEndian.AppendUint32(b, pen)
				continue
			}
			b = binary.BigEndian.AppendUint16(b, f.ID)
			b = binary.BigEndian.AppendUint16(b, f.Length)
		}
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b
}

// templateIndex picks the template of r's shape, its ID less 256: 0 IPv4,
// 1 IPv6, 2 non-IP, and 3 to 5 the same for an estimate.
func templateIndex(r *flow.Record) int {
	i := 2
	switch r.EtherType {
	case flow.EtherTypeIPv4:
		i = 0
	case flow.EtherTypeIPv6:
		i = 1
	}
	if r.Estimated() {
		i += shapes
	}
	return i
}

// maxTemplates bounds the templates: the IDs from 256 to 65535.
const maxTemplates = 65536 - int(TemplateIPv4)

// templateFor returns the index of r's template in tpls: its shape's, or
// for a record with fields present only where measured, the extension
// template of its shape and parts, made if it is new (and then fresh).
// ok is false when every template ID is taken, which no mix of records
// reaches (there are fewer shapes and parts than IDs in practice).
func (e *encoder) templateFor(r *flow.Record) (ti int, ok bool) {
	ti = templateIndex(r)
	if !hasParts(r) {
		return ti, true
	}
	mask := partMask(r)
	if mask == 0 {
		return ti, true
	}
	key := uint64(ti)<<len(extParts) | mask
	if i, ok := e.byKey[key]; ok {
		return i, true
	}
	if len(e.tpls) >= maxTemplates {
		return 0, false
	}
	t := extensionTemplate(ti, mask)
	t.id = TemplateIPv4 + uint16(len(e.tpls))
	e.byKey[key] = len(e.tpls)
	e.fresh = append(e.fresh, len(e.tpls))
	e.tpls = append(e.tpls, t)
	e.pack()
	return len(e.tpls) - 1, true
}

// extensionTemplate is the template of shape ti's records with the parts
// of mask: ti's elements, then the parts' (its ID is set by the caller).
func extensionTemplate(ti int, mask uint64) template {
	base := templates()[ti]
	t := template{base: ti, baseLen: base.recordLen, recordLen: base.recordLen, fields: slices.Clone(base.fields)}
	for i := range extParts {
		if mask&(1<<i) == 0 {
			continue
		}
		p := &extParts[i]
		t.fields = append(t.fields, p.elem)
		t.parts = append(t.parts, i)
		if p.str == nil {
			t.recordLen += int(p.elem.Length)
		} else {
			t.vars++
		}
	}
	return t
}

// prepare makes the templates the records of recs need: the client calls
// it before encoding them, and sends the fresh ones first.
func (e *encoder) prepare(recs []flow.Record) {
	for i := range recs {
		if hasParts(&recs[i]) {
			e.templateFor(&recs[i])
		}
	}
}

// message encodes as many records of recs as fit into one message of at
// most maxLen bytes, starting with the template sets if withTemplates
// (only where they ride: head), and returns the message (valid until the
// next call), the number of records of recs it took, and how many of them
// it holds: a record that cannot fit a message of its own (variable-length
// values longer than the MTU leaves room for) is taken but not sent, and
// counted by the caller as rejected. Consecutive records of one template
// share a data set; sets are not padded (padding is optional, §3.3.1, and
// buys a decoder nothing). exportTime and seq go into the header as given.
func (e *encoder) message(recs []flow.Record, withTemplates bool, exportTime, seq uint32) (msg []byte, taken, held int) {
	b := e.buf[:headerLen]
	if withTemplates {
		b = append(b, e.head...)
	}
	setStart, cur := -1, -1
	for taken < len(recs) {
		r := &recs[taken]
		ti, ok := e.templateFor(r)
		if !ok {
			taken++
			continue
		}
		t := &e.tpls[ti]
		vlen := 0
		if t.vars > 0 {
			vlen = e.values(t, r)
		}
		size := t.recordLen + vlen
		if headerLen+setHeaderLen+size > e.maxLen {
			taken++ // fits no message
			continue
		}
		need := size
		if ti != cur {
			need += setHeaderLen
		}
		if len(b)+need > e.maxLen {
			break
		}
		if ti != cur {
			if setStart >= 0 {
				binary.BigEndian.PutUint16(b[setStart+2:], uint16(len(b)-setStart))
			}
			setStart, cur = len(b), ti
			b = binary.BigEndian.AppendUint16(b, t.id)
			b = append(b, 0, 0)
		}
		b = appendRecord(b, t.base, t.baseLen, r)
		if len(t.parts) > 0 {
			b = e.appendParts(b, t, r)
		}
		taken++
		held++
	}
	if setStart >= 0 {
		binary.BigEndian.PutUint16(b[setStart+2:], uint16(len(b)-setStart))
	}
	e.buf = b
	putHeader(b, exportTime, seq, e.domain)
	return b, taken, held
}

// values encodes the variable-length values of r into e.vals, each with
// its length prefix (RFC 7011 §7: one byte under 255, else 255 and two
// bytes), and returns their size.
func (e *encoder) values(t *template, r *flow.Record) int {
	e.vals = e.vals[:0]
	for _, pi := range t.parts {
		p := &extParts[pi]
		if p.str == nil {
			continue
		}
		start := len(e.vals)
		e.vals = append(e.vals, 0, 0, 0) // room for the longer prefix
		e.vals = p.str(e.vals, r)
		n := len(e.vals) - start - 3
		switch {
		case n > 0xffff:
			e.vals = e.vals[:start+3+0xffff] // no record holds that much; cut rather than corrupt
			n = 0xffff
			fallthrough
		case n >= 255:
			e.vals[start] = 255
			binary.BigEndian.PutUint16(e.vals[start+1:], uint16(n))
		default:
			e.vals[start] = byte(n)
			copy(e.vals[start+1:], e.vals[start+3:])
			e.vals = e.vals[:len(e.vals)-2]
		}
	}
	return len(e.vals)
}

// appendParts appends the parts of extension template t: the fixed-length
// ones at their offsets, then the variable-length values values made.
func (e *encoder) appendParts(b []byte, t *template, r *flow.Record) []byte {
	off := len(b)
	fixed := t.recordLen - t.baseLen
	b = append(b, make([]byte, fixed)...)
	p := b[off:]
	for _, pi := range t.parts {
		part := &extParts[pi]
		if part.put == nil {
			continue
		}
		part.put(p, r)
		p = p[part.elem.Length:]
	}
	if t.vars > 0 {
		b = append(b, e.vals...)
	}
	return b
}

// templatesOnly encodes a message holding only the template sets of body
// (one of tplMsgs, say).
func (e *encoder) templatesOnly(body []byte, exportTime, seq uint32) []byte {
	b := append(e.buf[:headerLen], body...)
	e.buf = b
	putHeader(b, exportTime, seq, e.domain)
	return b
}

// reframe encodes a message around body, data sets taken from an earlier
// message, for a retransmission on a new TCP connection.
func (e *encoder) reframe(body []byte, exportTime, seq uint32) []byte {
	b := append(e.buf[:headerLen], body...)
	e.buf = b
	putHeader(b, exportTime, seq, e.domain)
	return b
}

// putHeader writes the message header (§3.1) into b[:16].
func putHeader(b []byte, exportTime, seq, domain uint32) {
	binary.BigEndian.PutUint16(b[0:], version)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint32(b[4:], exportTime)
	binary.BigEndian.PutUint32(b[8:], seq)
	binary.BigEndian.PutUint32(b[12:], domain)
}

// appendRecord appends r's data record for template ti (whose record length
// is n) in the field order of templates(). It writes into a slice grown
// once, at fixed offsets.
func appendRecord(b []byte, ti, n int, r *flow.Record) []byte {
	off := len(b)
	b = append(b, make([]byte, n)...) // compiled to a grow + clear, no allocation once b has room
	p := b[off : off+n]
	be := binary.BigEndian
	estimate := ti >= shapes
	var o int
	switch ti % shapes {
	case 0:
		if isMapped(&r.SrcAddr) {
			copy(p[0:4], r.SrcAddr[mappedPrefixLen:])
		}
		if isMapped(&r.DstAddr) {
			copy(p[4:8], r.DstAddr[mappedPrefixLen:])
		}
		o = 8
	case 1:
		copy(p[0:16], r.SrcAddr[:])
		copy(p[16:32], r.DstAddr[:])
		o = 32
	default:
		copy(p[0:6], r.SrcMAC[:])
		copy(p[6:12], r.DstMAC[:])
		be.PutUint16(p[12:], r.EtherType)
		be.PutUint64(p[14:], r.Bytes)
		be.PutUint64(p[22:], r.Packets)
		be.PutUint64(p[30:], millis(r.FirstSeen))
		be.PutUint64(p[38:], millis(r.LastSeen))
		putInterfaces(p[46:], r)
		putTail(p[55:], r, estimate)
		return b
	}
	var icmp uint16
	sport, dport := r.SrcPort, r.DstPort
	if r.PortKind() == flow.ICMPTypeCode {
		icmp = sport<<8 | dport&0xff
		sport, dport = 0, 0
	}
	q := p[o:]
	be.PutUint16(q[0:], sport)
	be.PutUint16(q[2:], dport)
	q[4] = r.Proto
	be.PutUint64(q[5:], r.Bytes)
	be.PutUint64(q[13:], r.Packets)
	be.PutUint64(q[21:], millis(r.FirstSeen))
	be.PutUint64(q[29:], millis(r.LastSeen))
	be.PutUint16(q[37:], r.TCPFlags)
	putInterfaces(q[39:], r)
	copy(q[48:54], r.SrcMAC[:])
	copy(q[54:60], r.DstMAC[:])
	be.PutUint16(q[60:], r.EtherType)
	q[62] = r.DSCP
	be.PutUint16(q[63:], icmp)
	putTail(q[65:], r, estimate)
	return b
}

// putTail writes the elements every template ends with (28 bytes):
// loupeSamplingRate, vlanId, postVlanId, dot1qVlanId, loupeSegmentDeltaCount,
// loupeWireOctetDeltaCount, loupeAggregatePrefix (0 for a flow) and
// loupeAccuracy; for an estimate template, its bounds follow (24 bytes):
// loupeMaxErrorPacketDeltaCount, loupeMaxErrorOctetDeltaCount and
// loupeErrorConfidence. The VLAN goes into vlanId for ingress
// records and postVlanId for egress ones, as the ifindex goes into
// ingressInterface or egressInterface: pmacct, for one, reads the VLAN of
// an egress record from postVlanId. dot1qVlanId carries it in both
// directions, for collectors that read only the frame's tag.
func putTail(p []byte, r *flow.Record, estimate bool) {
	be := binary.BigEndian
	be.PutUint32(p[0:], sampling(r.Sampling))
	if r.Direction == flow.Egress {
		be.PutUint16(p[6:], r.VlanID)
	} else {
		be.PutUint16(p[4:], r.VlanID)
	}
	be.PutUint16(p[8:], r.VlanID)
	be.PutUint64(p[10:], r.Segments)
	be.PutUint64(p[18:], r.WireBytes)
	p[26] = r.AggPrefix
	p[27] = uint8(r.Accuracy)
	if estimate {
		be.PutUint64(p[28:], r.MaxErrorPackets)
		be.PutUint64(p[36:], r.MaxErrorBytes)
		// float64 is IEEE 754 binary64 in network byte order (RFC 7011
		// §6.1.3).
		be.PutUint64(p[44:], math.Float64bits(r.ErrorConfidence))
	}
}

// putInterfaces writes ingressInterface, egressInterface and flowDirection
// (9 bytes): the ifindex goes into the interface element of the record's
// direction, the other one stays 0.
func putInterfaces(p []byte, r *flow.Record) {
	if r.Direction == flow.Egress {
		binary.BigEndian.PutUint32(p[4:], r.IfIndex)
	} else {
		binary.BigEndian.PutUint32(p[0:], r.IfIndex)
	}
	p[8] = uint8(r.Direction)
}

// isMapped reports whether a is IPv4-mapped (::ffff:a.b.c.d). An IPv4 key
// whose header was cut short before the addresses is not: it is sent as
// 0.0.0.0 rather than as the low bytes of whatever it holds.
func isMapped(a *[16]byte) bool {
	return binary.BigEndian.Uint64(a[0:]) == 0 && binary.BigEndian.Uint32(a[8:]) == 0xffff
}

func millis(t time.Time) uint64 {
	ms := t.UnixMilli()
	if ms < 0 {
		return 0 // the zero Time, never a real flow
	}
	return uint64(ms)
}

// sampling maps the datapath's "0 means 1" to the element's 1 = every packet.
func sampling(s uint32) uint32 { return max(s, 1) }
