package ipfix

import (
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"time"

	"loupe/internal/flow"
	"loupe/internal/tunnel"
)

// This file is an independent, minimal IPFIX decoder for the tests: it
// reads templates from the wire and decodes data records by the templates
// it received, naming fields from its own table of RFC 7012 numbers, so a
// wrong ID, length or offset in the encoder shows as a wrong field here.

const testPEN = 32473

// fieldNames maps (PEN, element ID) to a name, per the IANA registry.
var fieldNames = map[[2]uint32]string{
	{0, 1}: "octetDeltaCount", {0, 2}: "packetDeltaCount", {0, 4}: "protocolIdentifier",
	{0, 6}: "tcpControlBits", {0, 7}: "sourceTransportPort", {0, 8}: "sourceIPv4Address",
	{0, 10}: "ingressInterface", {0, 11}: "destinationTransportPort", {0, 12}: "destinationIPv4Address",
	{0, 14}: "egressInterface", {0, 27}: "sourceIPv6Address", {0, 28}: "destinationIPv6Address",
	{0, 32}: "icmpTypeCodeIPv4", {0, 56}: "sourceMacAddress", {0, 61}: "flowDirection",
	{0, 80}: "destinationMacAddress", {0, 195}: "ipDiffServCodePoint", {0, 139}: "icmpTypeCodeIPv6",
	{0, 152}: "flowStartMilliseconds", {0, 153}: "flowEndMilliseconds", {0, 256}: "ethernetType",
	{0, 58}: "vlanId", {0, 59}: "postVlanId", {0, 243}: "dot1qVlanId",
	{testPEN, 1}: "loupeSamplingRate", {testPEN, 6}: "loupeSegmentDeltaCount", {testPEN, 7}: "loupeWireOctetDeltaCount", {testPEN, 8}: "loupeAggregatePrefix",
	{testPEN, 9}: "loupeAccuracy", {testPEN, 10}: "loupeMaxErrorPacketDeltaCount", {testPEN, 11}: "loupeMaxErrorOctetDeltaCount",
	{testPEN, 12}: "loupeErrorConfidence",
	{0, 132}:      "droppedOctetDeltaCount", {0, 133}: "droppedPacketDeltaCount", {0, 296}: "greKey", {0, 351}: "layer2SegmentId",
	{testPEN, 13}: "loupeRttMinNanoseconds", {testPEN, 14}: "loupeRttMaxNanoseconds", {testPEN, 15}: "loupeRttLastNanoseconds",
	{testPEN, 16}: "loupeHandshakeRttNanoseconds", {testPEN, 17}: "loupeRetransmittedSegmentDeltaCount", {testPEN, 18}: "loupeDropReasons",
	{testPEN, 19}: "loupeDnsId", {testPEN, 20}: "loupeDnsQueryName", {testPEN, 21}: "loupeDnsResponseCode",
	{testPEN, 22}: "loupeDnsLatencyNanoseconds", {testPEN, 23}: "loupeTunnelType", {testPEN, 24}: "loupeTunnelId",
	{testPEN, 25}: "loupeOuterSourceIPv4Address", {testPEN, 26}: "loupeOuterDestinationIPv4Address",
	{testPEN, 27}: "loupeOuterSourceIPv6Address", {testPEN, 28}: "loupeOuterDestinationIPv6Address",
	{testPEN, 29}: "loupeOuterSourcePort", {testPEN, 30}: "loupeOuterDestinationPort",
	{testPEN, 31}: "loupeSourceK8sKind", {testPEN, 32}: "loupeSourceK8sNamespace", {testPEN, 33}: "loupeSourceK8sPodName",
	{testPEN, 34}: "loupeSourceK8sWorkloadName", {testPEN, 35}: "loupeSourceK8sWorkloadKind",
	{testPEN, 36}: "loupeSourceK8sServiceName", {testPEN, 37}: "loupeSourceK8sNodeName",
	{testPEN, 38}: "loupeDestinationK8sKind", {testPEN, 39}: "loupeDestinationK8sNamespace", {testPEN, 40}: "loupeDestinationK8sPodName",
	{testPEN, 41}: "loupeDestinationK8sWorkloadName", {testPEN, 42}: "loupeDestinationK8sWorkloadKind",
	{testPEN, 43}: "loupeDestinationK8sServiceName", {testPEN, 44}: "loupeDestinationK8sNodeName",
	{testPEN, 45}: "loupeInterfaceK8sPodName", {testPEN, 46}: "loupeInterfaceK8sNamespace",
}

