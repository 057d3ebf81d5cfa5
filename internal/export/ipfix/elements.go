package ipfix

import "slices"

// Element is one Information Element a template can carry: an IANA element
// from RFC 7012's registry (Enterprise false) or one of Loupe's own elements,
// numbered under Options.EnterpriseNumber (Enterprise true).
type Element struct {
	ID         uint16
	Name       string
	Type       string // IPFIX abstract data type (RFC 7011 §6.1)
	Length     uint16 // octets on the wire; every element Loupe sends is fixed-length
	Enterprise bool
	// Sent is false for enterprise elements whose IDs are reserved for
	// later fields but that no template carries yet.
	Sent        bool
	Description string
}

// IANA elements (RFC 7012, https://www.iana.org/assignments/ipfix). The
// lengths are the ones Loupe sends: reduced-size encoding (RFC 7011 §6.2) is
// not used, so every element has its registry length.
var (
	ieOctetDeltaCount   = Element{ID: 1, Name: "octetDeltaCount", Type: "unsigned64", Length: 8, Sent: true, Description: "bytes of the flow in this record (L2 length at the hook)"}
	iePacketDeltaCount  = Element{ID: 2, Name: "packetDeltaCount", Type: "unsigned64", Length: 8, Sent: true, Description: "packets of the flow in this record"}
	ieProtocol          = Element{ID: 4, Name: "protocolIdentifier", Type: "unsigned8", Length: 1, Sent: true, Description: "IP protocol number"}
	ieTCPControlBits    = Element{ID: 6, Name: "tcpControlBits", Type: "unsigned16", Length: 2, Sent: true, Description: "union of the TCP flags of the flow's packets (RFC 7125: FIN 0x01 ... CWR 0x80, AE/NS 0x100); 0 for other protocols"}
	ieSrcPort           = Element{ID: 7, Name: "sourceTransportPort", Type: "unsigned16", Length: 2, Sent: true, Description: "source port; 0 for ICMP/ICMPv6 (see icmpTypeCode*) and non-first fragments"}
	ieSrcIPv4           = Element{ID: 8, Name: "sourceIPv4Address", Type: "ipv4Address", Length: 4, Sent: true, Description: "source address (IPv4 template)"}
	ieIngressInterface  = Element{ID: 10, Name: "ingressInterface", Type: "unsigned32", Length: 4, Sent: true, Description: "ifindex of the interface for ingress records, 0 for egress records"}
	ieDstPort           = Element{ID: 11, Name: "destinationTransportPort", Type: "unsigned16", Length: 2, Sent: true, Description: "destination port; 0 for ICMP/ICMPv6"}
	ieDstIPv4           = Element{ID: 12, Name: "destinationIPv4Address", Type: "ipv4Address", Length: 4, Sent: true, Description: "destination address (IPv4 template)"}
	ieEgressInterface   = Element{ID: 14, Name: "egressInterface", Type: "unsigned32", Length: 4, Sent: true, Description: "ifindex of the interface for egress records, 0 for ingress records"}
	ieSrcIPv6           = Element{ID: 27, Name: "sourceIPv6Address", Type: "ipv6Address", Length: 16, Sent: true, Description: "source address (IPv6 template)"}
	ieDstIPv6           = Element{ID: 28, Name: "destinationIPv6Address", Type: "ipv6Address", Length: 16, Sent: true, Description: "destination address (IPv6 template)"}
	ieICMPTypeCodeIPv4  = Element{ID: 32, Name: "icmpTypeCodeIPv4", Type: "unsigned16", Length: 2, Sent: true, Description: "type × 256 + code for ICMP (protocol 1), 0 otherwise (IPv4 template)"}
	ieSrcMAC            = Element{ID: 56, Name: "sourceMacAddress", Type: "macAddress", Length: 6, Sent: true, Description: "source MAC address"}
	ieFlowDirection     = Element{ID: 61, Name: "flowDirection", Type: "unsigned8", Length: 1, Sent: true, Description: "0 ingress, 1 egress: the TC hook the packets were counted at"}
	ieDstMAC            = Element{ID: 80, Name: "destinationMacAddress", Type: "macAddress", Length: 6, Sent: true, Description: "destination MAC address"}
	ieDSCP              = Element{ID: 195, Name: "ipDiffServCodePoint", Type: "unsigned8", Length: 1, Sent: true, Description: "DSCP of the flow's last packet"}
	ieICMPTypeCodeIPv6  = Element{ID: 139, Name: "icmpTypeCodeIPv6", Type: "unsigned16", Length: 2, Sent: true, Description: "type × 256 + code for ICMPv6 (protocol 58), 0 otherwise (IPv6 template)"}
	ieFlowStartMillis   = Element{ID: 152, Name: "flowStartMilliseconds", Type: "dateTimeMilliseconds", Length: 8, Sent: true, Description: "first packet of the flow in this record, ms since the Unix epoch"}
	ieFlowEndMillis     = Element{ID: 153, Name: "flowEndMilliseconds", Type: "dateTimeMilliseconds", Length: 8, Sent: true, Description: "last packet of the flow in this record, ms since the Unix epoch"}
	ieEthernetType      = Element{ID: 256, Name: "ethernetType", Type: "unsigned16", Length: 2, Sent: true, Description: "EtherType (0x0800 IPv4, 0x86DD IPv6, 0x0806 ARP, ...)"}
	ieLoupeSamplingRate = Element{ID: 1, Name: "loupeSamplingRate", Type: "unsigned32", Length: 4, Enterprise: true, Sent: true, Description: "1-in-N packet sampling rate the counters were taken at; 1 = every packet (counters are not scaled)"}
)

