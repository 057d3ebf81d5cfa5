// Package tunnel describes the outer side of the packets the datapath took
// out of a tunnel (VXLAN, Geneve, GRE, IP in IP): a flow of such packets is
// keyed by the inner packet's 5-tuple, and Info says what carried it.
//
// A package of its own, apart from internal/datapath which reads it from
// the kernel, so that flow records and their encoders can carry it without
// importing the loader.
package tunnel

import (
	"fmt"
	"net/netip"
)

// Type is an encapsulation the datapath takes apart.
type Type uint8

// The values are the datapath's (enum tunnel_type, bpf/lib/parse.h).
const (
	// None: the flow's packets were not taken out of a tunnel.
	None Type = iota
	// VXLAN over UDP to port 4789 (IANA) or 8472 (Linux's default, as
	// flannel uses it): an Ethernet frame inside.
	VXLAN
	// Geneve over UDP to port 6081: an Ethernet frame, or an IPv4 or IPv6
	// packet, inside.
	Geneve
	// GRE (IP protocol 47, version 0): an IPv4 or IPv6 packet, or an
	// Ethernet frame (transparent Ethernet bridging, 0x6558), inside.
	GRE
	// IPIP is IP in IP: IP protocol 4 (IPv4 inside) or 41 (IPv6 inside),
	// over IPv4 or IPv6; the outer and inner families tell 4in4, 6in4,
	// 4in6 and 6in6 apart.
	IPIP
)

// String is the type's name as records spell it: "vxlan", "geneve", "gre",
// "ipip", or "" for None.
func (t Type) String() string {
	switch t {
	case VXLAN:
		return "vxlan"
	case Geneve:
		return "geneve"
	case GRE:
		return "gre"
	case IPIP:
		return "ipip"
	case None:
		return ""
	}
	return "unknown"
}

// ParseType is the inverse of String for the tunnels the datapath takes
// apart: "vxlan", "geneve", "gre" or "ipip".
func ParseType(s string) (Type, error) {
	for t := VXLAN; t <= IPIP; t++ {
		if t.String() == s {
			return t, nil
		}
	}
	return None, fmt.Errorf("unknown tunnel type %q (want vxlan, geneve, gre or ipip)", s)
}

// Info is the outer side of a tunnelled flow as the hook saw it: the
// headers around the first of its packets in an eviction interval. A flow
// whose packets came through several tunnels (another outer address, or
// another VNI, for the same inner 5-tuple in one interval) keeps the first.
type Info struct {
	Type Type
	// ID is the VNI (VXLAN, Geneve) or the GRE key, when HasID: GRE's key
	// is optional, and IP in IP has none.
	ID    uint32
	HasID bool
	// SrcAddr and DstAddr are the outer IP header's addresses.
	SrcAddr, DstAddr netip.Addr
	// SrcPort and DstPort are the outer UDP header's ports (VXLAN,
	// Geneve; DstPort tells VXLAN's 4789 from 8472); 0 for GRE and IP in
	// IP.
	SrcPort, DstPort uint16
	// SrcMAC and DstMAC are the outer Ethernet header's addresses, and
	// VlanID its VLAN (0: untagged).
	SrcMAC, DstMAC [6]byte
	VlanID         uint16
	// InnerEthernet says the tunnel carried an Ethernet frame (VXLAN;
	// Geneve and GRE with transparent Ethernet bridging): the flow key's
	// MACs and VLAN are the inner frame's. Otherwise the inner packet had
	// no layer 2 of its own, and the key keeps the outer frame's.
	InnerEthernet bool
}