// varLength marks an element of variable length in a template (§7).
const varLength = 0xffff

type fieldSpec struct {
	pen    uint32
	id     uint16
	length uint16
}

type decodedMessage struct {
	length     int
	exportTime uint32
	seq        uint32
	domain     uint32
	templates  []uint16 // template IDs defined in this message
	records    []decodedRecord
}

type decodedRecord struct {
	template uint16
	fields   map[string]string
}

// decoder holds the templates of one transport session.
type decoder struct {
	templates map[uint16][]fieldSpec
}

func newDecoder() *decoder { return &decoder{templates: map[uint16][]fieldSpec{}} }

// decode parses one message; b must be exactly one message.
func (d *decoder) decode(b []byte) (decodedMessage, error) {
	var m decodedMessage
	if len(b) < 16 {
		return m, fmt.Errorf("short message: %d bytes", len(b))
	}
	if v := binary.BigEndian.Uint16(b); v != 10 {
		return m, fmt.Errorf("version %d", v)
	}
	m.length = int(binary.BigEndian.Uint16(b[2:]))
	if m.length != len(b) {
		return m, fmt.Errorf("header length %d, message %d bytes", m.length, len(b))
	}
	m.exportTime = binary.BigEndian.Uint32(b[4:])
	m.seq = binary.BigEndian.Uint32(b[8:])
	m.domain = binary.BigEndian.Uint32(b[12:])
	for p := b[16:]; len(p) > 0; {
		if len(p) < 4 {
			return m, fmt.Errorf("trailing %d bytes", len(p))
		}
		id, n := binary.BigEndian.Uint16(p), int(binary.BigEndian.Uint16(p[2:]))
		if n < 4 || n > len(p) {
			return m, fmt.Errorf("set %d: length %d of %d", id, n, len(p))
		}
		body := p[4:n]
		p = p[n:]
		switch {
		case id == 2:
			ids, err := d.templateSet(body)
			if err != nil {
				return m, err
			}
			m.templates = append(m.templates, ids...)
		case id >= 256:
			recs, err := d.dataSet(id, body)
			if err != nil {
				return m, err
			}
			m.records = append(m.records, recs...)
		default:
			return m, fmt.Errorf("unexpected set ID %d", id)
		}
	}
	return m, nil
}

func (d *decoder) templateSet(b []byte) ([]uint16, error) {
	var ids []uint16
	for len(b) >= 4 {
		id, count := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		b = b[4:]
		var fs []fieldSpec
		for range count {
			if len(b) < 4 {
				return nil, fmt.Errorf("template %d cut short", id)
			}
			f := fieldSpec{id: binary.BigEndian.Uint16(b), length: binary.BigEndian.Uint16(b[2:])}
			b = b[4:]
			if f.id&0x8000 != 0 {
				if len(b) < 4 {
					return nil, fmt.Errorf("template %d: enterprise number cut short", id)
				}
				f.id &^= 0x8000
				f.pen = binary.BigEndian.Uint32(b)
				b = b[4:]
			}
			fs = append(fs, f)
		}
		d.templates[id] = fs
		ids = append(ids, id)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("template set: %d bytes of padding", len(b))
	}
	return ids, nil
}

func (d *decoder) dataSet(id uint16, b []byte) ([]decodedRecord, error) {
	fs, ok := d.templates[id]
	if !ok {
		return nil, fmt.Errorf("data set %d before its template", id)
	}
	// Records are read one element at a time: a variable-length element
	// carries its length (one byte, or 255 and two bytes). Padding is
	// not sent, so the set must end exactly after a record.
	var out []decodedRecord
	for len(b) > 0 {
		r := decodedRecord{template: id, fields: map[string]string{}}
		for _, f := range fs {
			name, ok := fieldNames[[2]uint32{f.pen, uint32(f.id)}]
			if !ok {
				return nil, fmt.Errorf("unknown element %d/%d", f.pen, f.id)
			}
			n := int(f.length)
			if f.length == varLength {
				if len(b) < 1 {
					return nil, fmt.Errorf("data set %d: %s's length cut short", id, name)
				}
				n, b = int(b[0]), b[1:]
				if n == 255 {
					if len(b) < 2 {
						return nil, fmt.Errorf("data set %d: %s's long length cut short", id, name)
					}
					n, b = int(binary.BigEndian.Uint16(b)), b[2:]
				}
			}
			if len(b) < n {
				return nil, fmt.Errorf("data set %d: %d bytes left for a %d-byte %s (padding is not sent)", id, len(b), n, name)
			}
			r.fields[name] = formatValue(name, b[:n])
			b = b[n:]
		}
		out = append(out, r)
	}
	return out, nil
}

