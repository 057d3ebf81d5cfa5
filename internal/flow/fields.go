package flow

import (
	"net/netip"
	"time"

	"loupe/internal/tunnel"
)

// This file is the one definition of a flow record's fields: their names,
// meaning, types and how to read them from a Record, and, per field, the
// identifiers it has in every wire format (the registry, wire.go). Every
// encoder takes its fields from here, and has a field-coverage test
// (internal/flow/flowtest) that fails when a field is added here and the
// encoder neither carries it nor lists it as excluded, with a reason.
//
// To add a field: add it to Key or Record, add its row below (with its
// wire identifiers, see wire.go for the free ones), and run the tests: each
// encoder's coverage test says what it is missing.

// FieldType is how a field's value is represented.
type FieldType uint8

// Field types. Each type uses its own accessor of Field.
const (
	// TypeUint is an unsigned integer of Field.Bits bits (Uint, SetUint).
	TypeUint FieldType = iota + 1
	// TypeDirection is a Direction: "ingress" or "egress" (Uint, SetUint).
	TypeDirection
	// TypeString is a string (Str).
	TypeString
	// TypeMAC is a 6-byte MAC address (MAC).
	TypeMAC
	// TypeAddr is a 16-byte key address, IPv4 stored IPv4-mapped (Addr).
	// What it means depends on the EtherType: see Key.SrcIP.
	TypeAddr
	// TypeTime is a wall-clock time with nanoseconds (Time).
	TypeTime
	// TypeAccuracy is an Accuracy: "exact", "decoded" or "estimated"
	// (Uint, SetUint).
	TypeAccuracy
	// TypeFloat is a 64-bit floating-point number (Float).
	TypeFloat
	// TypeEnum is an unsigned integer of Field.Bits bits written by its
	// name, which Field.Enum gives (Uint, SetUint).
	TypeEnum
	// TypeIP is an IP address of its own family, outside the flow key
	// (IP): a tunnel's outer addresses.
	TypeIP
	// TypeCounts is a count by name (Counts): drop reasons.
	TypeCounts
)

func (t FieldType) String() string {
	switch t {
	case TypeUint:
		return "unsigned integer"
	case TypeDirection:
		return "direction"
	case TypeString:
		return "string"
	case TypeMAC:
		return "MAC address"
	case TypeAddr:
		return "IP address"
	case TypeTime:
		return "time"
	case TypeAccuracy:
		return "accuracy"
	case TypeFloat:
		return "number"
	case TypeEnum:
		return "name"
	case TypeIP:
		return "IP address"
	case TypeCounts:
		return "counts by name"
	}
	return "unknown"
}

// Field is one field of a flow record.
type Field struct {
	// Name is the field's name in JSON, which every text form (docs,
	// store column names, CLI) uses too.
	Name string
	Type FieldType
	// Bits is the width of a TypeUint, TypeDirection or TypeAccuracy
	// field.
	Bits int
	// Unit of the value ("" where none applies).
	Unit string
	// Key fields are part of the flow key: every record of a flow has the
	// same value.
	Key bool
	// Counter fields add up over the records of a flow (and over flows);
	// see Record.Counters.
	Counter bool
	// Doc is the field's meaning, as the README's JSON table states it.
	Doc string
	// Applies reports whether the field can be non-zero in this record,
	// from its key or its accuracy (nil: always). Where it does not
	// apply, the field is zero and encoders may leave it out.
	Applies func(r *Record) bool
	// Optional fields are left out of the JSON form of the records they
	// do not apply to (the others are always written, zero or not).
	Optional bool
	// Presence is the field's bit in Record.Has for a field present only
	// where it was measured (0 for the others): such a field applies to
	// the records that have its bit, is optional, and SetUint sets the
	// bit with the value (the other accessors hand out the value alone:
	// whoever writes through them calls MarkPresent).
	Presence Presence
	// Enum names the values of a TypeEnum field.
	Enum *Enum

	Uint    func(r *Record) uint64 // TypeUint, TypeDirection, TypeAccuracy, TypeEnum
	SetUint func(r *Record, v uint64)
	Str     func(r *Record) *string // TypeString
	// SetStr, where set, is how a TypeString field is written: a name
	// that copies of a record share (Record.K8s) is copied first.
	SetStr func(r *Record, s string)
	MAC    func(r *Record) *[6]byte     // TypeMAC
	Addr   func(r *Record) *[16]byte    // TypeAddr
	Time   func(r *Record) *time.Time   // TypeTime
	Float  func(r *Record) *float64     // TypeFloat
	IP     func(r *Record) *netip.Addr  // TypeIP
	Counts func(r *Record) *DropReasons // TypeCounts

	// Wire is the field's identifier in each wire format.
	Wire Wire
}

