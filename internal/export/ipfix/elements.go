package ipfix

import (
	"slices"

	"loupe/internal/flow"
)

// Element is one Information Element a template can carry: an IANA element
// from RFC 7012's registry (Enterprise false) or one of Loupe's own elements,
// numbered under Options.EnterpriseNumber (Enterprise true). Which record
// field each element carries is flow's registry (flow.Field.Wire.IPFIX);
// TestElementsAreTheRegistrys holds both together.
type Element struct {
	ID         uint16
	Name       string
	Type       string // IPFIX abstract data type (RFC 7011 §6.1)
	Length     uint16 // octets on the wire; every element Loupe sends is fixed-length
	Enterprise bool
	// Status is flow.Sent for every element a template carries; Loupe's
	// enterprise space also lists reserved and withdrawn IDs.
	Status      flow.ElementStatus
	Description string
}

// IANA elements (RFC 7012, https://www.iana.org/assignments/ipfix). The
// lengths are the ones Loupe sends: reduced-size encoding (RFC 7011 §6.2) is
// not used, so every element has its registry length.
var (
	ieOctetDeltaCount  = Element{ID: 1, Name: "octetDeltaCount", Type: "unsigned64", Length: 8, Status: flow.Sent, Description: "bytes of the flow's buffers in this record (L2 length at the hook)"}
	iePacketDeltaCount = Element{ID: 2, Name: "packetDeltaCount", Type: "unsigned64", Length: 8, Status: flow.Sent, Description: "buffers of the flow that crossed the hook in this record (a GSO/GRO super-packet counts once)"}
	ieProtocol         = Element{ID: 4, Name: "protocolIdentifier", Type: "unsigned8", Length: 1, Status: flow.Sent, Description: "IP protocol number"}
	ieTCPControlBits   = Element{ID: 6, Name: "tcpControlBits", Type: "unsigned16", Length: 2, Status: flow.Sent, Description: "union of the TCP flags of the flow's packets (RFC 7125: FIN 0x01 ... CWR 0x80, AE/NS 0x100); 0 for other protocols"}
	ieSrcPort          = Element{ID: 7, Name: "sourceTransportPort", Type: "unsigned16", Length: 2, Status: flow.Sent, Description: "source port; 0 for ICMP/ICMPv6 (see icmpTypeCode*) and non-first fragments"}
	ieSrcIPv4          = Element{ID: 8, Name: "sourceIPv4Address", Type: "ipv4Address", Length: 4, Status: flow.Sent, Description: "source address (IPv4 template)"}
	ieIngressInterface = Element{ID: 10, Name: "ingressInterface", Type: "unsigned32", Length: 4, Status: flow.Sent, Description: "ifindex of the interface for ingress records, 0 for egress records"}
	ieDstPort          = Element{ID: 11, Name: "destinationTransportPort", Type: "unsigned16", Length: 2, Status: flow.Sent, Description: "destination port; 0 for ICMP/ICMPv6"}
	ieDstIPv4          = Element{ID: 12, Name: "destinationIPv4Address", Type: "ipv4Address", Length: 4, Status: flow.Sent, Description: "destination address (IPv4 template)"}
	ieEgressInterface  = Element{ID: 14, Name: "egressInterface", Type: "unsigned32", Length: 4, Status: flow.Sent, Description: "ifindex of the interface for egress records, 0 for ingress records"}
	ieSrcIPv6          = Element{ID: 27, Name: "sourceIPv6Address", Type: "ipv6Address", Length: 16, Status: flow.Sent, Description: "source address (IPv6 template)"}
	ieDstIPv6          = Element{ID: 28, Name: "destinationIPv6Address", Type: "ipv6Address", Length: 16, Status: flow.Sent, Description: "destination address (IPv6 template)"}
	ieICMPTypeCodeIPv4 = Element{ID: 32, Name: "icmpTypeCodeIPv4", Type: "unsigned16", Length: 2, Status: flow.Sent, Description: "type × 256 + code for ICMP (protocol 1), 0 otherwise (IPv4 template)"}
	ieSrcMAC           = Element{ID: 56, Name: "sourceMacAddress", Type: "macAddress", Length: 6, Status: flow.Sent, Description: "source MAC address"}
	ieFlowDirection    = Element{ID: 61, Name: "flowDirection", Type: "unsigned8", Length: 1, Status: flow.Sent, Description: "0 ingress, 1 egress: the TC hook the packets were counted at"}
	ieDstMAC           = Element{ID: 80, Name: "destinationMacAddress", Type: "macAddress", Length: 6, Status: flow.Sent, Description: "destination MAC address"}
	ieDSCP             = Element{ID: 195, Name: "ipDiffServCodePoint", Type: "unsigned8", Length: 1, Status: flow.Sent, Description: "DSCP of the flow's last packet"}
	ieICMPTypeCodeIPv6 = Element{ID: 139, Name: "icmpTypeCodeIPv6", Type: "unsigned16", Length: 2, Status: flow.Sent, Description: "type × 256 + code for ICMPv6 (protocol 58), 0 otherwise (IPv6 template)"}
	ieFlowStartMillis  = Element{ID: 152, Name: "flowStartMilliseconds", Type: "dateTimeMilliseconds", Length: 8, Status: flow.Sent, Description: "first packet of the flow in this record, ms since the Unix epoch"}
	ieFlowEndMillis    = Element{ID: 153, Name: "flowEndMilliseconds", Type: "dateTimeMilliseconds", Length: 8, Status: flow.Sent, Description: "last packet of the flow in this record, ms since the Unix epoch"}
	ieVlanID           = Element{ID: 58, Name: "vlanId", Type: "unsigned16", Length: 2, Status: flow.Sent, Description: "VLAN ID of the frame's outer tag for ingress records (0: untagged), 0 for egress records"}
	iePostVlanID       = Element{ID: 59, Name: "postVlanId", Type: "unsigned16", Length: 2, Status: flow.Sent, Description: "VLAN ID of the frame's outer tag for egress records (0: untagged), 0 for ingress records"}
	ieDot1qVlanID      = Element{ID: 243, Name: "dot1qVlanId", Type: "unsigned16", Length: 2, Status: flow.Sent, Description: "VLAN ID of the frame's outer 802.1Q/802.1ad tag, both directions (0: untagged)"}
	ieEthernetType     = Element{ID: 256, Name: "ethernetType", Type: "unsigned16", Length: 2, Status: flow.Sent, Description: "EtherType (0x0800 IPv4, 0x86DD IPv6, 0x0806 ARP, ...)"}
)

