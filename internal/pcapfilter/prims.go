package pcapfilter

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/bpf"
)

// Offsets in an untagged Ethernet frame: skb->data at TC on an Ethernet
// device starts at the destination MAC, and the outer VLAN tag, if any,
// has been moved into the skb's metadata (see docs/capture.md).
const (
	offEtherDst  = 0
	offEtherSrc  = 6
	offEtherType = 12
	offL3        = 14
	offIPv4Frag  = offL3 + 6 // flags and fragment offset
	offIPv4Proto = offL3 + 9
	offIPv4Src   = offL3 + 12
	offIPv4Dst   = offL3 + 16
	offARPSpa    = offL3 + 14 // sender protocol address
	offARPTpa    = offL3 + 24 // target protocol address
	offIPv6Next  = offL3 + 6
	offIPv6Src   = offL3 + 8
	offIPv6Dst   = offL3 + 24
	offIPv6L4    = offL3 + 40 // right after the fixed header
)

const (
	etherIPv4 = 0x0800
	etherARP  = 0x0806
	etherRARP = 0x8035
	etherIPv6 = 0x86dd

	protoICMP   = 1
	protoIGMP   = 2
	protoTCP    = 6
	protoUDP    = 17
	protoFrag6  = 44
	protoICMPv6 = 58
	protoSCTP   = 132
)

func eq(base loadBase, off uint32, size int, k uint32) node {
	return cmpNode{ld: load{base: base, off: off, size: size}, test: bpf.JumpEqual, k: k}
}

func ethType(t uint32) node { return eq(baseFrame, offEtherType, 2, t) }

func and(ns ...node) node {
	n := ns[0]
	for _, m := range ns[1:] {
		n = andNode{n, m}
	}
	return n
}

func or(ns ...node) node {
	n := ns[0]
	for _, m := range ns[1:] {
		n = orNode{n, m}
	}
	return n
}

// ipProto is `ip proto p`: the IPv4 protocol field, fragments included.
func ipProto(p uint32) node { return and(ethType(etherIPv4), eq(baseFrame, offIPv4Proto, 1, p)) }

// ip6Proto is `ip6 proto p`: libpcap also looks behind one fragment
// header, and no further.
func ip6Proto(p uint32) node {
	return and(ethType(etherIPv6), or(eq(baseFrame, offIPv6Next, 1, p),
		and(eq(baseFrame, offIPv6Next, 1, protoFrag6), eq(baseFrame, offIPv6L4, 1, p))))
}

// ipv4First is true for an unfragmented packet or a first fragment: only
// those carry the transport header.
func ipv4First() node {
	return notNode{cmpNode{ld: load{base: baseFrame, off: offIPv4Frag, size: 2}, test: bpf.JumpBitsSet, k: 0x1fff}}
}

// protoAlone compiles a protocol keyword used as a primitive.
func protoAlone(proto string) (node, error) {
	switch proto {
	case "ip":
		return ethType(etherIPv4), nil
	case "ip6":
		return ethType(etherIPv6), nil
	case "arp":
		return ethType(etherARP), nil
	case "rarp":
		return ethType(etherRARP), nil
	case "tcp":
		return or(ipProto(protoTCP), ip6Proto(protoTCP)), nil
	case "udp":
		return or(ipProto(protoUDP), ip6Proto(protoUDP)), nil
	case "sctp":
		return or(ipProto(protoSCTP), ip6Proto(protoSCTP)), nil
	case "icmp":
		return ipProto(protoICMP), nil
	case "igmp":
		return ipProto(protoIGMP), nil
	case "icmp6":
		return ip6Proto(protoICMPv6), nil
	}
	return nil, fmt.Errorf("%q needs a qualifier after it, such as host or proto", proto)
}

// ipProtoNames are the IP protocol names accepted after `proto`. libpcap
// reads /etc/protocols; the agent is a static binary that must not depend
// on the host's files, so the common ones are listed here.
var ipProtoNames = map[string]uint32{
	"icmp": protoICMP, "igmp": protoIGMP, "tcp": protoTCP, "udp": protoUDP, "gre": 47,
	"esp": 50, "ah": 51, "icmp6": protoICMPv6, "pim": 103, "vrrp": 112, "sctp": protoSCTP,
}

