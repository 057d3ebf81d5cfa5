package flow

// The registry of wire identifiers: each field's identifier in every wire
// format (Field.Wire), the IDs of Loupe's own IPFIX elements, and the
// identifiers kept free or withdrawn. Later fields take new identifiers
// here; TestRegistryHasNoCollisions keeps every column free of collisions,
// and each encoder's tests check that it sends what the registry says.
//
// Free identifiers, for the next field:
//
//	IPFIX, Loupe enterprise: 47 and up (2-5: withdrawn, see
//	  EnterpriseElements)
//	protobuf (loupe.flow.v1.FlowRecord): 23-29 are kept for drop and
//	  loss counters, 34-39 for latency, 44-49 for DNS and application
//	  data; other fields take 80 and up
//	store column kinds: 62 to 99 (27 is the presence column, 100-103
//	  the segment dictionaries)

// Wire is a field's identifiers in each wire format.
type Wire struct {
	// IPFIX lists the information elements that carry the field; which
	// one a record uses depends on its template (IPv4, IPv6) or
	// direction. Empty: not sent.
	IPFIX []IE
	// Proto is the field number in loupe.flow.v1.FlowRecord
	// (proto/loupe/flow/v1/flow.proto).
	Proto int
	// Store is the block kind of the field's column in a store segment
	// (internal/store/format.go).
	Store uint32
	// OTLP lists the OpenTelemetry log-record attributes that carry the
	// field, or OTLPTimestamp for the log record's own timestamp.
	OTLP []string
	// Metric names the traffic metrics of a counter field.
	Metric *Metric
}

// OTLPTimestamp stands for the OTLP LogRecord's time_unix_nano in
// Wire.OTLP: the field is the log record's timestamp, not an attribute.
const OTLPTimestamp = "time_unix_nano"

// IE identifies an IPFIX information element.
type IE struct {
	ID uint16
	// Name is the element's name: IANA's, or Loupe's (EnterpriseElements).
	Name string
	// Enterprise elements are Loupe's own, numbered under the PEN the
	// exporter is configured with; the others are IANA's.
	Enterprise bool
	// Part names the part of the element the field fills when two fields
	// share one element (icmpTypeCode*: type × 256 + code).
	Part string
}

// Metric names the metrics that sum a counter field by label set.
type Metric struct {
	Prom     string // Prometheus counter
	OTLP     string // OpenTelemetry cumulative sum
	OTLPUnit string // its UCUM unit
	Help     string // what is counted, for the metrics' descriptions
}

// ElementStatus is the state of one of Loupe's own IPFIX element IDs.
type ElementStatus uint8

const (
	// Sent: templates carry the element.
	Sent ElementStatus = iota + 1
	// Reserved: kept for a field planned with this meaning; not sent yet.
	Reserved
	// Withdrawn: reserved once, never sent, and given up for an IANA
	// element. The ID is never used again, for any meaning.
	Withdrawn
)

func (s ElementStatus) String() string {
	switch s {
	case Sent:
		return "sent"
	case Reserved:
		return "reserved, not sent"
	case Withdrawn:
		return "withdrawn, never sent"
	}
	return "unknown"
}

// EnterpriseElement is one ID of Loupe's IPFIX enterprise space.
type EnterpriseElement struct {
	ID     uint16
	Name   string
	Type   string // IPFIX abstract data type (RFC 7011 §6.1)
	Length uint16
	Status ElementStatus
	Doc    string
}

