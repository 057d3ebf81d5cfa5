package otlp

import (
	"strconv"

	"loupe/internal/flow"
)

// Attribute and metric names. The network ones are from the OpenTelemetry
// semantic-conventions registry (see docs/exporters/otlp.md for the
// version); the registry has no per-flow MAC, IP protocol number, ICMP,
// TCP-flag, DSCP or sampling attribute, so those live under loupe.*.
const (
	AttrServiceName    = "service.name"
	AttrServiceVersion = "service.version"
	AttrHostName       = "host.name"

	AttrIfaceName   = "network.interface.name"
	AttrIODirection = "network.io.direction"
	AttrNetworkType = "network.type"
	AttrTransport   = "network.transport"
	AttrSrcAddr     = "source.address"
	AttrSrcPort     = "source.port"
	AttrDstAddr     = "destination.address"
	AttrDstPort     = "destination.port"

	AttrIPProtocol = "loupe.ip.protocol"
	AttrICMPType   = "loupe.icmp.type"
	AttrICMPCode   = "loupe.icmp.code"
	AttrPackets    = "loupe.flow.packets"
	AttrBytes      = "loupe.flow.bytes"
	AttrFlowStart  = "loupe.flow.start"
	AttrTCPFlags   = "loupe.tcp.flags"
	AttrDSCP       = "loupe.dscp"
	AttrSampling   = "loupe.sampling_rate"
	AttrIfIndex    = "loupe.ifindex"
	AttrSrcMAC     = "loupe.source.mac"
	AttrDstMAC     = "loupe.destination.mac"
	AttrEthType    = "loupe.eth_type"

	// EventName is every flow log record's event name.
	EventName = "loupe.flow"
	// ScopeName is the instrumentation scope of logs and metrics.
	ScopeName = "loupe"

	MetricIO      = "loupe.network.io"
	MetricPackets = "loupe.network.packet.count"

	// OtherIface is the interface name streams fold into past
	// MaxMetricStreams, as in the Prometheus sink.
	OtherIface = "_other"
)

// The attribute slots of a log record, in the order they are sent.
const (
	aIface = iota
	aDirection
	aNetType
	aTransport
	aSrcAddr
	aSrcPort
	aDstAddr
	aDstPort
	aProto
	aICMPType
	aICMPCode
	aPackets
	aBytes
	aStart
	aTCPFlags
	aDSCP
	aSampling
	aIfIndex
	aSrcMAC
	aDstMAC
	aEthType
	nAttrs
)

// attrKeys names each attribute slot. It is read-only.
var attrKeys = [nAttrs]string{
	aIface: AttrIfaceName, aDirection: AttrIODirection, aNetType: AttrNetworkType,
	aTransport: AttrTransport, aSrcAddr: AttrSrcAddr, aSrcPort: AttrSrcPort,
	aDstAddr: AttrDstAddr, aDstPort: AttrDstPort, aProto: AttrIPProtocol,
	aICMPType: AttrICMPType, aICMPCode: AttrICMPCode, aPackets: AttrPackets,
	aBytes: AttrBytes, aStart: AttrFlowStart, aTCPFlags: AttrTCPFlags,
	aDSCP: AttrDSCP, aSampling: AttrSampling, aIfIndex: AttrIfIndex,
	aSrcMAC: AttrSrcMAC, aDstMAC: AttrDstMAC, aEthType: AttrEthType,
}

// IP protocol numbers with special handling.
const (
	protoICMP    = 1
	protoTCP     = 6
	protoUDP     = 17
	protoICMPv6  = 58
	protoSCTP    = 132
	protoUDPLite = 136
)

// Transport is the network.transport value of an IP protocol number: the
// IANA protocol-numbers registry keyword, lowercased (semconv asks for
// lowercase and lists tcp and udp; the registry's keywords extend that
// naturally to icmp, sctp, ...), or the decimal number for protocols
// without a keyword here.
func Transport(proto uint8) string {
	switch proto {
	case protoICMP:
		return "icmp"
	case 2:
		return "igmp"
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case 33:
		return "dccp"
	case 41:
		return "ipv6"
	case 47:
		return "gre"
	case 50:
		return "esp"
	case 51:
		return "ah"
	case protoICMPv6:
		return "ipv6-icmp"
	case 89:
		return "ospfigp"
	case 103:
		return "pim"
	case 112:
		return "vrrp"
	case protoSCTP:
		return "sctp"
	case protoUDPLite:
		return "udplite"
	}
	return strconv.Itoa(int(proto))
}

// hasPorts says whether the key's ports are transport ports; the parser
// reads them for these protocols only.
func hasPorts(proto uint8) bool {
	switch proto {
	case protoTCP, protoUDP, protoSCTP, protoUDPLite:
		return true
	}
	return false
}

// isICMP says whether the key's ports carry an ICMP type and code.
func isICMP(proto uint8) bool { return proto == protoICMP || proto == protoICMPv6 }

// IODirection is the network.io.direction value of a hook: packets seen at
// ingress were received by the interface, at egress transmitted.
func IODirection(d flow.Direction) string {
	if d == flow.Egress {
		return "transmit"
	}
	return "receive"
}

// networkType is the network.type value of an EtherType ("" for non-IP).
func networkType(etherType uint16) string {
	switch etherType {
	case flow.EtherTypeIPv4:
		return "ipv4"
	case flow.EtherTypeIPv6:
		return "ipv6"
	}
	return ""
}

// appendMAC appends a MAC address in the form semconv prescribes for
// host.mac (IEEE RA: uppercase hexadecimal octets separated by hyphens,
// AC-DE-48-23-45-67), the only MAC attribute the registry defines.
func appendMAC(b []byte, mac [6]byte) []byte {
	const hex = "0123456789ABCDEF"
	for i, o := range mac {
		if i > 0 {
			b = append(b, '-')
		}
		b = append(b, hex[o>>4], hex[o&0xf])
	}
	return b
}