var etherProtoNames = map[string]uint32{"ip": etherIPv4, "ip6": etherIPv6, "arp": etherARP, "rarp": etherRARP}

// protoPrimitive compiles `[ether|ip|ip6] proto id`.
func (ps *parser) protoPrimitive(proto string, id token) (node, error) {
	if id.kind != tokWord {
		return nil, ps.errAt(id, "proto needs a number or a name, got %s", id)
	}
	names := ipProtoNames
	max := uint32(255)
	if proto == "ether" {
		names, max = etherProtoNames, 0xffff
	}
	v, ok := parseNumber(id.text)
	if !ok {
		if v, ok = names[id.text]; !ok {
			return nil, ps.errAt(id, "unknown %s protocol %s", strings.TrimSpace(proto+" proto"), id)
		}
	}
	if v > max {
		return nil, ps.errAt(id, "protocol %d is more than %d", v, max)
	}
	switch proto {
	case "ether":
		// libpcap compiles a value up to 1500 into 802.3 length and LLC
		// tests; only Ethernet II types are implemented.
		if v <= 1500 {
			return nil, ps.errAt(id, "ether proto %d is an 802.3 length (up to 1500), which is not supported", v)
		}
		return ethType(v), nil
	case "ip":
		return ipProto(v), nil
	case "ip6":
		return ip6Proto(v), nil
	case "":
		return or(ipProto(v), ip6Proto(v)), nil
	}
	return nil, ps.errAt(id, "'%s proto' is not supported", proto)
}

// castPrimitive compiles broadcast and multicast.
func castPrimitive(proto, what string) (node, error) {
	switch {
	case (proto == "" || proto == "ether") && what == "broadcast":
		return and(eq(baseFrame, offEtherDst+2, 4, 0xffffffff), eq(baseFrame, offEtherDst, 2, 0xffff)), nil
	case (proto == "" || proto == "ether") && what == "multicast":
		return cmpNode{ld: load{base: baseFrame, off: offEtherDst, size: 1}, test: bpf.JumpBitsSet, k: 1}, nil
	case proto == "ip" && what == "multicast":
		return and(ethType(etherIPv4), cmpNode{ld: load{base: baseFrame, off: offIPv4Dst, size: 1}, test: bpf.JumpGreaterOrEqual, k: 224}), nil
	case proto == "ip6" && what == "multicast":
		return and(ethType(etherIPv6), eq(baseFrame, offIPv6Dst, 1, 0xff)), nil
	case proto == "ip" && what == "broadcast":
		return nil, fmt.Errorf("ip broadcast needs the interface's netmask, which a filter compiled in the agent does not know; use `ip dst 10.0.0.255` or `ether broadcast`")
	}
	return nil, fmt.Errorf("'%s %s' is not valid", proto, what)
}

// dirs combines a src test and a dst test as the direction qualifier says.
func dirs(dir string, src, dst func() node) node {
	switch dir {
	case "src":
		return src()
	case "dst":
		return dst()
	case "src and dst":
		return and(src(), dst())
	}
	return or(src(), dst())
}