// Enterprise-specific elements (Options.EnterpriseNumber). IDs 2-5 are
// reserved now, so that the fields later work adds keep the numbers
// operators' collector dictionaries already have; no template carries them
// yet. IDs are never reused for another meaning.
var enterpriseElements = []Element{
	ieLoupeSamplingRate,
	{ID: 2, Name: "loupeDroppedPacketCount", Type: "unsigned64", Length: 8, Enterprise: true, Description: "packets of the flow dropped by the kernel in this record"},
	{ID: 3, Name: "loupeDroppedOctetCount", Type: "unsigned64", Length: 8, Enterprise: true, Description: "bytes of the flow dropped by the kernel in this record"},
	{ID: 4, Name: "loupeDropReason", Type: "unsigned16", Length: 2, Enterprise: true, Description: "kernel drop reason (enum skb_drop_reason) of the last dropped packet"},
	{ID: 5, Name: "loupeSmoothedRttMicroseconds", Type: "unsigned32", Length: 4, Enterprise: true, Description: "smoothed TCP round-trip time, microseconds"},
}

// Template IDs. Data sets use IDs ≥ 256 (RFC 7011 §3.4.3).
const (
	TemplateIPv4  uint16 = 256
	TemplateIPv6  uint16 = 257
	TemplateNonIP uint16 = 258
)

// template is one template's field list in wire order, and the length of a
// data record it describes.
type template struct {
	id        uint16
	fields    []Element
	recordLen int
}

// templates returns the three templates Loupe sends. The field order is the
// encoder's write order (encode.go); a test checks that both agree.
func templates() []template {
	v4 := []Element{
		ieSrcIPv4, ieDstIPv4, ieSrcPort, ieDstPort, ieProtocol,
		ieOctetDeltaCount, iePacketDeltaCount, ieFlowStartMillis, ieFlowEndMillis,
		ieTCPControlBits, ieIngressInterface, ieEgressInterface, ieFlowDirection,
		ieSrcMAC, ieDstMAC, ieEthernetType, ieDSCP, ieICMPTypeCodeIPv4, ieLoupeSamplingRate,
	}
	v6 := []Element{
		ieSrcIPv6, ieDstIPv6, ieSrcPort, ieDstPort, ieProtocol,
		ieOctetDeltaCount, iePacketDeltaCount, ieFlowStartMillis, ieFlowEndMillis,
		ieTCPControlBits, ieIngressInterface, ieEgressInterface, ieFlowDirection,
		ieSrcMAC, ieDstMAC, ieEthernetType, ieDSCP, ieICMPTypeCodeIPv6, ieLoupeSamplingRate,
	}
	nonIP := []Element{
		ieSrcMAC, ieDstMAC, ieEthernetType,
		ieOctetDeltaCount, iePacketDeltaCount, ieFlowStartMillis, ieFlowEndMillis,
		ieIngressInterface, ieEgressInterface, ieFlowDirection, ieLoupeSamplingRate,
	}
	out := []template{{id: TemplateIPv4, fields: v4}, {id: TemplateIPv6, fields: v6}, {id: TemplateNonIP, fields: nonIP}}
	for i := range out {
		for _, f := range out[i].fields {
			out[i].recordLen += int(f.Length)
		}
	}
	return out
}

// Elements lists every element Loupe defines: the IANA ones its templates
// carry, then its enterprise-specific ones (sent or reserved). The docs'
// element table is generated from the same list (TestDocsListEveryElement).
func Elements() []Element {
	seen := map[uint16]bool{}
	var out []Element
	for _, t := range templates() {
		for _, f := range t.fields {
			if !f.Enterprise && !seen[f.ID] {
				seen[f.ID] = true
				out = append(out, f)
			}
		}
	}
	slices.SortFunc(out, func(a, b Element) int { return int(a.ID) - int(b.ID) })
	return append(out, enterpriseElements...)
}