func formatValue(name string, v []byte) string {
	switch name {
	case "sourceIPv4Address", "destinationIPv4Address", "sourceIPv6Address", "destinationIPv6Address",
		"loupeOuterSourceIPv4Address", "loupeOuterDestinationIPv4Address", "loupeOuterSourceIPv6Address", "loupeOuterDestinationIPv6Address":
		a, _ := netip.AddrFromSlice(v)
		return a.String()
	case "loupeDropReasons", "loupeDnsQueryName": // strings
		return string(v)
	case "sourceMacAddress", "destinationMacAddress":
		return net.HardwareAddr(v).String()
	case "loupeErrorConfidence": // float64: IEEE 754 binary64, big-endian
		return strconv.FormatFloat(math.Float64frombits(binary.BigEndian.Uint64(v)), 'g', -1, 64)
	}
	var u uint64
	for _, c := range v {
		u = u<<8 | uint64(c)
	}
	return strconv.FormatUint(u, 10)
}

// expectFields is what a record must decode to, written from the element
// definitions in RFC 7012 rather than from the encoder.
func expectFields(r *flow.Record) (uint16, map[string]string) {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	ms := func(t time.Time) string { return u(uint64(t.UnixMilli())) }
	in, out := uint32(0), uint32(0)
	if r.Direction == flow.Ingress {
		in = r.IfIndex
	} else {
		out = r.IfIndex
	}
	samp := max(r.Sampling, 1)
	vin, vout := r.VlanID, uint16(0)
	if r.Direction == flow.Egress {
		vin, vout = 0, r.VlanID
	}
	f := map[string]string{
		"sourceMacAddress": net.HardwareAddr(r.SrcMAC[:]).String(), "destinationMacAddress": net.HardwareAddr(r.DstMAC[:]).String(),
		"ethernetType": u(uint64(r.EtherType)), "octetDeltaCount": u(r.Bytes), "packetDeltaCount": u(r.Packets),
		"flowStartMilliseconds": ms(r.FirstSeen), "flowEndMilliseconds": ms(r.LastSeen),
		"ingressInterface": u(uint64(in)), "egressInterface": u(uint64(out)), "flowDirection": u(uint64(r.Direction)),
		"loupeSamplingRate": u(uint64(samp)), "vlanId": u(uint64(vin)), "postVlanId": u(uint64(vout)),
		"dot1qVlanId": u(uint64(r.VlanID)), "loupeSegmentDeltaCount": u(r.Segments), "loupeWireOctetDeltaCount": u(r.WireBytes),
		"loupeAggregatePrefix": u(uint64(r.AggPrefix)), "loupeAccuracy": u(uint64(r.Accuracy)),
	}
	var tpl uint16
	switch r.EtherType {
	case flow.EtherTypeIPv4, flow.EtherTypeIPv6:
		sport, dport, icmp := r.SrcPort, r.DstPort, uint16(0)
		icmpName, icmpProto := "icmpTypeCodeIPv4", uint8(1)
		src, dst := "0.0.0.0", "0.0.0.0"
		tpl = 256
		if s := r.SrcIP(); s.IsValid() {
			src = s.String()
		}
		if d := r.DstIP(); d.IsValid() {
			dst = d.String()
		}
		f["sourceIPv4Address"], f["destinationIPv4Address"] = src, dst
		if r.EtherType == flow.EtherTypeIPv6 {
			tpl, icmpName, icmpProto = 257, "icmpTypeCodeIPv6", 58
			delete(f, "sourceIPv4Address")
			delete(f, "destinationIPv4Address")
			f["sourceIPv6Address"], f["destinationIPv6Address"] = r.SrcIP().String(), r.DstIP().String()
		}
		if r.Proto == icmpProto {
			icmp, sport, dport = r.SrcPort<<8|r.DstPort, 0, 0
		}
		f["sourceTransportPort"], f["destinationTransportPort"] = u(uint64(sport)), u(uint64(dport))
		f["protocolIdentifier"], f["tcpControlBits"] = u(uint64(r.Proto)), u(uint64(r.TCPFlags))
		f["ipDiffServCodePoint"], f[icmpName] = u(uint64(r.DSCP)), u(uint64(icmp))
	default:
		tpl = 258
	}
	if r.Accuracy == flow.Estimated {
		tpl += 3 // the estimate template of the shape: the bounds follow
		f["loupeMaxErrorPacketDeltaCount"], f["loupeMaxErrorOctetDeltaCount"] = u(r.MaxErrorPackets), u(r.MaxErrorBytes)
		f["loupeErrorConfidence"] = strconv.FormatFloat(r.ErrorConfidence, 'g', -1, 64)
	}
	// The fields present only where measured, each where the record has
	// it; their template is one of the extension templates (tpl then
	// names the shape's template they extend).
	h := r.Has
	for _, e := range []struct {
		bit  flow.Presence
		name string
		v    string
	}{
		{flow.HasRTTMin, "loupeRttMinNanoseconds", u(r.RTTMinNs)}, {flow.HasRTTMax, "loupeRttMaxNanoseconds", u(r.RTTMaxNs)},
		{flow.HasRTTLast, "loupeRttLastNanoseconds", u(r.RTTLastNs)}, {flow.HasHandshakeRTT, "loupeHandshakeRttNanoseconds", u(r.HandshakeRTTNs)},
		{flow.HasRetransmits, "loupeRetransmittedSegmentDeltaCount", u(r.Retransmits)},
		{flow.HasDropPackets, "droppedPacketDeltaCount", u(r.DropPackets)}, {flow.HasDropBytes, "droppedOctetDeltaCount", u(r.DropBytes)},
		{flow.HasDropReasons, "loupeDropReasons", string(r.DropReasons.AppendJSON(nil))},
		{flow.HasDNSID, "loupeDnsId", u(uint64(r.DNSID))}, {flow.HasDNSQName, "loupeDnsQueryName", r.DNSQName},
		{flow.HasDNSRcode, "loupeDnsResponseCode", u(uint64(r.DNSRcode))}, {flow.HasDNSLatency, "loupeDnsLatencyNanoseconds", u(r.DNSLatencyNs)},
		{flow.HasTunnelType, "loupeTunnelType", u(uint64(r.TunnelType))},
		{flow.HasOuterSrcPort, "loupeOuterSourcePort", u(uint64(r.OuterSrcPort))}, {flow.HasOuterDstPort, "loupeOuterDestinationPort", u(uint64(r.OuterDstPort))},
	} {
		if h&e.bit != 0 {
			f[e.name] = e.v
		}
	}
	if h&flow.HasTunnelID != 0 {
		switch r.TunnelType {
		case tunnel.VXLAN: // RFC 7133: type 0x01 in the high byte
			f["layer2SegmentId"] = u(1<<56 | uint64(r.TunnelID))
		case tunnel.GRE:
			f["greKey"] = u(uint64(r.TunnelID))
		default:
			f["loupeTunnelId"] = u(uint64(r.TunnelID))
		}
	}
	for _, a := range []struct {
		bit        flow.Presence
		addr       netip.Addr
		name4, nm6 string
	}{{flow.HasOuterSrcAddr, r.OuterSrcAddr, "loupeOuterSourceIPv4Address", "loupeOuterSourceIPv6Address"},
		{flow.HasOuterDstAddr, r.OuterDstAddr, "loupeOuterDestinationIPv4Address", "loupeOuterDestinationIPv6Address"}} {
		if h&a.bit != 0 && a.addr.Is4() {
			f[a.name4] = a.addr.String()
		} else if h&a.bit != 0 {
			f[a.nm6] = a.addr.String()
		}
	}
	return tpl, f
}