// primitive compiles id under the qualifiers q (typed or carried over).
func (ps *parser) primitive(q quals, id token) (node, error) {
	typ := q.typ
	switch typ {
	case "port", "portrange":
		return ps.portPrimitive(q, id)
	case "":
		typ = "host"
	}
	if q.proto != "" && q.proto != "ether" && q.proto != "ip" && q.proto != "ip6" && q.proto != "arp" && q.proto != "rarp" {
		return nil, ps.errAt(id, "'%s' modifier applied to %s", q.proto, typ)
	}
	if mac, ok := parseMAC(id.text); ok {
		if typ != "host" || (q.proto != "" && q.proto != "ether") {
			return nil, ps.errAt(id, "a MAC address needs `ether host`, got %s", qualsString(q))
		}
		hi := uint32(binary.BigEndian.Uint16(mac[0:2]))
		lo := binary.BigEndian.Uint32(mac[2:6])
		at := func(off uint32) func() node {
			return func() node { return and(eq(baseFrame, off+2, 4, lo), eq(baseFrame, off, 2, hi)) }
		}
		return dirs(q.dir, at(offEtherSrc), at(offEtherDst)), nil
	}
	if q.proto == "ether" {
		return nil, ps.errAt(id, "ether %s needs a MAC address, got %s", typ, id)
	}
	addr, bits, err := ps.prefix(id)
	if err != nil {
		return nil, err
	}
	if addr.Is6() {
		if q.proto != "" && q.proto != "ip6" {
			return nil, ps.errAt(id, "'%s' modifier applied to ip6 %s", q.proto, typ)
		}
		return and(ethType(etherIPv6), dirs(q.dir, ip6Match(offIPv6Src, addr, bits), ip6Match(offIPv6Dst, addr, bits))), nil
	}
	if q.proto == "ip6" {
		return nil, ps.errAt(id, "'ip6' modifier applied to ip %s", typ)
	}
	a := addr.As4()
	v := binary.BigEndian.Uint32(a[:])
	mask := ^uint32(0) << (32 - bits)
	if bits == 0 {
		mask = 0
	}
	at := func(et uint32, off uint32) func() node {
		return func() node {
			c := cmpNode{ld: load{base: baseFrame, off: off, size: 4}, test: bpf.JumpEqual, k: v}
			if mask != 0xffffffff {
				c.mask = mask
			}
			if mask == 0 {
				return ethType(et)
			}
			return and(ethType(et), c)
		}
	}
	ip := func() node { return dirs(q.dir, at(etherIPv4, offIPv4Src), at(etherIPv4, offIPv4Dst)) }
	arp := func(et uint32) node { return dirs(q.dir, at(et, offARPSpa), at(et, offARPTpa)) }
	switch q.proto {
	case "ip":
		return ip(), nil
	case "arp":
		return arp(etherARP), nil
	case "rarp":
		return arp(etherRARP), nil
	}
	// An IPv4 host or net with no protocol matches IPv4, ARP and RARP.
	return or(ip(), arp(etherARP), arp(etherRARP)), nil
}

// ip6Match matches the IPv6 address at off against addr/bits, one 32-bit
// word at a time; words the prefix does not cover are not tested.
func ip6Match(off uint32, addr netip.Addr, bits int) func() node {
	return func() node {
		a := addr.As16()
		var ns []node
		for w := 0; w < 4; w++ {
			wb := min(max(bits-32*w, 0), 32)
			if wb == 0 {
				continue
			}
			mask := ^uint32(0) << (32 - wb)
			c := cmpNode{ld: load{base: baseFrame, off: off + uint32(4*w), size: 4}, test: bpf.JumpEqual,
				k: binary.BigEndian.Uint32(a[4*w:]) & mask}
			if wb != 32 {
				c.mask = mask
			}
			ns = append(ns, c)
		}
		if len(ns) == 0 {
			return ethType(etherIPv6)
		}
		return and(ns...)
	}
}

// prefix reads the address or network of a host or net primitive: a full
// or partial dotted IPv4 address (`net 10` is 10.0.0.0/8, as in libpcap),
// an IPv6 address, then an optional /len or, for IPv4, `mask M`.
func (ps *parser) prefix(id token) (netip.Addr, int, error) {
	var addr netip.Addr
	var bits int
	if a, err := netip.ParseAddr(id.text); err == nil && a.Is6() && a.Zone() == "" {
		addr, bits = a, 128
	} else if v, n, ok := parseDotted(id.text); ok {
		addr, bits = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 8*n
	} else {
		return netip.Addr{}, 0, ps.errAt(id, "%s is not an address: names are not resolved (no DNS or /etc/hosts in the agent), use an IPv4 or IPv6 address", id)
	}
	spelled := id.text
	switch t := ps.peek(); {
	case isPunct(t, "/"):
		ps.next()
		l := ps.next()
		n, err := strconv.Atoi(l.text)
		if l.kind != tokWord || err != nil || n < 0 || n > addr.BitLen() {
			return netip.Addr{}, 0, ps.errAt(l, "bad prefix length %s for %s", l, id.text)
		}
		bits = n
		spelled += "/" + l.text
	case isWord(t, "mask"):
		ps.next()
		m := ps.next()
		mv, n, ok := parseDotted(m.text)
		if !addr.Is4() || !ok || n != 4 {
			return netip.Addr{}, 0, ps.errAt(m, "mask needs an IPv4 address and a dotted IPv4 mask")
		}
		bits = 32 - trailingZeros(mv)
		if mv != ^uint32(0)<<(32-bits) && bits != 0 || bits == 0 && mv != 0 {
			return netip.Addr{}, 0, ps.errAt(m, "mask %s is not contiguous", m.text)
		}
		spelled += " mask " + m.text
	}
	if p := netip.PrefixFrom(addr, bits); p.Masked().Addr() != addr {
		return netip.Addr{}, 0, ps.errAt(id, "non-network bits set in %q", spelled)
	}
	return addr, bits, nil
}

