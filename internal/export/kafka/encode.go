package kafka

import (
	"encoding/binary"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"loupe/internal/flow"
)

// Field numbers of loupe.flow.v1.FlowRecord (proto/loupe/flow/v1/flow.proto),
// as flow's registry of wire identifiers assigns them (Wire.Proto).
// TestProtoNumbersAreTheRegistrys checks them against the registry and the
// generated descriptor, TestProtoEncodingMatchesGenerated the whole
// encoding against proto.Marshal of the generated type.
const (
	fieldIface     protowire.Number = 1
	fieldIfIndex   protowire.Number = 2
	fieldDirection protowire.Number = 3
	fieldEthType   protowire.Number = 4
	fieldSrcMAC    protowire.Number = 5
	fieldDstMAC    protowire.Number = 6
	fieldProto     protowire.Number = 7
	fieldSrcAddr   protowire.Number = 8
	fieldDstAddr   protowire.Number = 9
	fieldSrcPort   protowire.Number = 10
	fieldDstPort   protowire.Number = 11
	fieldPackets   protowire.Number = 12
	fieldBytes     protowire.Number = 13
	fieldFirstSeen protowire.Number = 14
	fieldLastSeen  protowire.Number = 15
	fieldTCPFlags  protowire.Number = 16
	fieldDSCP      protowire.Number = 17
	fieldSampling  protowire.Number = 18
	fieldSegments  protowire.Number = 50
	fieldWireBytes protowire.Number = 51
	fieldVlanID    protowire.Number = 52
	fieldAggPrefix protowire.Number = 53
	fieldAccuracy  protowire.Number = 54
	fieldMaxErrPkt protowire.Number = 55
	fieldMaxErrByt protowire.Number = 56
	fieldErrConf   protowire.Number = 57
	keyLenIPv4                      = 24 + 2*4          // untagged IPv4 flow
	keyLenMax                       = 24 + 2*16 + 2 + 1 // an aggregate, 16-byte addresses
)

// AppendProto appends r encoded as a loupe.flow.v1.FlowRecord.
//
// It is written by hand with protowire rather than with proto.Marshal of
// the generated type: it appends into the caller's buffer with no
// allocation and no reflection, several times faster (the package's
// benchmarks measure both). Fields are written in field-number order and
// zero values are left out, as proto3 requires, so the bytes are exactly
// what proto.Marshal produces.
func AppendProto(b []byte, r *flow.Record) []byte {
	b = appendString(b, fieldIface, r.Iface)
	b = appendUvarint(b, fieldIfIndex, uint64(r.IfIndex))
	// loupe.flow.v1.Direction keeps 0 for "unspecified": ingress is 1.
	b = appendUvarint(b, fieldDirection, uint64(r.Direction)+1)
	b = appendUvarint(b, fieldEthType, uint64(r.EtherType))
	b = appendBytes(b, fieldSrcMAC, r.SrcMAC[:])
	b = appendBytes(b, fieldDstMAC, r.DstMAC[:])
	b = appendUvarint(b, fieldProto, uint64(r.Proto))
	b = appendAddr(b, fieldSrcAddr, r.EtherType, &r.SrcAddr)
	b = appendAddr(b, fieldDstAddr, r.EtherType, &r.DstAddr)
	b = appendUvarint(b, fieldSrcPort, uint64(r.SrcPort))
	b = appendUvarint(b, fieldDstPort, uint64(r.DstPort))
	b = appendUvarint(b, fieldPackets, r.Packets)
	b = appendUvarint(b, fieldBytes, r.Bytes)
	b = appendFixed64(b, fieldFirstSeen, unixNano(r.FirstSeen))
	b = appendFixed64(b, fieldLastSeen, unixNano(r.LastSeen))
	b = appendUvarint(b, fieldTCPFlags, uint64(r.TCPFlags))
	b = appendUvarint(b, fieldDSCP, uint64(r.DSCP))
	b = appendUvarint(b, fieldSampling, uint64(r.Sampling))
	b = appendUvarint(b, fieldSegments, r.Segments)
	b = appendUvarint(b, fieldWireBytes, r.WireBytes)
	b = appendUvarint(b, fieldVlanID, uint64(r.VlanID))
	b = appendUvarint(b, fieldAggPrefix, uint64(r.AggPrefix))
	// loupe.flow.v1.Accuracy numbers the accuracies as flow does: exact,
	// the zero value, is left out.
	b = appendUvarint(b, fieldAccuracy, uint64(r.Accuracy))
	b = appendUvarint(b, fieldMaxErrPkt, r.MaxErrorPackets)
	b = appendUvarint(b, fieldMaxErrByt, r.MaxErrorBytes)
	// A double is left out when it is +0.0, as proto.Marshal does (-0.0
	// is written: its bits are not zero).
	b = appendFixed64(b, fieldErrConf, math.Float64bits(r.ErrorConfidence))
	return b
}

