package flow

// The registry of wire identifiers: each field's identifier in every wire
// format (Field.Wire), the IDs of Loupe's own IPFIX elements, and the
// identifiers kept free or withdrawn. Later fields take new identifiers
// here; TestRegistryHasNoCollisions keeps every column free of collisions,
// and each encoder's tests check that it sends what the registry says.
//
// Free identifiers, for the next field:
//
//	IPFIX, Loupe enterprise: 13 and up (2-5: see EnterpriseElements)
//	protobuf (loupe.flow.v1.FlowRecord): 19-49 are kept for drop and
//	  loss counters (19-29), latency (30-39), DNS and application data
//	  (40-49); other fields take 58 and up
//	store column kinds: 27 to 99 (100-103 are the segment dictionaries)

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
var enterpriseElements = [...]EnterpriseElement{
	{ID: 1, Name: "loupeSamplingRate", Type: "unsigned32", Length: 4, Status: Sent,
		Doc: "1-in-N packet sampling rate the counters were taken at; 1 = every packet (counters are not scaled)"},
	{ID: 2, Name: "loupeDroppedPacketCount", Type: "unsigned64", Length: 8, Status: Withdrawn,
		Doc: "was: packets of the flow dropped by the kernel; drops use IANA's droppedPacketDeltaCount (133)"},
	{ID: 3, Name: "loupeDroppedOctetCount", Type: "unsigned64", Length: 8, Status: Withdrawn,
		Doc: "was: bytes of the flow dropped by the kernel; drops use IANA's droppedOctetDeltaCount (132)"},
	{ID: 4, Name: "loupeDropReason", Type: "unsigned16", Length: 2, Status: Reserved,
		Doc: "kernel drop reason (enum skb_drop_reason) of the last dropped packet (IANA's forwardingStatus cannot carry it)"},
	{ID: 5, Name: "loupeSmoothedRttMicroseconds", Type: "unsigned32", Length: 4, Status: Reserved,
		Doc: "smoothed TCP round-trip time, microseconds"},
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
}

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
	{19, 29, "drop and loss counters"},
	{30, 39, "latency"},
	{40, 49, "DNS and application metadata"},
}

// ReservedProtoRanges lists the FlowRecord field numbers kept for fields
// to come.
func ReservedProtoRanges() []ProtoRange { return append([]ProtoRange(nil), reservedProto[:]...) }

// StoreDictionaryKinds is the first block kind of a store segment that is
// not a column (the dictionaries): field columns take kinds below it.
const StoreDictionaryKinds = 100