func trailingZeros(v uint32) int {
	n := 0
	for n < 32 && v&(1<<n) == 0 {
		n++
	}
	return n
}

// parseDotted reads 1 to 4 decimal parts (`10`, `10.1`, `10.1.2.3`) into
// the high bits of an IPv4 address, as libpcap's pcap_atonet does.
func parseDotted(s string) (uint32, int, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return 0, 0, false
	}
	var v uint32
	for _, p := range parts {
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return 0, 0, false
		}
		v = v<<8 | uint32(n)
	}
	return v << (8 * (4 - len(parts))), len(parts), true
}

// portPrimitive compiles port and portrange for TCP, UDP and SCTP.
func (ps *parser) portPrimitive(q quals, id token) (node, error) {
	var protos []uint32
	switch q.proto {
	case "":
		protos = []uint32{protoSCTP, protoTCP, protoUDP}
	case "tcp":
		protos = []uint32{protoTCP}
	case "udp":
		protos = []uint32{protoUDP}
	case "sctp":
		protos = []uint32{protoSCTP}
	default:
		return nil, ps.errAt(id, "'%s' modifier applied to %s", q.proto, q.typ)
	}
	lo, hi, err := ps.ports(q.typ, id)
	if err != nil {
		return nil, err
	}
	match := func(ld load) node {
		if lo == hi {
			return cmpNode{ld: ld, test: bpf.JumpEqual, k: lo}
		}
		return and(cmpNode{ld: ld, test: bpf.JumpGreaterOrEqual, k: lo}, cmpNode{ld: ld, test: bpf.JumpLessOrEqual, k: hi})
	}
	var alts []node
	// IPv6: the next header of the fixed header only, as libpcap does for
	// ports (it does not look behind extension or fragment headers).
	for _, p := range protos {
		alts = append(alts, and(ethType(etherIPv6), eq(baseFrame, offIPv6Next, 1, p), dirs(q.dir,
			func() node { return match(load{base: baseFrame, off: offIPv6L4, size: 2}) },
			func() node { return match(load{base: baseFrame, off: offIPv6L4 + 2, size: 2}) })))
	}
	// IPv4: not a later fragment, ports past the IPv4 options.
	for _, p := range protos {
		alts = append(alts, and(ipProto(p), ipv4First(), dirs(q.dir,
			func() node { return match(load{base: baseIPv4L4, off: 0, size: 2}) },
			func() node { return match(load{base: baseIPv4L4, off: 2, size: 2}) })))
	}
	return or(alts...), nil
}

// ports reads a port number or an `a-b` range. Service names (`port http`)
// are rejected: libpcap takes them from /etc/services, whose entries vary
// between systems and may narrow `port` to TCP only.
func (ps *parser) ports(typ string, id token) (uint32, uint32, error) {
	one := func(s string) (uint32, error) {
		v, ok := parseNumber(s)
		if !ok {
			return 0, fmt.Errorf("%q is not a port number: service names are not resolved, use the number", s)
		}
		if v > 65535 {
			return 0, fmt.Errorf("illegal port number %d > 65535", v)
		}
		return v, nil
	}
	if typ == "port" {
		v, err := one(id.text)
		if err != nil {
			return 0, 0, ps.errAt(id, "%v", err)
		}
		return v, v, nil
	}
	a, b, ok := strings.Cut(id.text, "-")
	if !ok {
		return 0, 0, ps.errAt(id, "portrange needs two ports joined by '-', got %s", id)
	}
	lo, err := one(a)
	if err != nil {
		return 0, 0, ps.errAt(id, "%v", err)
	}
	hi, err := one(b)
	if err != nil {
		return 0, 0, ps.errAt(id, "%v", err)
	}
	if lo > hi { // libpcap swaps them
		lo, hi = hi, lo
	}
	return lo, hi, nil
}
