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
	// head is every template set, to ride at the head of a data message
	// (message), or nil where they and one record of the largest
	// template do not fit in maxLen: the templates then travel in
	// messages of their own (tplMsgs), sent just before. Built once.
	head    []byte
	tplMsgs [][]byte // the template sets, as many a message as fit
	buf     []byte
	lens    [2 * shapes]int // data record length per template, by index
}

func newEncoder(domain uint32, maxLen int, pen uint32) *encoder {
	e := &encoder{domain: domain, maxLen: maxLen, buf: make([]byte, 0, maxLen)}
	ts := templates()
	biggest := 0
	for i, t := range ts {
		e.lens[i] = t.recordLen
		biggest = max(biggest, t.recordLen)
	}
	sets := templateSets(ts, pen)
	var all []byte
	for _, set := range sets {
		all = append(all, set...)
		if n := len(e.tplMsgs); n > 0 && headerLen+len(e.tplMsgs[n-1])+len(set) <= maxLen {
			e.tplMsgs[n-1] = append(e.tplMsgs[n-1], set...)
		} else {
			e.tplMsgs = append(e.tplMsgs, slices.Clone(set))
		}
	}
	if headerLen+len(all)+setHeaderLen+biggest <= maxLen {
		e.head = all
	}
	return e
}

// templateSets returns the template sets Loupe sends: the records'
// templates, then the estimates'. Two sets rather than one, so that a
// small MTU can carry them in two messages.
func templateSets(ts []template, pen uint32) [][]byte {
	return [][]byte{appendTemplateSet(nil, ts[:shapes], pen), appendTemplateSet(nil, ts[shapes:], pen)}
}

// minMaxLen is the smallest message size the encoder can work with: a
// message carrying a template set, and one carrying a record of the
// largest template.
func minMaxLen(pen uint32) int {
	ts := templates()
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

// templateIndex picks the template of r, its ID less 256: 0 IPv4, 1 IPv6,
// 2 non-IP, and 3 to 5 the same for an estimate.
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

// message encodes as many records of recs as fit into one message of at
// most maxLen bytes, starting with the template sets if withTemplates
// (only where they ride: head), and returns the message (valid until the
// next call) and the number of records it holds. Consecutive records of one template share a data set; sets are
// not padded (padding is optional, §3.3.1, and buys a decoder nothing).
// exportTime and seq go into the header as given.
func (e *encoder) message(recs []flow.Record, withTemplates bool, exportTime, seq uint32) (msg []byte, n int) {
	b := e.buf[:headerLen]
	if withTemplates {
		b = append(b, e.head...)
	}
	setStart, cur := -1, -1
	for n < len(recs) {
		r := &recs[n]
		ti := templateIndex(r)
		need := e.lens[ti]
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
			b = binary.BigEndian.AppendUint16(b, TemplateIPv4+uint16(ti))
			b = append(b, 0, 0)
		}
		b = appendRecord(b, ti, e.lens[ti], r)
		n++
	}
	if setStart >= 0 {
		binary.BigEndian.PutUint16(b[setStart+2:], uint16(len(b)-setStart))
	}
	e.buf = b
	putHeader(b, exportTime, seq, e.domain)
	return b, n
}

// templatesOnly encodes template message i of tplMsgs: a message holding
// only template sets.
func (e *encoder) templatesOnly(i int, exportTime, seq uint32) []byte {
	b := append(e.buf[:headerLen], e.tplMsgs[i]...)
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
