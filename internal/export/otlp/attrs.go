package otlp

import "loupe/internal/flow"

// Attribute and metric names. The network ones are from the OpenTelemetry
// semantic-conventions registry (see docs/exporters/otlp.md for the
// version); the registry has no per-flow MAC, VLAN, IP protocol number,
// ICMP, TCP-flag, DSCP or sampling attribute, so those live under loupe.*.
// Which record field each one carries is flow's registry of wire
// identifiers (flow.Field.Wire.OTLP, Metric); the coverage tests check the
// encoder against it.
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
	AttrSegments   = "loupe.flow.segments"
	AttrWireBytes  = "loupe.flow.wire_bytes"
	AttrFlowStart  = "loupe.flow.start"
	AttrTCPFlags   = "loupe.tcp.flags"
	AttrDSCP       = "loupe.dscp"
	AttrSampling   = "loupe.sampling_rate"
	AttrIfIndex    = "loupe.ifindex"
	AttrSrcMAC     = "loupe.source.mac"
	AttrDstMAC     = "loupe.destination.mac"
	AttrEthType    = "loupe.eth_type"
	AttrVlanID     = "loupe.vlan.id"
	AttrAggPrefix  = "loupe.aggregate.prefix_length"
	AttrAccuracy   = "loupe.accuracy"
	AttrMaxErrPkts = "loupe.max_error.packets"
	AttrMaxErrByts = "loupe.max_error.bytes"
	AttrErrConf    = "loupe.max_error.confidence"

	// The kernel signals, DNS and tunnel, each only where measured. The
	// registry has dns.question.name; the rest is Loupe's. Times are
	// integers in nanoseconds, as the record's.
	AttrRTTMin       = "loupe.tcp.rtt.min"
	AttrRTTMax       = "loupe.tcp.rtt.max"
	AttrRTTLast      = "loupe.tcp.rtt.last"
	AttrHandshakeRTT = "loupe.tcp.handshake_rtt"
	AttrRetransmits  = "loupe.tcp.retransmits"
	AttrDropPackets  = "loupe.drop.packets"
	AttrDropBytes    = "loupe.drop.bytes"
	AttrDropReasons  = "loupe.drop.reasons"
	AttrDNSID        = "loupe.dns.id"
	AttrDNSQName     = "dns.question.name"
	AttrDNSRcode     = "loupe.dns.rcode"
	AttrDNSLatency   = "loupe.dns.latency"
	AttrTunnelType   = "loupe.tunnel.type"
	AttrTunnelID     = "loupe.tunnel.id"
	AttrOuterSrcAddr = "loupe.tunnel.source.address"
	AttrOuterDstAddr = "loupe.tunnel.destination.address"
	AttrOuterSrcPort = "loupe.tunnel.source.port"
	AttrOuterDstPort = "loupe.tunnel.destination.port"

	// EventName is every flow log record's event name.
	EventName = "loupe.flow"
	// ScopeName is the instrumentation scope of logs and metrics.
	ScopeName = "loupe"

	// The traffic sums, one per counter field of flow.Fields (the names
	// are the registry's: flow.Field.Wire.Metric.OTLP).
	MetricIO       = "loupe.network.io"
	MetricPackets  = "loupe.network.packet.count"
	MetricSegments = "loupe.network.segment.count"
	MetricWireIO   = "loupe.network.wire.io"

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
	aSegments
	aWireBytes
	aStart
	aTCPFlags
	aDSCP
	aSampling
	aIfIndex
	aSrcMAC
	aDstMAC
	aEthType
	aVlanID
	aAggPrefix
	aAccuracy
	aMaxErrPkts
	aMaxErrByts
	aErrConf
	aRTTMin
	aRTTMax
	aRTTLast
	aHandshakeRTT
	aRetransmits
	aDropPackets
	aDropBytes
	aDropReasons
	aDNSID
	aDNSQName
	aDNSRcode
	aDNSLatency
	aTunnelType
	aTunnelID
	aOuterSrcAddr
	aOuterDstAddr
	aOuterSrcPort
	aOuterDstPort
	nAttrs
)

// attrKeys names each attribute slot. It is read-only.
var attrKeys = [nAttrs]string{
	aIface: AttrIfaceName, aDirection: AttrIODirection, aNetType: AttrNetworkType,
	aTransport: AttrTransport, aSrcAddr: AttrSrcAddr, aSrcPort: AttrSrcPort,
	aDstAddr: AttrDstAddr, aDstPort: AttrDstPort, aProto: AttrIPProtocol,
	aICMPType: AttrICMPType, aICMPCode: AttrICMPCode, aPackets: AttrPackets,
	aBytes: AttrBytes, aSegments: AttrSegments, aWireBytes: AttrWireBytes,
	aStart: AttrFlowStart, aTCPFlags: AttrTCPFlags,
	aDSCP: AttrDSCP, aSampling: AttrSampling, aIfIndex: AttrIfIndex,
	aSrcMAC: AttrSrcMAC, aDstMAC: AttrDstMAC, aEthType: AttrEthType, aVlanID: AttrVlanID,
	aAggPrefix: AttrAggPrefix, aAccuracy: AttrAccuracy, aMaxErrPkts: AttrMaxErrPkts, aMaxErrByts: AttrMaxErrByts,
	aErrConf: AttrErrConf,
	aRTTMin:  AttrRTTMin, aRTTMax: AttrRTTMax, aRTTLast: AttrRTTLast, aHandshakeRTT: AttrHandshakeRTT,
	aRetransmits: AttrRetransmits, aDropPackets: AttrDropPackets, aDropBytes: AttrDropBytes, aDropReasons: AttrDropReasons,
	aDNSID: AttrDNSID, aDNSQName: AttrDNSQName, aDNSRcode: AttrDNSRcode, aDNSLatency: AttrDNSLatency,
	aTunnelType: AttrTunnelType, aTunnelID: AttrTunnelID, aOuterSrcAddr: AttrOuterSrcAddr, aOuterDstAddr: AttrOuterDstAddr,
	aOuterSrcPort: AttrOuterSrcPort, aOuterDstPort: AttrOuterDstPort,
}

// Transport is the network.transport value of an IP protocol number: the
// IANA protocol-numbers registry keyword, lowercased (semconv asks for
// lowercase and lists tcp and udp; the registry's keywords extend that
// naturally to icmp, sctp, ...), or the decimal number for protocols
// without a keyword in flow's protocol table.
func Transport(proto uint8) string { return flow.ProtoKeyword(proto) }

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