// AppliesTo reports whether f can be non-zero in r.
func (f *Field) AppliesTo(r *Record) bool { return f.Applies == nil || f.Applies(r) }

// SetString writes a TypeString field.
func (f *Field) SetString(r *Record, s string) {
	if f.SetStr != nil {
		f.SetStr(r, s)
		return
	}
	*f.Str(r) = s
}

// MarkPresent sets f's bit in r.Has, for a decoder that wrote the field
// through an accessor other than SetUint.
func (f *Field) MarkPresent(r *Record) { r.Has |= f.Presence }

// Enum names the values of a TypeEnum field.
type Enum struct {
	// Name names a valid value.
	Name func(v uint64) string
	// Parse is the inverse of Name.
	Parse func(s string) (uint64, error)
	// Valid reports whether v is a value the field can hold.
	Valid func(v uint64) bool
}

// tunnelTypes are the values of tunnel_type: a record of a flow that came
// through no tunnel has no tunnel_type.
var tunnelTypes = &Enum{
	Name: func(v uint64) string { return tunnel.Type(v).String() },
	Parse: func(s string) (uint64, error) {
		t, err := tunnel.ParseType(s)
		return uint64(t), err
	},
	Valid: func(v uint64) bool { return v > uint64(tunnel.None) && v <= uint64(tunnel.IPIP) },
}

// rcodes are the values of dns_rcode.
var rcodes = &Enum{
	Name: func(v uint64) string { return RcodeName(uint16(v)) },
	Parse: func(s string) (uint64, error) {
		rc, err := ParseRcode(s)
		return uint64(rc), err
	},
	Valid: func(v uint64) bool { return v <= MaxRcode },
}

// Fields returns every field of a record, in JSON order.
func Fields() []Field { return append([]Field(nil), fields[:]...) }