// enterprise returns Loupe's enterprise element id, as flow's registry
// defines it (a withdrawn or unknown ID panics: the templates below are
// fixed at build time, and a test builds them).
func enterprise(id uint16) Element {
	for _, e := range flow.EnterpriseElements() {
		if e.ID == id && e.Status == flow.Sent {
			return enterpriseElement(e)
		}
	}
	panic("ipfix: enterprise element not sent by flow's registry")
}

func enterpriseElement(e flow.EnterpriseElement) Element {
	return Element{ID: e.ID, Name: e.Name, Type: e.Type, Length: e.Length, Enterprise: true, Status: e.Status, Description: e.Doc}
}

// Template IDs. Data sets use IDs ≥ 256 (RFC 7011 §3.4.3). An estimate
// (a record whose counters the count-min sketch estimated) travels in the
// estimate template of its shape, which adds its error bounds: the other
// records, nearly all of them, do not carry 24 bytes of zeros each.
const (
	TemplateIPv4          uint16 = 256
	TemplateIPv6          uint16 = 257
	TemplateNonIP         uint16 = 258
	TemplateIPv4Estimate  uint16 = 259
	TemplateIPv6Estimate  uint16 = 260
	TemplateNonIPEstimate uint16 = 261
)

// shapes is the number of record shapes (IPv4, IPv6, non-IP): templates
// 256 + shape, and 256 + shapes + shape for estimates.
const shapes = 3

