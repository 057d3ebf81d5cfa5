package flow

import (
	"fmt"
	"strconv"
	"strings"
)

// IP protocol numbers the key gives a meaning to.
const (
	ProtoICMP    = 1
	ProtoTCP     = 6
	ProtoUDP     = 17
	ProtoICMPv6  = 58
	ProtoSCTP    = 132
	ProtoUDPLite = 136
)

// EtherTypeARP is the EtherType of ARP, named in labels and docs.
const EtherTypeARP = 0x0806

// Protocol names an IP protocol number.
type Protocol struct {
	Number uint8
	// Name is the short name the CLI and Prometheus labels use.
	Name string
	// Keyword is the IANA protocol-numbers registry keyword, lowercased
	// (what OpenTelemetry's network.transport extends to IP protocols).
	// It differs from Name only where the registry's keyword is not the
	// name people type: ipv6-icmp (icmpv6), ospfigp (ospf).
	Keyword string
}

// protocols is every protocol with a name. Others are known by number.
var protocols = [...]Protocol{
	{ProtoICMP, "icmp", "icmp"},
	{2, "igmp", "igmp"},
	{ProtoTCP, "tcp", "tcp"},
	{ProtoUDP, "udp", "udp"},
	{33, "dccp", "dccp"},
	{41, "ipv6", "ipv6"},
	{47, "gre", "gre"},
	{50, "esp", "esp"},
	{51, "ah", "ah"},
	{ProtoICMPv6, "icmpv6", "ipv6-icmp"},
	{89, "ospf", "ospfigp"},
	{103, "pim", "pim"},
	{112, "vrrp", "vrrp"},
	{ProtoSCTP, "sctp", "sctp"},
	{ProtoUDPLite, "udplite", "udplite"},
}

// Protocols lists the protocols with a name, by number.
func Protocols() []Protocol { return append([]Protocol(nil), protocols[:]...) }

func protocolOf(p uint8) *Protocol {
	for i := range protocols {
		if protocols[i].Number == p {
			return &protocols[i]
		}
	}
	return nil
}

// ProtoName returns the protocol's short name, or its decimal number.
func ProtoName(p uint8) string {
	if pr := protocolOf(p); pr != nil {
		return pr.Name
	}
	return strconv.Itoa(int(p))
}

// ProtoKeyword returns the protocol's IANA keyword (lowercase), or its
// decimal number.
func ProtoKeyword(p uint8) string {
	if pr := protocolOf(p); pr != nil {
		return pr.Keyword
	}
	return strconv.Itoa(int(p))
}

// ParseProto reads a protocol number (0-255), name or IANA keyword, in any
// case.
func ParseProto(s string) (uint8, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	for _, p := range protocols {
		if l == p.Name || l == p.Keyword {
			return p.Number, nil
		}
	}
	n, err := strconv.ParseUint(l, 10, 8)
	if err != nil {
		names := make([]string, len(protocols))
		for i, p := range protocols {
			names[i] = p.Name
		}
		return 0, fmt.Errorf("%q is not a protocol number (0-255) or one of %s", s, strings.Join(names, ", "))
	}
	return uint8(n), nil
}

// HasPorts reports whether the datapath reads transport ports for proto:
// TCP, UDP, UDP-Lite and SCTP.
func HasPorts(proto uint8) bool {
	switch proto {
	case ProtoTCP, ProtoUDP, ProtoSCTP, ProtoUDPLite:
		return true
	}
	return false
}

// PortKind says what a key's SrcPort and DstPort hold.
type PortKind uint8

const (
	// NoPorts: both are zero (non-IP, or a protocol without ports).
	NoPorts PortKind = iota
	// TransportPorts: TCP, UDP, UDP-Lite or SCTP ports (zero for a
	// non-first fragment).
	TransportPorts
	// ICMPTypeCode: ICMP over IPv4 or ICMPv6 over IPv6; SrcPort is the
	// message type and DstPort the code. ICMP claimed by the other family
	// is not parsed (NoPorts).
	ICMPTypeCode
)

// IsIP reports whether the flow is IPv4 or IPv6.
func (k *Key) IsIP() bool { return k.EtherType == EtherTypeIPv4 || k.EtherType == EtherTypeIPv6 }

// PortKind returns what k's port fields hold, as the datapath fills them.
func (k *Key) PortKind() PortKind {
	switch {
	case !k.IsIP(), k.AggPrefix != 0: // an aggregate has none
		return NoPorts
	case HasPorts(k.Proto):
		return TransportPorts
	case k.Proto == ProtoICMP && k.EtherType == EtherTypeIPv4, k.Proto == ProtoICMPv6 && k.EtherType == EtherTypeIPv6:
		return ICMPTypeCode
	}
	return NoPorts
}

// IsTCP reports whether the flow is TCP over IP: the one whose TCPFlags
// can be non-zero.
func (k *Key) IsTCP() bool { return k.IsIP() && k.Proto == ProtoTCP }