// appendTag is protowire.AppendTag for field numbers below 2048 (a tag of
// at most two bytes), small enough to be inlined.
func appendTag(b []byte, n protowire.Number, t protowire.Type) []byte {
	v := uint64(n)<<3 | uint64(t)
	if v < 0x80 {
		return append(b, byte(v))
	}
	return append(b, byte(v)|0x80, byte(v>>7))
}

// appendVarint writes one-byte values inline and leaves the rest to
// protowire.
func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

func appendUvarint(b []byte, n protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendTag(b, n, protowire.VarintType), v)
}

func appendFixed64(b []byte, n protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint64(appendTag(b, n, protowire.Fixed64Type), v)
}

func appendBytes(b []byte, n protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = appendVarint(appendTag(b, n, protowire.BytesType), uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, n protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = appendVarint(appendTag(b, n, protowire.BytesType), uint64(len(v)))
	return append(b, v...)
}

// appendAddr writes an address as the JSON form does: 4 bytes for IPv4,
// 16 for IPv6, nothing for non-IP flows (flow.Key.SrcIP's rules).
func appendAddr(b []byte, n protowire.Number, etherType uint16, a *[16]byte) []byte {
	switch etherType {
	case flow.EtherTypeIPv4:
		if !isMapped(a) {
			return b // header cut short before the addresses
		}
		return appendBytes(b, n, a[12:])
	case flow.EtherTypeIPv6:
		return appendBytes(b, n, a[:])
	}
	return b
}

// isMapped reports whether a is IPv4-mapped (::ffff:a.b.c.d).
func isMapped(a *[16]byte) bool {
	return binary.BigEndian.Uint64(a[:8]) == 0 && binary.BigEndian.Uint32(a[8:12]) == 0xffff
}

// unixNano is t in nanoseconds since the epoch, 0 for the zero time.
func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

// AppendKey appends the Kafka record key of k: every field of the flow key,
// big-endian, in a fixed layout, so that the key is stable across agent
// versions and hosts and the partitioner sends one flow to one partition:
//
//	ifindex u32 | direction u8 | eth_type u16 | proto u8 | src_port u16 |
//	dst_port u16 | src_mac [6] | dst_mac [6] | src_addr | dst_addr [| vlan_id u16 [| aggregate_prefix u8]]
//
// Addresses are 4 bytes each when the EtherType is IPv4 and both are
// IPv4-mapped (a 32-byte key), 16 bytes each otherwise (56 bytes). The
// VLAN ID follows only when it is not 0 (34 or 58 bytes): the keys of
// untagged flows are those of the versions before it, so their records
// stay in the partitions they were in. An aggregate's key ends with the
// VLAN ID, 0 or not, and its prefix length (35 or 59 bytes): no key of a
// flow has those lengths.
func AppendKey(b []byte, k *flow.Key) []byte {
	b = binary.BigEndian.AppendUint32(b, k.IfIndex)
	b = append(b, byte(k.Direction))
	b = binary.BigEndian.AppendUint16(b, k.EtherType)
	b = append(b, k.Proto)
	b = binary.BigEndian.AppendUint16(b, k.SrcPort)
	b = binary.BigEndian.AppendUint16(b, k.DstPort)
	b = append(b, k.SrcMAC[:]...)
	b = append(b, k.DstMAC[:]...)
	if k.EtherType == flow.EtherTypeIPv4 && isMapped(&k.SrcAddr) && isMapped(&k.DstAddr) {
		b = append(b, k.SrcAddr[12:]...)
		b = append(b, k.DstAddr[12:]...)
	} else {
		b = append(b, k.SrcAddr[:]...)
		b = append(b, k.DstAddr[:]...)
	}
	if k.VlanID != 0 || k.AggPrefix != 0 {
		b = binary.BigEndian.AppendUint16(b, k.VlanID)
	}
	if k.AggPrefix != 0 {
		b = append(b, k.AggPrefix)
	}
	return b
}