// template is one template's field list in wire order, and the length of a
// data record it describes: all of it, or for an extension template (one
// with fields present only where measured, ext.go) its fixed-length part.
type template struct {
	id        uint16
	fields    []Element
	recordLen int
	// An extension template is template base (0 to 5) of baseLen bytes
	// followed by the parts of extParts listed, vars of them of variable
	// length. The six base templates have base = their own index.
	base, baseLen int
	parts         []int
	vars          int
}

// templates returns the six templates Loupe sends: one per shape, then one
// per shape for estimates, by template ID. The field order is the
// encoder's write order (encode.go); a test checks that both agree. Every
// template ends with the same tail, which putTail writes, and an estimate
// template with the error bounds after it.
func templates() []template {
	sampling, segments, wireBytes, aggregate, accuracy := enterprise(1), enterprise(6), enterprise(7), enterprise(8), enterprise(9)
	tail := []Element{sampling, ieVlanID, iePostVlanID, ieDot1qVlanID, segments, wireBytes, aggregate, accuracy}
	bounds := []Element{enterprise(10), enterprise(11), enterprise(12)}
	v4 := append([]Element{
		ieSrcIPv4, ieDstIPv4, ieSrcPort, ieDstPort, ieProtocol,
		ieOctetDeltaCount, iePacketDeltaCount, ieFlowStartMillis, ieFlowEndMillis,
		ieTCPControlBits, ieIngressInterface, ieEgressInterface, ieFlowDirection,
		ieSrcMAC, ieDstMAC, ieEthernetType, ieDSCP, ieICMPTypeCodeIPv4,
	}, tail...)
	v6 := append([]Element{
		ieSrcIPv6, ieDstIPv6, ieSrcPort, ieDstPort, ieProtocol,
		ieOctetDeltaCount, iePacketDeltaCount, ieFlowStartMillis, ieFlowEndMillis,
		ieTCPControlBits, ieIngressInterface, ieEgressInterface, ieFlowDirection,
		ieSrcMAC, ieDstMAC, ieEthernetType, ieDSCP, ieICMPTypeCodeIPv6,
	}, tail...)
	nonIP := append([]Element{
		ieSrcMAC, ieDstMAC, ieEthernetType,
		ieOctetDeltaCount, iePacketDeltaCount, ieFlowStartMillis, ieFlowEndMillis,
		ieIngressInterface, ieEgressInterface, ieFlowDirection,
	}, tail...)
	out := []template{{id: TemplateIPv4, fields: v4}, {id: TemplateIPv6, fields: v6}, {id: TemplateNonIP, fields: nonIP}}
	for i := range shapes {
		est := append(slices.Clip(out[i].fields), bounds...)
		out = append(out, template{id: TemplateIPv4Estimate + uint16(i), fields: est})
	}
	for i := range out {
		for _, f := range out[i].fields {
			out[i].recordLen += int(f.Length)
		}
		out[i].base, out[i].baseLen = i, out[i].recordLen
	}
	return out
}

// Elements lists every element Loupe defines: the IANA ones its templates
// carry, then its enterprise-specific ones (sent, reserved or withdrawn).
// The docs' element table is generated from the same list
// (TestDocsListEveryElement).
func Elements() []Element {
	seen := map[uint16]bool{}
	var out []Element
	ts := append(templates(), extensionTemplate(2*shapes-1, 1<<len(extParts)-1))
	for _, t := range ts {
		for _, f := range t.fields {
			if !f.Enterprise && !seen[f.ID] {
				seen[f.ID] = true
				out = append(out, f)
			}
		}
	}
	slices.SortFunc(out, func(a, b Element) int { return int(a.ID) - int(b.ID) })
	for _, e := range flow.EnterpriseElements() {
		out = append(out, enterpriseElement(e))
	}
	return out
}
