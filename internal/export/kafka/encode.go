package kafka

import (
	"encoding/binary"
	"math"
	"net/netip"
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
	fieldDropPkts  protowire.Number = 19
	fieldDropBytes protowire.Number = 20
	fieldDropWhy   protowire.Number = 21
	fieldRetrans   protowire.Number = 22
	fieldRTTMin    protowire.Number = 30
	fieldRTTMax    protowire.Number = 31
	fieldRTTLast   protowire.Number = 32
	fieldHandshake protowire.Number = 33
	fieldDNSID     protowire.Number = 40
	fieldDNSQName  protowire.Number = 41
	fieldDNSRcode  protowire.Number = 42
	fieldDNSLat    protowire.Number = 43
	fieldSegments  protowire.Number = 50
	fieldWireBytes protowire.Number = 51
	fieldVlanID    protowire.Number = 52
	fieldAggPrefix protowire.Number = 53
	fieldAccuracy  protowire.Number = 54
	fieldMaxErrPkt protowire.Number = 55
	fieldMaxErrByt protowire.Number = 56
	fieldErrConf   protowire.Number = 57
	fieldTunType   protowire.Number = 58
	fieldTunID     protowire.Number = 59
	fieldOuterSrc  protowire.Number = 60
	fieldOuterDst  protowire.Number = 61
	fieldOuterSP   protowire.Number = 62
	fieldOuterDP   protowire.Number = 63
	fieldSrcKind   protowire.Number = 64 // then the source's names, 65-70
	fieldDstKind   protowire.Number = 71 // then the destination's, 72-77
	fieldIfacePod  protowire.Number = 78
	fieldIfaceNS   protowire.Number = 79
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
	if r.Has != 0 {
		b = appendSignals(b, r)
	}
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
	if r.Has.Any(flow.HasTunnel | flow.HasTunnelID) {
		b = appendTunnel(b, r)
	}
	if r.K8s != nil {
		b = appendK8s(b, r.K8s)
	}
	return b
}

// appendK8s writes the Kubernetes names (64-79): each end's kind as
// loupe.flow.v1.K8sKind (flow's numbers) and its names, then the
// interface's pod; an unknown name is "", left out.
func appendK8s(b []byte, k *flow.K8s) []byte {
	for _, e := range [...]struct {
		n   protowire.Number
		end *flow.K8sEnd
	}{{fieldSrcKind, &k.Src}, {fieldDstKind, &k.Dst}} {
		b = appendUvarint(b, e.n, uint64(e.end.Kind))
		for i, s := range [...]string{e.end.Namespace, e.end.Pod, e.end.Workload, e.end.WorkloadKind, e.end.Service, e.end.Node} {
			b = appendString(b, e.n+1+protowire.Number(i), s)
		}
	}
	b = appendString(b, fieldIfacePod, k.IfacePod)
	return appendString(b, fieldIfaceNS, k.IfaceNamespace)
}

// appendSignals writes the kernel signals' and DNS fields (19-43), each
// where r has it: they are proto3 optional fields, written even when 0.
func appendSignals(b []byte, r *flow.Record) []byte {
	h := r.Has
	b = appendOptUvarint(b, fieldDropPkts, r.DropPackets, h.Any(flow.HasDropPackets))
	b = appendOptUvarint(b, fieldDropBytes, r.DropBytes, h.Any(flow.HasDropBytes))
	if len(r.DropReasons) > 0 {
		// Map entries in key order, as proto.Marshal writes them
		// deterministically: { 1: name, 2: packets }, both always.
		var buf [16]string
		for _, name := range r.DropReasons.AppendNames(buf[:0]) {
			v := r.DropReasons[name]
			size := 1 + protowire.SizeBytes(len(name)) + 1 + protowire.SizeVarint(v)
			b = appendVarint(appendTag(b, fieldDropWhy, protowire.BytesType), uint64(size))
			b = appendVarint(appendTag(b, 1, protowire.BytesType), uint64(len(name)))
			b = append(b, name...)
			b = appendVarint(appendTag(b, 2, protowire.VarintType), v)
		}
	}
	b = appendOptUvarint(b, fieldRetrans, r.Retransmits, h.Any(flow.HasRetransmits))
	b = appendOptUvarint(b, fieldRTTMin, r.RTTMinNs, h.Any(flow.HasRTTMin))
	b = appendOptUvarint(b, fieldRTTMax, r.RTTMaxNs, h.Any(flow.HasRTTMax))
	b = appendOptUvarint(b, fieldRTTLast, r.RTTLastNs, h.Any(flow.HasRTTLast))
	b = appendOptUvarint(b, fieldHandshake, r.HandshakeRTTNs, h.Any(flow.HasHandshakeRTT))
	b = appendOptUvarint(b, fieldDNSID, uint64(r.DNSID), h.Any(flow.HasDNSID))
	if h.Any(flow.HasDNSQName) {
		b = appendVarint(appendTag(b, fieldDNSQName, protowire.BytesType), uint64(len(r.DNSQName)))
		b = append(b, r.DNSQName...)
	}
	b = appendOptUvarint(b, fieldDNSRcode, uint64(r.DNSRcode), h.Any(flow.HasDNSRcode))
	return appendOptUvarint(b, fieldDNSLat, r.DNSLatencyNs, h.Any(flow.HasDNSLatency))
}

// appendTunnel writes the tunnel's fields (58-63): its type as
// loupe.flow.v1.TunnelType (flow's numbers), the outer addresses as their
// own family's 4 or 16 bytes.
func appendTunnel(b []byte, r *flow.Record) []byte {
	h := r.Has
	if h.Any(flow.HasTunnelType) {
		b = appendUvarint(b, fieldTunType, uint64(r.TunnelType))
	}
	b = appendOptUvarint(b, fieldTunID, uint64(r.TunnelID), h.Any(flow.HasTunnelID))
	for _, a := range []struct {
		n    protowire.Number
		addr netip.Addr
		has  flow.Presence
	}{{fieldOuterSrc, r.OuterSrcAddr, flow.HasOuterSrcAddr}, {fieldOuterDst, r.OuterDstAddr, flow.HasOuterDstAddr}} {
		if !h.Any(a.has) || !a.addr.IsValid() {
			continue
		}
		if a.addr.Is4() {
			v := a.addr.As4()
			b = appendBytes(b, a.n, v[:])
		} else {
			v := a.addr.As16()
			b = appendBytes(b, a.n, v[:])
		}
	}
	b = appendOptUvarint(b, fieldOuterSP, uint64(r.OuterSrcPort), h.Any(flow.HasOuterSrcPort))
	return appendOptUvarint(b, fieldOuterDP, uint64(r.OuterDstPort), h.Any(flow.HasOuterDstPort))
}

// appendOptUvarint writes a proto3 optional varint: when present, 0
// included.
func appendOptUvarint(b []byte, n protowire.Number, v uint64, present bool) []byte {
	if !present {
		return b
	}
	return appendVarint(appendTag(b, n, protowire.VarintType), v)
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
