package rules

import (
	"net/netip"
	"path/filepath"
)

// Packet is what a rule is matched against. Addresses must be valid; an
// IPv4-mapped address is an IPv4 address, as in the datapath's flow key.
// For ICMP the ports are whatever the datapath put there (type and code):
// port terms never match them.
type Packet struct {
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16
	Ingress          bool
	Iface            string
	TCPFlags         uint8 // byte 13 of the TCP header
}

// Match is the reference matcher: the slot of the rule that decides p,
// straight from the definition of precedence, which the datapath must
// follow exactly: among the rules that match p, the one with the longest
// prefix length (Plen: 96+P for IPv4, 0 without a CIDR), and among those
// the lowest slot. ok is false when no rule matches: p is measured.
func (s Set) Match(p Packet) (slot int, ok bool) {
	best := -1
	for i, r := range s.rules {
		if !r.Matches(p) {
			continue
		}
		if best < 0 || r.Plen() > s.rules[best].Plen() {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	return best, true
}

// Matches says whether every term of r matches p.
func (r Rule) Matches(p Packet) bool {
	src, dst := p.Src.Unmap(), p.Dst.Unmap()
	switch r.Side {
	case SideSrc:
		if !r.Prefix.Contains(src) {
			return false
		}
	case SideDst:
		if !r.Prefix.Contains(dst) {
			return false
		}
	case SideNet:
		if !r.Prefix.Contains(src) && !r.Prefix.Contains(dst) {
			return false
		}
	}
	if r.Proto != 0 && r.Proto != p.Proto {
		return false
	}
	if r.PortLo != 0 {
		if !portProto(p.Proto) {
			return false
		}
		in := func(port uint16) bool { return port >= r.PortLo && port <= r.PortHi }
		switch r.PortSide {
		case PortEither:
			if !in(p.SrcPort) && !in(p.DstPort) {
				return false
			}
		case PortSrc:
			if !in(p.SrcPort) {
				return false
			}
		case PortDst:
			if !in(p.DstPort) {
				return false
			}
		}
	}
	switch r.Dir {
	case DirIngress:
		if !p.Ingress {
			return false
		}
	case DirEgress:
		if p.Ingress {
			return false
		}
	}
	if r.Iface != "" {
		if ok, _ := filepath.Match(r.Iface, p.Iface); !ok {
			return false
		}
	}
	if r.FlagsMask != 0 && (p.Proto != ProtoTCP || p.TCPFlags&r.FlagsMask != r.FlagsValue) {
		return false
	}
	return true
}

// MatchCompiled does with a compiled set what the datapath does, and
// nothing more: look each address up in its trie (the longest entry
// covering it), take the first candidate of the entry whose rule matches
// the packet's other fields, keep the better of the two by (plen desc,
// slot asc); if neither side gave one, take the first matching rule of the
// wild list. ifaceGroupsOf gives the interface's group mask (the
// datapath's per-interface map). BPF tests use it as their oracle, and the
// property test holds it equal to Set.Match.
func MatchCompiled(c *Compiled, p Packet, ifaceGroupsOf func(iface string) uint64) (slot int, ok bool) {
	if c.NRules == 0 {
		return 0, false
	}
	var ifmask uint64
	if c.HasIface != 0 {
		ifmask = ifaceGroupsOf(p.Iface)
	}
	first := func(cs *Candidates) (slot int, plen uint8, ok bool) {
		for i := range cs.N {
			s := int(cs.Slots[i])
			if EntryMatches(&c.Rules[s], p, ifmask) {
				return s, cs.Plen[i], true
			}
		}
		return 0, 0, false
	}
	bestSlot, bestPlen, found := 0, uint8(0), false
	for _, side := range []struct {
		has  uint8
		trie map[LPMKey]Candidates
		addr netip.Addr
	}{{c.HasSrc, c.Src, p.Src}, {c.HasDst, c.Dst, p.Dst}} {
		if side.has == 0 {
			continue
		}
		cs, hit := lpmLookup(side.trie, AddrKey(side.addr))
		if !hit {
			continue
		}
		s, plen, ok := first(&cs)
		if ok && (!found || plen > bestPlen || plen == bestPlen && s < bestSlot) {
			bestSlot, bestPlen, found = s, plen, true
		}
	}
	if found {
		return bestSlot, true
	}
	s, _, ok := first(&c.Wild)
	return s, ok
}

// EntryMatches is the test of struct rule against a packet's fields other
// than the addresses, as the datapath makes it; ifmask is the packet's
// interface's group mask. A zero field matches anything, but a port range
// matches only TCP, UDP and SCTP packets, whatever the rule's proto (a
// rule with ports and no proto applies to those three; ICMP packets carry
// type and code in the flow key's ports).
func EntryMatches(e *RuleEntry, p Packet, ifmask uint64) bool {
	if e.Used == 0 {
		return false
	}
	if e.Proto != 0 && e.Proto != p.Proto {
		return false
	}
	if e.PortLo != 0 {
		if !portProto(p.Proto) {
			return false
		}
		sIn := p.SrcPort >= e.PortLo && p.SrcPort <= e.PortHi
		dIn := p.DstPort >= e.PortLo && p.DstPort <= e.PortHi
		switch PortSide(e.PortSide) {
		case PortEither:
			if !sIn && !dIn {
				return false
			}
		case PortSrc:
			if !sIn {
				return false
			}
		case PortDst:
			if !dIn {
				return false
			}
		}
	}
	if e.Direction == uint8(DirIngress) && !p.Ingress || e.Direction == uint8(DirEgress) && p.Ingress {
		return false
	}
	if e.IfaceGroup != 0 && ifmask&(1<<(e.IfaceGroup-1)) == 0 {
		return false
	}
	if e.TCPFlagsMask != 0 && (p.Proto != ProtoTCP || p.TCPFlags&e.TCPFlagsMask != e.TCPFlagsValue) {
		return false
	}
	return true
}

// lpmLookup is a BPF LPM trie lookup: the entry with the longest prefix
// that covers the key's address.
func lpmLookup(trie map[LPMKey]Candidates, k LPMKey) (Candidates, bool) {
	a := netip.AddrFrom16(k.Addr)
	for bits := int(k.PrefixLen); bits >= 0; bits-- {
		p := netip.PrefixFrom(a, bits).Masked()
		if cs, ok := trie[LPMKey{PrefixLen: uint32(bits), Addr: p.Addr().As16()}]; ok {
			return cs, true
		}
	}
	return Candidates{}, false
}
