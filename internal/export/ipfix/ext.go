package ipfix

import (
	"encoding/binary"
	"net/netip"
	"slices"

	"loupe/internal/flow"
	"loupe/internal/tunnel"
)

// The fields present only where measured (the kernel signals, DNS, the
// tunnel) travel in templates of their own, as an estimate's bounds do: a
// record that has some of them is sent in the template of its shape (and
// accuracy) followed by one element for each field it has, so that a field
// that was not measured is absent rather than a zero a collector would
// take for a measured one, and the records without them, nearly all, carry
// nothing more. The encoder makes such a template the first time a record
// needs it (IDs 262 and up, in the order they come) and the client sends
// it before that record (client.go); the templates made so far go with
// every refresh and every new connection.
//
// IANA elements where the registry has them: droppedPacketDeltaCount
// (133) and droppedOctetDeltaCount (132) for the drops, layer2SegmentId
// (351, RFC 7133: 0x01 in its high byte for VXLAN, the VNI in the low three)
// for a VXLAN VNI, greKey (296) for GRE's key. The RTTs, retransmissions,
// drop reasons, DNS, tunnel type, a Geneve VNI and the outer addresses and
// ports have none (tunnelTechnology, 289, is RFC 6759's yes/no flag of an
// application's use of a tunnel, not its type): they are Loupe's
// enterprise elements 13 to 30.

// IANA elements of the extension templates.
var (
	ieDroppedOctetDeltaCount  = Element{ID: 132, Name: "droppedOctetDeltaCount", Type: "unsigned64", Length: 8, Status: flow.Sent, Description: "IP length of the flow's packets the kernel dropped in the interval (drop_bytes)"}
	ieDroppedPacketDeltaCount = Element{ID: 133, Name: "droppedPacketDeltaCount", Type: "unsigned64", Length: 8, Status: flow.Sent, Description: "packets of the flow the kernel dropped in the interval (drop_packets)"}
	ieGreKey                  = Element{ID: 296, Name: "greKey", Type: "unsigned32", Length: 4, Status: flow.Sent, Description: "the GRE key of a flow taken out of GRE (tunnel_id)"}
	ieLayer2SegmentID         = Element{ID: 351, Name: "layer2SegmentId", Type: "unsigned64", Length: 8, Status: flow.Sent, Description: "a flow taken out of VXLAN: 0x01 (VXLAN) in the high byte, the VNI in the low three (RFC 7133; tunnel_id)"}
)

// vxlanSegment is layer2SegmentId's encapsulation type for VXLAN, in its
// most significant byte (RFC 7133 §4.10).
const vxlanSegment = 0x01 << 56

// part is one element an extension template appends, for a record that has
// its field.
type part struct {
	elem Element
	has  func(r *flow.Record) bool
	// put writes a fixed-length element's elem.Length bytes; str appends
	// a variable-length one's value.
	put func(p []byte, r *flow.Record)
	str func(b []byte, r *flow.Record) []byte
}