// enterpriseElements is every ID of Loupe's enterprise space ever given a
// meaning, in ID order. An ID keeps its meaning for ever: a withdrawn ID
// is listed so that it is never taken again.
var enterpriseElements = append([]EnterpriseElement{
	{ID: 1, Name: "loupeSamplingRate", Type: "unsigned32", Length: 4, Status: Sent,
		Doc: "1-in-N packet sampling rate the counters were taken at; 1 = every packet (counters are not scaled)"},
	{ID: 2, Name: "loupeDroppedPacketCount", Type: "unsigned64", Length: 8, Status: Withdrawn,
		Doc: "was: packets of the flow dropped by the kernel; drops use IANA's droppedPacketDeltaCount (133)"},
	{ID: 3, Name: "loupeDroppedOctetCount", Type: "unsigned64", Length: 8, Status: Withdrawn,
		Doc: "was: bytes of the flow dropped by the kernel; drops use IANA's droppedOctetDeltaCount (132)"},
	{ID: 4, Name: "loupeDropReason", Type: "unsigned16", Length: 2, Status: Withdrawn,
		Doc: "was: the kernel's drop reason of the last dropped packet, as a number; kernels renumber enum skb_drop_reason, " +
			"so drops carry their reasons by name, with their packets (loupeDropReasons, 18)"},
	{ID: 5, Name: "loupeSmoothedRttMicroseconds", Type: "unsigned32", Length: 4, Status: Withdrawn,
		Doc: "was: the smoothed TCP RTT in microseconds; records carry the interval's minimum, maximum and last in " +
			"nanoseconds (loupeRttMinNanoseconds, 13, to loupeRttLastNanoseconds, 15)"},
	{ID: 6, Name: "loupeSegmentDeltaCount", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "wire packets (segments) of the flow in this record: a GSO/GRO super-packet counts as its segments"},
	{ID: 7, Name: "loupeWireOctetDeltaCount", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "bytes of those segments on the wire: octetDeltaCount plus the headers of the other segments of each super-packet"},
	{ID: 8, Name: "loupeAggregatePrefix", Type: "unsigned8", Length: 1, Status: Sent,
		Doc: "an aggregate's prefix length P: the record counts every flow between the /P prefixes of its addresses, without ports or MACs; 0 for a flow"},
	{ID: 9, Name: "loupeAccuracy", Type: "unsigned8", Length: 1, Status: Sent,
		Doc: "how the counters were obtained: 0 exact (counted packet by packet), 1 decoded (exact, from the sketch's flow set), 2 estimated (count-min sketch: never below the truth)"},
	{ID: 10, Name: "loupeMaxErrorPacketDeltaCount", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "estimates only: packetDeltaCount exceeds the true count by at most this many, with probability loupeErrorConfidence"},
	{ID: 11, Name: "loupeMaxErrorOctetDeltaCount", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "estimates only: octetDeltaCount exceeds the true count by at most this many, with probability loupeErrorConfidence"},
	{ID: 12, Name: "loupeErrorConfidence", Type: "float64", Length: 8, Status: Sent,
		Doc: "estimates only: the probability (0 to 1) that both bounds hold"},
	{ID: 13, Name: "loupeRttMinNanoseconds", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "the smallest smoothed RTT of the flow's TCP socket in the interval, nanoseconds"},
	{ID: 14, Name: "loupeRttMaxNanoseconds", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "the largest smoothed RTT of the flow's TCP socket in the interval, nanoseconds"},
	{ID: 15, Name: "loupeRttLastNanoseconds", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "the last smoothed RTT of the flow's TCP socket in the interval, nanoseconds"},
	{ID: 16, Name: "loupeHandshakeRttNanoseconds", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "the TCP handshake RTT seen at the hook, nanoseconds"},
	{ID: 17, Name: "loupeRetransmittedSegmentDeltaCount", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "TCP segments the flow's socket retransmitted in the interval"},
	{ID: 18, Name: "loupeDropReasons", Type: "string", Length: VariableLength, Status: Sent,
		Doc: "droppedPacketDeltaCount by the kernel's drop reason, as JSON: {\"NETFILTER_DROP\":3}"},
	{ID: 19, Name: "loupeDnsId", Type: "unsigned16", Length: 2, Status: Sent,
		Doc: "the ID of a DNS query of the flow"},
	{ID: 20, Name: "loupeDnsQueryName", Type: "string", Length: VariableLength, Status: Sent,
		Doc: "the name of that DNS query"},
	{ID: 21, Name: "loupeDnsResponseCode", Type: "unsigned16", Length: 2, Status: Sent,
		Doc: "the DNS response's code (RCODE, with EDNS's extension: 12 bits)"},
	{ID: 22, Name: "loupeDnsLatencyNanoseconds", Type: "unsigned64", Length: 8, Status: Sent,
		Doc: "from the DNS query to its response at the hook, nanoseconds"},
	{ID: 23, Name: "loupeTunnelType", Type: "unsigned8", Length: 1, Status: Sent,
		Doc: "the tunnel the flow's packets were taken out of: 1 VXLAN, 2 Geneve, 3 GRE, 4 IP in IP"},
	{ID: 24, Name: "loupeTunnelId", Type: "unsigned32", Length: 4, Status: Sent,
		Doc: "the tunnel's ID where IANA has no element for it: Geneve's VNI (VXLAN's goes in layer2SegmentId, GRE's key in greKey)"},
	{ID: 25, Name: "loupeOuterSourceIPv4Address", Type: "ipv4Address", Length: 4, Status: Sent,
		Doc: "the tunnel's outer source address, IPv4"},
	{ID: 26, Name: "loupeOuterDestinationIPv4Address", Type: "ipv4Address", Length: 4, Status: Sent,
		Doc: "the tunnel's outer destination address, IPv4"},
	{ID: 27, Name: "loupeOuterSourceIPv6Address", Type: "ipv6Address", Length: 16, Status: Sent,
		Doc: "the tunnel's outer source address, IPv6"},
	{ID: 28, Name: "loupeOuterDestinationIPv6Address", Type: "ipv6Address", Length: 16, Status: Sent,
		Doc: "the tunnel's outer destination address, IPv6"},
	{ID: 29, Name: "loupeOuterSourcePort", Type: "unsigned16", Length: 2, Status: Sent,
		Doc: "the tunnel's outer UDP source port (VXLAN, Geneve)"},
	{ID: 30, Name: "loupeOuterDestinationPort", Type: "unsigned16", Length: 2, Status: Sent,
		Doc: "the tunnel's outer UDP destination port (VXLAN, Geneve)"},
}, k8sElements()...)

// VariableLength is the length of an element of variable length in a
// template (RFC 7011 §7): each value carries its own length.
const VariableLength = 65535

// EnterpriseElements lists every ID of Loupe's IPFIX enterprise space:
// sent, reserved and withdrawn.
func EnterpriseElements() []EnterpriseElement {
	return append([]EnterpriseElement(nil), enterpriseElements[:]...)
}

// ProtoRange is a range of protobuf field numbers kept for fields to come.
type ProtoRange struct {
	From, To int
	For      string
}

// reservedProto are the FlowRecord field numbers kept free, as flow.proto
// announces them.
var reservedProto = [...]ProtoRange{
	{23, 29, "drop and loss counters"},
	{34, 39, "latency"},
	{44, 49, "DNS and application metadata"},
}

// ReservedProtoRanges lists the FlowRecord field numbers kept for fields
// to come.
func ReservedProtoRanges() []ProtoRange { return append([]ProtoRange(nil), reservedProto[:]...) }

// StoreDictionaryKinds is the first block kind of a store segment that is
// not a column (the dictionaries): field columns take kinds below it.
const StoreDictionaryKinds = 100