// FieldByName returns the field named name.
func FieldByName(name string) (Field, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// NumCounters is the number of counter fields: the length of
// Record.Counters.
const NumCounters = 4

// Counters returns the record's counter fields, in the order of Fields
// (TestCountersFollowFields checks it). Aggregating sinks sum them without
// naming them, so a counter added to the table is summed everywhere.
func (r *Record) Counters() [NumCounters]uint64 {
	return [NumCounters]uint64{r.Packets, r.Bytes, r.Segments, r.WireBytes}
}

// CounterFields returns the counter fields, in the order of Counters.
func CounterFields() []Field {
	out := make([]Field, 0, NumCounters)
	for _, f := range fields {
		if f.Counter {
			out = append(out, f)
		}
	}
	return out
}

func isIP(r *Record) bool        { return r.IsIP() }
func hasPorts(r *Record) bool    { return r.PortKind() != NoPorts }
func isTCP(r *Record) bool       { return r.IsTCP() }
func isAggregate(r *Record) bool { return r.AggPrefix != 0 }
func hasMACs(r *Record) bool     { return r.AggPrefix == 0 }
func isEstimate(r *Record) bool  { return r.Estimated() }

// has is the Applies of a field present only where measured.
func has(p Presence) func(r *Record) bool { return func(r *Record) bool { return r.Has&p != 0 } }

// fields is the table, the Kubernetes names last (k8s.go). It is
// read-only: Fields hands out copies.
var fields = append([]Field{
	{
		Name: "iface", Type: TypeString,
		Doc:  "interface name at eviction (`\"\"` if unknown)",
		Str:  func(r *Record) *string { return &r.Iface },
		Wire: Wire{Proto: 1, Store: 18, OTLP: []string{"network.interface.name"}},
	},
	{
		Name: "ifindex", Type: TypeUint, Bits: 32, Key: true,
		Doc:     "interface index",
		Uint:    func(r *Record) uint64 { return uint64(r.IfIndex) },
		SetUint: func(r *Record, v uint64) { r.IfIndex = uint32(v) },
		Wire: Wire{Proto: 2, Store: 5, OTLP: []string{"loupe.ifindex"},
			IPFIX: []IE{{ID: 10, Name: "ingressInterface"}, {ID: 14, Name: "egressInterface"}}},
	},
	{
		Name: "direction", Type: TypeDirection, Bits: 8, Key: true,
		Doc:     "`\"ingress\"` or `\"egress\"`: the TC hook the packets crossed",
		Uint:    func(r *Record) uint64 { return uint64(r.Direction) },
		SetUint: func(r *Record, v uint64) { r.Direction = Direction(v) },
		Wire: Wire{Proto: 3, Store: 11, OTLP: []string{"network.io.direction"},
			IPFIX: []IE{{ID: 61, Name: "flowDirection"}}},
	},
	{
		Name: "eth_type", Type: TypeUint, Bits: 16, Key: true,
		Doc:     "EtherType (2048 IPv4, 34525 IPv6, 2054 ARP, ...), after any VLAN tags",
		Uint:    func(r *Record) uint64 { return uint64(r.EtherType) },
		SetUint: func(r *Record, v uint64) { r.EtherType = uint16(v) },
		Wire: Wire{Proto: 4, Store: 7, OTLP: []string{"loupe.eth_type", "network.type"},
			IPFIX: []IE{{ID: 256, Name: "ethernetType"}}},
	},
	{
		Name: "src_mac", Type: TypeMAC, Key: true, Applies: hasMACs,
		Doc: "source MAC address",
		MAC: func(r *Record) *[6]byte { return &r.SrcMAC },
		Wire: Wire{Proto: 5, Store: 16, OTLP: []string{"loupe.source.mac"},
			IPFIX: []IE{{ID: 56, Name: "sourceMacAddress"}}},
	},
	{
		Name: "dst_mac", Type: TypeMAC, Key: true, Applies: hasMACs,
		Doc: "destination MAC address",
		MAC: func(r *Record) *[6]byte { return &r.DstMAC },
		Wire: Wire{Proto: 6, Store: 17, OTLP: []string{"loupe.destination.mac"},
			IPFIX: []IE{{ID: 80, Name: "destinationMacAddress"}}},
	},
	{
		Name: "vlan_id", Type: TypeUint, Bits: 12, Key: true,
		Doc:     "VLAN ID of the frame's outer 802.1Q/802.1ad tag, whether still in the frame or already moved into the packet's metadata by the kernel; 0: untagged",
		Uint:    func(r *Record) uint64 { return uint64(r.VlanID) },
		SetUint: func(r *Record, v uint64) { r.VlanID = uint16(v) },
		Wire: Wire{Proto: 52, Store: 21, OTLP: []string{"loupe.vlan.id"},
			IPFIX: []IE{{ID: 58, Name: "vlanId"}, {ID: 59, Name: "postVlanId"}, {ID: 243, Name: "dot1qVlanId"}}},
	},
	{
		Name: "proto", Type: TypeUint, Bits: 8, Key: true, Applies: isIP,
		Doc:     "IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6, ...)",
		Uint:    func(r *Record) uint64 { return uint64(r.Proto) },
		SetUint: func(r *Record, v uint64) { r.Proto = uint8(v) },
		Wire: Wire{Proto: 7, Store: 12, OTLP: []string{"loupe.ip.protocol", "network.transport"},
			IPFIX: []IE{{ID: 4, Name: "protocolIdentifier"}}},
	},
	{
		Name: "src_addr", Type: TypeAddr, Key: true, Applies: isIP,
		Doc:  "source address (`\"\"` for non-IP flows, and for an IPv4 header cut short before its addresses)",
		Addr: func(r *Record) *[16]byte { return &r.SrcAddr },
		Wire: Wire{Proto: 8, Store: 14, OTLP: []string{"source.address"},
			IPFIX: []IE{{ID: 8, Name: "sourceIPv4Address"}, {ID: 27, Name: "sourceIPv6Address"}}},
	},
	{
		Name: "dst_addr", Type: TypeAddr, Key: true, Applies: isIP,
		Doc:  "destination address, as `src_addr`",
		Addr: func(r *Record) *[16]byte { return &r.DstAddr },
		Wire: Wire{Proto: 9, Store: 15, OTLP: []string{"destination.address"},
			IPFIX: []IE{{ID: 12, Name: "destinationIPv4Address"}, {ID: 28, Name: "destinationIPv6Address"}}},
	},
	{
		Name: "src_port", Type: TypeUint, Bits: 16, Key: true, Applies: hasPorts,
		Doc:     "source port of TCP, UDP, UDP-Lite and SCTP; the message type of ICMP (over IPv4) and ICMPv6 (over IPv6); 0 otherwise and for non-first fragments",
		Uint:    func(r *Record) uint64 { return uint64(r.SrcPort) },
		SetUint: func(r *Record, v uint64) { r.SrcPort = uint16(v) },
		Wire: Wire{Proto: 10, Store: 8, OTLP: []string{"source.port", "loupe.icmp.type"},
			IPFIX: []IE{{ID: 7, Name: "sourceTransportPort"},
				{ID: 32, Name: "icmpTypeCodeIPv4", Part: "type"}, {ID: 139, Name: "icmpTypeCodeIPv6", Part: "type"}}},
	},
	{
		Name: "dst_port", Type: TypeUint, Bits: 16, Key: true, Applies: hasPorts,
		Doc:     "destination port, as `src_port`; the message code of ICMP and ICMPv6",
		Uint:    func(r *Record) uint64 { return uint64(r.DstPort) },
		SetUint: func(r *Record, v uint64) { r.DstPort = uint16(v) },
		Wire: Wire{Proto: 11, Store: 9, OTLP: []string{"destination.port", "loupe.icmp.code"},
			IPFIX: []IE{{ID: 11, Name: "destinationTransportPort"},
				{ID: 32, Name: "icmpTypeCodeIPv4", Part: "code"}, {ID: 139, Name: "icmpTypeCodeIPv6", Part: "code"}}},
	},
	{
		Name: "packets", Type: TypeUint, Bits: 64, Unit: "packets", Counter: true,
		Doc:     "buffers that crossed the hook in this record: a GSO/GRO super-packet counts once",
		Uint:    func(r *Record) uint64 { return r.Packets },
		SetUint: func(r *Record, v uint64) { r.Packets = v },
		Wire: Wire{Proto: 12, Store: 3, OTLP: []string{"loupe.flow.packets"},
			IPFIX:  []IE{{ID: 2, Name: "packetDeltaCount"}},
			Metric: &Metric{Prom: "loupe_traffic_packets_total", OTLP: "loupe.network.packet.count", OTLPUnit: "{packet}", Help: "Packets seen at the TC hooks (buffers: a GSO/GRO super-packet counts once)"}},
	},
	{
		Name: "bytes", Type: TypeUint, Bits: 64, Unit: "bytes", Counter: true,
		Doc:     "length of those buffers, L2 header included (with a VLAN tag the kernel had stripped added back)",
		Uint:    func(r *Record) uint64 { return r.Bytes },
		SetUint: func(r *Record, v uint64) { r.Bytes = v },
		Wire: Wire{Proto: 13, Store: 4, OTLP: []string{"loupe.flow.bytes"},
			IPFIX:  []IE{{ID: 1, Name: "octetDeltaCount"}},
			Metric: &Metric{Prom: "loupe_traffic_bytes_total", OTLP: "loupe.network.io", OTLPUnit: "By", Help: "Bytes seen at the TC hooks (the L2 length of those buffers)"}},
	},
	{
		Name: "segments", Type: TypeUint, Bits: 64, Unit: "packets", Counter: true,
		Doc:     "wire packets those buffers stand for: a GSO/GRO super-packet counts as its segments (`gso_segs`), any other buffer as 1",
		Uint:    func(r *Record) uint64 { return r.Segments },
		SetUint: func(r *Record, v uint64) { r.Segments = v },
		Wire: Wire{Proto: 50, Store: 19, OTLP: []string{"loupe.flow.segments"},
			IPFIX:  []IE{{ID: 6, Name: "loupeSegmentDeltaCount", Enterprise: true}},
			Metric: &Metric{Prom: "loupe_traffic_segments_total", OTLP: "loupe.network.segment.count", OTLPUnit: "{segment}", Help: "Wire packets seen at the TC hooks (segments: a GSO/GRO super-packet counts as its segments)"}},
	},
	{
		Name: "wire_bytes", Type: TypeUint, Bits: 64, Unit: "bytes", Counter: true,
		Doc:     "`bytes` plus the headers of the other segments of each super-packet: the length of the segments on the wire",
		Uint:    func(r *Record) uint64 { return r.WireBytes },
		SetUint: func(r *Record, v uint64) { r.WireBytes = v },
		Wire: Wire{Proto: 51, Store: 20, OTLP: []string{"loupe.flow.wire_bytes"},
			IPFIX:  []IE{{ID: 7, Name: "loupeWireOctetDeltaCount", Enterprise: true}},
			Metric: &Metric{Prom: "loupe_traffic_wire_bytes_total", OTLP: "loupe.network.wire.io", OTLPUnit: "By", Help: "Wire bytes seen at the TC hooks (the L2 length of those segments on the wire)"}},
	},
	{
		Name: "tcp_flags", Type: TypeUint, Bits: 16, Applies: isTCP,
		Doc:     "union of the TCP flags of the packets (FIN 1, SYN 2, RST 4, PSH 8, ACK 16, URG 32, ECE 64, CWR 128, AE 256)",
		Uint:    func(r *Record) uint64 { return uint64(r.TCPFlags) },
		SetUint: func(r *Record, v uint64) { r.TCPFlags = uint16(v) },
		Wire: Wire{Proto: 16, Store: 10, OTLP: []string{"loupe.tcp.flags"},
			IPFIX: []IE{{ID: 6, Name: "tcpControlBits"}}},
	},
	{
		Name: "dscp", Type: TypeUint, Bits: 6, Applies: isIP,
		Doc:     "DSCP of the last packet",
		Uint:    func(r *Record) uint64 { return uint64(r.DSCP) },
		SetUint: func(r *Record, v uint64) { r.DSCP = uint8(v) },
		Wire: Wire{Proto: 17, Store: 13, OTLP: []string{"loupe.dscp"},
			IPFIX: []IE{{ID: 195, Name: "ipDiffServCodePoint"}}},
	},
	{
		Name: "aggregate_prefix", Type: TypeUint, Bits: 8, Key: true, Applies: isAggregate,
		Doc: "0 for a flow; for an aggregate (a rule's `aggregate /P`), P: the record counts every flow between " +
			"the /P prefixes `src_addr` and `dst_addr` (IPv4: /min(P, 32)) by protocol, direction, interface and VLAN, " +
			"without ports or MACs",
		Uint:    func(r *Record) uint64 { return uint64(r.AggPrefix) },
		SetUint: func(r *Record, v uint64) { r.AggPrefix = uint8(v) },
		Wire: Wire{Proto: 53, Store: 22, OTLP: []string{"loupe.aggregate.prefix_length"},
			IPFIX: []IE{{ID: 8, Name: "loupeAggregatePrefix", Enterprise: true}}},
	},
	{
		Name: "sampling", Type: TypeUint, Bits: 32,
		Doc:     "sampling rate the counters were taken at (1: every packet; counters are not scaled)",
		Uint:    func(r *Record) uint64 { return uint64(r.Sampling) },
		SetUint: func(r *Record, v uint64) { r.Sampling = uint32(v) },
		Wire: Wire{Proto: 18, Store: 6, OTLP: []string{"loupe.sampling_rate"},
			IPFIX: []IE{{ID: 1, Name: "loupeSamplingRate", Enterprise: true}}},
	},
	{
		Name: "accuracy", Type: TypeAccuracy, Bits: 8,
		Doc: "`\"exact\"`: counted packet by packet; `\"decoded\"`: exact counts decoded from the sketch's flow set; " +
			"`\"estimated\"`: counts estimated by the count-min sketch, never below the truth and above it by at most " +
			"`max_error_packets` and `max_error_bytes` with probability at least `error_confidence`",
		Uint:    func(r *Record) uint64 { return uint64(r.Accuracy) },
		SetUint: func(r *Record, v uint64) { r.Accuracy = Accuracy(v) },
		Wire: Wire{Proto: 54, Store: 23, OTLP: []string{"loupe.accuracy"},
			IPFIX: []IE{{ID: 9, Name: "loupeAccuracy", Enterprise: true}}},
	},
	{
		Name: "max_error_packets", Type: TypeUint, Bits: 64, Unit: "packets", Applies: isEstimate, Optional: true,
		Doc:     "estimates only: `packets` exceeds the true count by at most this many (one-sided: an estimate is never below the truth)",
		Uint:    func(r *Record) uint64 { return r.MaxErrorPackets },
		SetUint: func(r *Record, v uint64) { r.MaxErrorPackets = v },
		Wire: Wire{Proto: 55, Store: 24, OTLP: []string{"loupe.max_error.packets"},
			IPFIX: []IE{{ID: 10, Name: "loupeMaxErrorPacketDeltaCount", Enterprise: true}}},
	},
	{
		Name: "max_error_bytes", Type: TypeUint, Bits: 64, Unit: "bytes", Applies: isEstimate, Optional: true,
		Doc:     "estimates only: `bytes` exceeds the true count by at most this many, as `max_error_packets`",
		Uint:    func(r *Record) uint64 { return r.MaxErrorBytes },
		SetUint: func(r *Record, v uint64) { r.MaxErrorBytes = v },
		Wire: Wire{Proto: 56, Store: 25, OTLP: []string{"loupe.max_error.bytes"},
			IPFIX: []IE{{ID: 11, Name: "loupeMaxErrorOctetDeltaCount", Enterprise: true}}},
	},
	{
		Name: "error_confidence", Type: TypeFloat, Applies: isEstimate, Optional: true,
		Doc:   "estimates only: the probability (0 to 1) that both bounds hold, e.g. 0.982 (1 - e^-4) for a count-min sketch of 4 rows",
		Float: func(r *Record) *float64 { return &r.ErrorConfidence },
		Wire: Wire{Proto: 57, Store: 26, OTLP: []string{"loupe.max_error.confidence"},
			IPFIX: []IE{{ID: 12, Name: "loupeErrorConfidence", Enterprise: true}}},
	},
	{
		Name: "rtt_min_ns", Type: TypeUint, Bits: 64, Unit: "nanoseconds", Presence: HasRTTMin, Applies: has(HasRTTMin), Optional: true,
		Doc: "kernel signals: the smallest smoothed RTT of the flow's TCP socket in the interval (the kernel's `srtt`, " +
			"microsecond precision, as `ss -ti` shows it), on one record per 5-tuple: the socket's egress record, " +
			"else a record with an empty interface",
		Uint:    func(r *Record) uint64 { return r.RTTMinNs },
		SetUint: func(r *Record, v uint64) { r.RTTMinNs = v; r.Has |= HasRTTMin },
		Wire: Wire{Proto: 30, Store: 28, OTLP: []string{"loupe.tcp.rtt.min"},
			IPFIX: []IE{{ID: 13, Name: "loupeRttMinNanoseconds", Enterprise: true}}},
	},
	{
		Name: "rtt_max_ns", Type: TypeUint, Bits: 64, Unit: "nanoseconds", Presence: HasRTTMax, Applies: has(HasRTTMax), Optional: true,
		Doc:     "kernel signals: the largest smoothed RTT of the socket in the interval, as `rtt_min_ns`",
		Uint:    func(r *Record) uint64 { return r.RTTMaxNs },
		SetUint: func(r *Record, v uint64) { r.RTTMaxNs = v; r.Has |= HasRTTMax },
		Wire: Wire{Proto: 31, Store: 29, OTLP: []string{"loupe.tcp.rtt.max"},
			IPFIX: []IE{{ID: 14, Name: "loupeRttMaxNanoseconds", Enterprise: true}}},
	},
	{
		Name: "rtt_last_ns", Type: TypeUint, Bits: 64, Unit: "nanoseconds", Presence: HasRTTLast, Applies: has(HasRTTLast), Optional: true,
		Doc:     "kernel signals: the socket's last smoothed RTT in the interval, as `rtt_min_ns`",
		Uint:    func(r *Record) uint64 { return r.RTTLastNs },
		SetUint: func(r *Record, v uint64) { r.RTTLastNs = v; r.Has |= HasRTTLast },
		Wire: Wire{Proto: 32, Store: 30, OTLP: []string{"loupe.tcp.rtt.last"},
			IPFIX: []IE{{ID: 15, Name: "loupeRttLastNanoseconds", Enterprise: true}}},
	},
	{
		Name: "handshake_rtt_ns", Type: TypeUint, Bits: 64, Unit: "nanoseconds", Presence: HasHandshakeRTT, Applies: has(HasHandshakeRTT), Optional: true,
		Doc:     "TCP handshake RTT seen at the hook (SYN to SYN-ACK and SYN-ACK to ACK), for connections that only pass through the host",
		Uint:    func(r *Record) uint64 { return r.HandshakeRTTNs },
		SetUint: func(r *Record, v uint64) { r.HandshakeRTTNs = v; r.Has |= HasHandshakeRTT },
		Wire: Wire{Proto: 33, Store: 31, OTLP: []string{"loupe.tcp.handshake_rtt"},
			IPFIX: []IE{{ID: 16, Name: "loupeHandshakeRttNanoseconds", Enterprise: true}}},
	},
	{
		Name: "retransmits", Type: TypeUint, Bits: 64, Unit: "segments", Presence: HasRetransmits, Applies: has(HasRetransmits), Optional: true,
		Doc: "kernel signals: TCP segments the flow's socket retransmitted in the interval (`ss -ti`'s retrans, `TcpRetransSegs`), " +
			"on the record that carries the socket's RTT; 0 when the socket retransmitted nothing",
		Uint:    func(r *Record) uint64 { return r.Retransmits },
		SetUint: func(r *Record, v uint64) { r.Retransmits = v; r.Has |= HasRetransmits },
		Wire: Wire{Proto: 22, Store: 32, OTLP: []string{"loupe.tcp.retransmits"},
			IPFIX: []IE{{ID: 17, Name: "loupeRetransmittedSegmentDeltaCount", Enterprise: true}}},
	},
	{
		Name: "drop_packets", Type: TypeUint, Bits: 64, Unit: "packets", Presence: HasDropPackets, Applies: has(HasDropPackets), Optional: true,
		Doc: "kernel signals: packets of the 5-tuple the kernel dropped in the interval (every reason but the unspecified one), " +
			"on one record per 5-tuple: an ingress record of it, else an egress one, else a record with an empty interface",
		Uint:    func(r *Record) uint64 { return r.DropPackets },
		SetUint: func(r *Record, v uint64) { r.DropPackets = v; r.Has |= HasDropPackets },
		Wire: Wire{Proto: 19, Store: 33, OTLP: []string{"loupe.drop.packets"},
			IPFIX: []IE{{ID: 133, Name: "droppedPacketDeltaCount"}}},
	},
	{
		Name: "drop_bytes", Type: TypeUint, Bits: 64, Unit: "bytes", Presence: HasDropBytes, Applies: has(HasDropBytes), Optional: true,
		Doc:     "kernel signals: the IP length of those packets (no link-layer header), as `drop_packets`",
		Uint:    func(r *Record) uint64 { return r.DropBytes },
		SetUint: func(r *Record, v uint64) { r.DropBytes = v; r.Has |= HasDropBytes },
		Wire: Wire{Proto: 20, Store: 34, OTLP: []string{"loupe.drop.bytes"},
			IPFIX: []IE{{ID: 132, Name: "droppedOctetDeltaCount"}}},
	},
	{
		Name: "drop_reasons", Type: TypeCounts, Presence: HasDropReasons, Applies: has(HasDropReasons), Optional: true,
		Doc: "kernel signals: `drop_packets` by the kernel's drop reason, an object of reason name to packets " +
			"(`{\"NETFILTER_DROP\":3}`): the running kernel's `enum skb_drop_reason` names without their prefix",
		Counts: func(r *Record) *DropReasons { return &r.DropReasons },
		Wire: Wire{Proto: 21, Store: 35, OTLP: []string{"loupe.drop.reasons"},
			IPFIX: []IE{{ID: 18, Name: "loupeDropReasons", Enterprise: true}}},
	},
	{
		Name: "dns_id", Type: TypeUint, Bits: 16, Presence: HasDNSID, Applies: has(HasDNSID), Optional: true,
		Doc:     "DNS: the ID of a query of the flow, matched with its response by ID and 5-tuple",
		Uint:    func(r *Record) uint64 { return uint64(r.DNSID) },
		SetUint: func(r *Record, v uint64) { r.DNSID = uint16(v); r.Has |= HasDNSID },
		Wire: Wire{Proto: 40, Store: 36, OTLP: []string{"loupe.dns.id"},
			IPFIX: []IE{{ID: 19, Name: "loupeDnsId", Enterprise: true}}},
	},
	{
		Name: "dns_qname", Type: TypeString, Presence: HasDNSQName, Applies: has(HasDNSQName), Optional: true,
		Doc: "DNS: the query's name (bounded length)",
		Str: func(r *Record) *string { return &r.DNSQName },
		Wire: Wire{Proto: 41, Store: 37, OTLP: []string{"dns.question.name"},
			IPFIX: []IE{{ID: 20, Name: "loupeDnsQueryName", Enterprise: true}}},
	},
	{
		Name: "dns_rcode", Type: TypeEnum, Bits: 12, Enum: rcodes, Presence: HasDNSRcode, Applies: has(HasDNSRcode), Optional: true,
		Doc:     "DNS: the response's code by name (`\"NOERROR\"`, `\"NXDOMAIN\"`, `\"SERVFAIL\"`, ...; `\"RCODE<n>\"` for a code IANA has not named); absent without a response",
		Uint:    func(r *Record) uint64 { return uint64(r.DNSRcode) },
		SetUint: func(r *Record, v uint64) { r.DNSRcode = uint16(v); r.Has |= HasDNSRcode },
		Wire: Wire{Proto: 42, Store: 38, OTLP: []string{"loupe.dns.rcode"},
			IPFIX: []IE{{ID: 21, Name: "loupeDnsResponseCode", Enterprise: true}}},
	},
	{
		Name: "dns_latency_ns", Type: TypeUint, Bits: 64, Unit: "nanoseconds", Presence: HasDNSLatency, Applies: has(HasDNSLatency), Optional: true,
		Doc:     "DNS: from the query to its response, at the hook; absent without a response",
		Uint:    func(r *Record) uint64 { return r.DNSLatencyNs },
		SetUint: func(r *Record, v uint64) { r.DNSLatencyNs = v; r.Has |= HasDNSLatency },
		Wire: Wire{Proto: 43, Store: 39, OTLP: []string{"loupe.dns.latency"},
			IPFIX: []IE{{ID: 22, Name: "loupeDnsLatencyNanoseconds", Enterprise: true}}},
	},
	{
		Name: "tunnel_type", Type: TypeEnum, Bits: 8, Enum: tunnelTypes, Presence: HasTunnelType, Applies: has(HasTunnelType), Optional: true,
		Doc: "the tunnel the flow's packets were taken out of at the hook: `\"vxlan\"`, `\"geneve\"`, `\"gre\"` or `\"ipip\"` " +
			"(the key is the inner packet's); absent for packets that came through no tunnel",
		Uint:    func(r *Record) uint64 { return uint64(r.TunnelType) },
		SetUint: func(r *Record, v uint64) { r.TunnelType = tunnel.Type(v); r.Has |= HasTunnelType },
		Wire: Wire{Proto: 58, Store: 40, OTLP: []string{"loupe.tunnel.type"},
			IPFIX: []IE{{ID: 23, Name: "loupeTunnelType", Enterprise: true}}},
	},
	{
		Name: "tunnel_id", Type: TypeUint, Bits: 32, Presence: HasTunnelID, Applies: has(HasTunnelID), Optional: true,
		Doc:     "the tunnel's ID: the VNI of VXLAN and Geneve, GRE's key; absent for GRE without a key and for IP in IP",
		Uint:    func(r *Record) uint64 { return uint64(r.TunnelID) },
		SetUint: func(r *Record, v uint64) { r.TunnelID = uint32(v); r.Has |= HasTunnelID },
		Wire: Wire{Proto: 59, Store: 41, OTLP: []string{"loupe.tunnel.id"},
			IPFIX: []IE{{ID: 351, Name: "layer2SegmentId"}, {ID: 296, Name: "greKey"}, {ID: 24, Name: "loupeTunnelId", Enterprise: true}}},
	},
	{
		Name: "outer_src_addr", Type: TypeIP, Presence: HasOuterSrcAddr, Applies: has(HasOuterSrcAddr), Optional: true,
		Doc: "the tunnel's outer source address (its own family, whatever the inner packet's)",
		IP:  func(r *Record) *netip.Addr { return &r.OuterSrcAddr },
		Wire: Wire{Proto: 60, Store: 42, OTLP: []string{"loupe.tunnel.source.address"},
			IPFIX: []IE{{ID: 25, Name: "loupeOuterSourceIPv4Address", Enterprise: true}, {ID: 27, Name: "loupeOuterSourceIPv6Address", Enterprise: true}}},
	},
	{
		Name: "outer_dst_addr", Type: TypeIP, Presence: HasOuterDstAddr, Applies: has(HasOuterDstAddr), Optional: true,
		Doc: "the tunnel's outer destination address, as `outer_src_addr`",
		IP:  func(r *Record) *netip.Addr { return &r.OuterDstAddr },
		Wire: Wire{Proto: 61, Store: 43, OTLP: []string{"loupe.tunnel.destination.address"},
			IPFIX: []IE{{ID: 26, Name: "loupeOuterDestinationIPv4Address", Enterprise: true}, {ID: 28, Name: "loupeOuterDestinationIPv6Address", Enterprise: true}}},
	},
	{
		Name: "outer_src_port", Type: TypeUint, Bits: 16, Presence: HasOuterSrcPort, Applies: has(HasOuterSrcPort), Optional: true,
		Doc:     "the tunnel's outer UDP source port (VXLAN, Geneve)",
		Uint:    func(r *Record) uint64 { return uint64(r.OuterSrcPort) },
		SetUint: func(r *Record, v uint64) { r.OuterSrcPort = uint16(v); r.Has |= HasOuterSrcPort },
		Wire: Wire{Proto: 62, Store: 44, OTLP: []string{"loupe.tunnel.source.port"},
			IPFIX: []IE{{ID: 29, Name: "loupeOuterSourcePort", Enterprise: true}}},
	},
	{
		Name: "outer_dst_port", Type: TypeUint, Bits: 16, Presence: HasOuterDstPort, Applies: has(HasOuterDstPort), Optional: true,
		Doc:     "the tunnel's outer UDP destination port: 4789 or 8472 for VXLAN, 6081 for Geneve",
		Uint:    func(r *Record) uint64 { return uint64(r.OuterDstPort) },
		SetUint: func(r *Record, v uint64) { r.OuterDstPort = uint16(v); r.Has |= HasOuterDstPort },
		Wire: Wire{Proto: 63, Store: 45, OTLP: []string{"loupe.tunnel.destination.port"},
			IPFIX: []IE{{ID: 30, Name: "loupeOuterDestinationPort", Enterprise: true}}},
	},
	{
		Name: "first_seen", Type: TypeTime,
		Doc:  "first packet of the flow in this record: RFC 3339 with nanoseconds, UTC",
		Time: func(r *Record) *time.Time { return &r.FirstSeen },
		Wire: Wire{Proto: 14, Store: 1, OTLP: []string{"loupe.flow.start"},
			IPFIX: []IE{{ID: 152, Name: "flowStartMilliseconds"}}},
	},
	{
		Name: "last_seen", Type: TypeTime,
		Doc:  "last packet of the flow in this record, as `first_seen`",
		Time: func(r *Record) *time.Time { return &r.LastSeen },
		Wire: Wire{Proto: 15, Store: 2, OTLP: []string{OTLPTimestamp},
			IPFIX: []IE{{ID: 153, Name: "flowEndMilliseconds"}}},
	},
}, k8sFields()...)