// extParts are the parts, in template order: every fixed-length one, then
// the variable-length ones (RFC 7011 §7: each value with its length). A
// template's parts are a mask of their indices.
var extParts = func() []part {
	be := binary.BigEndian
	has := func(bit flow.Presence) func(*flow.Record) bool {
		return func(r *flow.Record) bool { return r.Has&bit != 0 }
	}
	u64 := func(get func(*flow.Record) uint64) func([]byte, *flow.Record) {
		return func(p []byte, r *flow.Record) { be.PutUint64(p, get(r)) }
	}
	u16 := func(get func(*flow.Record) uint16) func([]byte, *flow.Record) {
		return func(p []byte, r *flow.Record) { be.PutUint16(p, get(r)) }
	}
	tunnelID := func(typ func(tunnel.Type) bool) func(*flow.Record) bool {
		return func(r *flow.Record) bool { return r.Has&flow.HasTunnelID != 0 && typ(r.TunnelType) }
	}
	// An outer address goes in the element of its family (an IPv4-mapped
	// IPv6 address in the IPv6 one: it is what the header held).
	outerAddr := func(e Element, bit flow.Presence, v4 bool, get func(*flow.Record) netip.Addr) part {
		return part{elem: e,
			has: func(r *flow.Record) bool { a := get(r); return r.Has&bit != 0 && a.IsValid() && a.Is4() == v4 },
			put: func(p []byte, r *flow.Record) { copy(p, get(r).AsSlice()) }}
	}
	parts := []part{
		{elem: enterprise(13), has: has(flow.HasRTTMin), put: u64(func(r *flow.Record) uint64 { return r.RTTMinNs })},
		{elem: enterprise(14), has: has(flow.HasRTTMax), put: u64(func(r *flow.Record) uint64 { return r.RTTMaxNs })},
		{elem: enterprise(15), has: has(flow.HasRTTLast), put: u64(func(r *flow.Record) uint64 { return r.RTTLastNs })},
		{elem: enterprise(16), has: has(flow.HasHandshakeRTT), put: u64(func(r *flow.Record) uint64 { return r.HandshakeRTTNs })},
		{elem: enterprise(17), has: has(flow.HasRetransmits), put: u64(func(r *flow.Record) uint64 { return r.Retransmits })},
		{elem: ieDroppedPacketDeltaCount, has: has(flow.HasDropPackets), put: u64(func(r *flow.Record) uint64 { return r.DropPackets })},
		{elem: ieDroppedOctetDeltaCount, has: has(flow.HasDropBytes), put: u64(func(r *flow.Record) uint64 { return r.DropBytes })},
		{elem: enterprise(19), has: has(flow.HasDNSID), put: u16(func(r *flow.Record) uint16 { return r.DNSID })},
		{elem: enterprise(21), has: has(flow.HasDNSRcode), put: u16(func(r *flow.Record) uint16 { return r.DNSRcode })},
		{elem: enterprise(22), has: has(flow.HasDNSLatency), put: u64(func(r *flow.Record) uint64 { return r.DNSLatencyNs })},
		{elem: enterprise(23), has: has(flow.HasTunnelType), put: func(p []byte, r *flow.Record) { p[0] = uint8(r.TunnelType) }},
		// The tunnel's ID in the element of its type.
		{elem: ieLayer2SegmentID, has: tunnelID(func(t tunnel.Type) bool { return t == tunnel.VXLAN }),
			put: u64(func(r *flow.Record) uint64 { return vxlanSegment | uint64(r.TunnelID)&0xffffff })},
		{elem: ieGreKey, has: tunnelID(func(t tunnel.Type) bool { return t == tunnel.GRE }),
			put: func(p []byte, r *flow.Record) { be.PutUint32(p, r.TunnelID) }},
		{elem: enterprise(24), has: tunnelID(func(t tunnel.Type) bool { return t != tunnel.VXLAN && t != tunnel.GRE }),
			put: func(p []byte, r *flow.Record) { be.PutUint32(p, r.TunnelID) }},
		// The outer addresses in the element of their family.
		outerAddr(enterprise(25), flow.HasOuterSrcAddr, true, func(r *flow.Record) netip.Addr { return r.OuterSrcAddr }),
		outerAddr(enterprise(27), flow.HasOuterSrcAddr, false, func(r *flow.Record) netip.Addr { return r.OuterSrcAddr }),
		outerAddr(enterprise(26), flow.HasOuterDstAddr, true, func(r *flow.Record) netip.Addr { return r.OuterDstAddr }),
		outerAddr(enterprise(28), flow.HasOuterDstAddr, false, func(r *flow.Record) netip.Addr { return r.OuterDstAddr }),
		{elem: enterprise(29), has: has(flow.HasOuterSrcPort), put: u16(func(r *flow.Record) uint16 { return r.OuterSrcPort })},
		{elem: enterprise(30), has: has(flow.HasOuterDstPort), put: u16(func(r *flow.Record) uint16 { return r.OuterDstPort })},
		// Variable length: last.
		{elem: enterprise(18), has: has(flow.HasDropReasons), str: func(b []byte, r *flow.Record) []byte { return r.DropReasons.AppendJSON(b) }},
		{elem: enterprise(20), has: has(flow.HasDNSQName), str: func(b []byte, r *flow.Record) []byte { return append(b, r.DNSQName...) }},
	}
	return append(parts, k8sParts()...)
}()

// k8sParts are the Kubernetes names' parts (31 to 46): each end's kind as
// an unsigned8 (flow.K8sKind's numbers), each name a string of variable
// length, for a record that has it. They come last: a template's
// variable-length elements follow its fixed ones, and the kinds, the two
// fixed ones, go before the names.
func k8sParts() []part {
	var kinds, names []part
	for _, f := range flow.Fields() {
		if !slices.Contains(flow.K8sFieldNames(), f.Name) {
			continue
		}
		elem := enterprise(f.Wire.IPFIX[0].ID)
		if f.Type == flow.TypeEnum {
			kinds = append(kinds, part{elem: elem, has: f.AppliesTo,
				put: func(p []byte, r *flow.Record) { p[0] = uint8(f.Uint(r)) }})
			continue
		}
		names = append(names, part{elem: elem, has: f.AppliesTo,
			str: func(b []byte, r *flow.Record) []byte { return append(b, *f.Str(r)...) }})
	}
	return append(kinds, names...)
}

// hasParts reports whether r may have parts: fields present only where
// measured, or Kubernetes names.
func hasParts(r *flow.Record) bool { return r.Has != 0 || r.K8s != nil }

// partMask says which parts r has: the parts of its extension template.
func partMask(r *flow.Record) uint64 {
	var m uint64
	for i := range extParts {
		if extParts[i].has(r) {
			m |= 1 << i
		}
	}
	return m
}
