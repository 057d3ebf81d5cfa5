package rules

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
)

// RuleEntry mirrors struct rule of bpf/rules/rules.h field for field (20
// bytes, not the 24 its comment says): the value of rules_N at a slot.
type RuleEntry struct {
	PortLo        uint16
	PortHi        uint16
	SampleN       uint16
	IfaceGroup    uint16
	Proto         uint8
	PortSide      uint8
	Direction     uint8
	Action        uint8
	TCPFlagsMask  uint8
	TCPFlagsValue uint8
	AggPrefix     uint8
	Used          uint8
	Pad           uint32
}

// LPMKey mirrors struct rule_lpm_key: the key of rules_src_N and
// rules_dst_N. IPv4 prefixes are IPv4-mapped, PrefixLen 96+P.
type LPMKey struct {
	PrefixLen uint32
	Addr      [16]byte
}

// Candidates mirrors struct rule_candidates: the rules an LPM entry (or
// the wild list) offers, best first.
type Candidates struct {
	N     uint16
	Pad   uint16
	Slots [MaxCandidates]uint16
	Plen  [MaxCandidates]uint8
}

// List returns the first N slots and prefix lengths.
func (c *Candidates) List() (slots []uint16, plens []uint8) {
	return c.Slots[:c.N], c.Plen[:c.N]
}

func (c *Candidates) add(slot int, plen uint8) {
	c.Slots[c.N] = uint16(slot)
	c.Plen[c.N] = plen
	c.N++
}

// Config mirrors struct rules_config: what a set holds, and its rules
// without a CIDR.
type Config struct {
	NRules   uint32
	HasSrc   uint8
	HasDst   uint8
	HasIface uint8
	TCPFlags uint8 // the TCP flags some rule looks at: the union of TCPFlagsMask
	Wild     Candidates
}

// Compiled is a set in the form the datapath reads, for one of its two
// buffers: Rules for rules_N, Src and Dst for the tries rules_src_N and
// rules_dst_N, Config for rules_cfg[N]. Interface group g (1..64) is the
// glob IfaceGlobs[g-1] and bit g-1 of an interface's mask.
type Compiled struct {
	Rules []RuleEntry
	Src   map[LPMKey]Candidates
	Dst   map[LPMKey]Candidates
	Config
	IfaceGlobs [MaxIfaceGroups]string
}

// KeyOf is the trie key of a prefix: IPv4 IPv4-mapped.
func KeyOf(p netip.Prefix) LPMKey {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return LPMKey{PrefixLen: uint32(bits), Addr: p.Masked().Addr().As16()}
}

// AddrKey is the key the datapath looks an address up with: all 128 bits,
// IPv4 IPv4-mapped, as in the flow key.
func AddrKey(a netip.Addr) LPMKey {
	return LPMKey{PrefixLen: 128, Addr: a.As16()}
}

// v4Barrier is ::ffff:0:0/96, the prefix of every IPv4 address in the
// tries' address space.
var v4Barrier = netip.MustParsePrefix("::ffff:0:0/96")

// Compile turns a set into its datapath form. It fails when the set does
// not fit rules.h: more than MaxCandidates rules on one prefix entry or
// without a CIDR, more than MaxIfaceGroups distinct iface globs.
//
// Two things the tries cannot say by themselves are compiled in, so that
// the datapath only ever looks up, walks and compares (see the package
// documentation, "IPv4 and IPv6"):
//   - an IPv6 rule never matches an IPv4 packet, although a short IPv6
//     prefix (::/0, ::/8, ...) covers the IPv4-mapped addresses: entries
//     list rules of their own family only, and where an IPv6 prefix covers
//     ::ffff:0:0/96, an entry for ::ffff:0:0/96 itself (listing the
//     0.0.0.0/0 rules, often none) stops IPv4 addresses falling through to
//     the IPv6 entry;
//   - a ::/0 rule has prefix length 0, as a rule without a CIDR: on a tie
//     the lower slot wins, so the entries that list a ::/0 rule also list
//     the rules without a CIDR of lower slots (otherwise the datapath,
//     which tries those only when no CIDR rule matched, would let the ::/0
//     rule win).
func Compile(s Set) (*Compiled, error) {
	c := &Compiled{
		Rules: make([]RuleEntry, len(s.rules)),
		Src:   map[LPMKey]Candidates{},
		Dst:   map[LPMKey]Candidates{},
	}
	c.NRules = uint32(len(s.rules))
	var errs []error

	groups := map[string]uint16{}
	for i, r := range s.rules {
		var g uint16
		if r.Iface != "" {
			var ok bool
			if g, ok = groups[r.Iface]; !ok {
				if len(groups) == MaxIfaceGroups {
					errs = append(errs, fmt.Errorf("%s: iface=%s is a distinct iface glob past the %d a set may name",
						s.where(i), r.Iface, MaxIfaceGroups))
					continue
				}
				g = uint16(len(groups) + 1)
				groups[r.Iface] = g
				c.IfaceGlobs[g-1] = r.Iface
			}
		}
		c.Rules[i] = entryOf(r, g)
		c.TCPFlags |= r.FlagsMask
	}
	if len(groups) > 0 {
		c.HasIface = 1
	}

	var wild []int
	for i, r := range s.rules {
		if r.Side == SideNone {
			wild = append(wild, i)
		}
	}
	if len(wild) > MaxCandidates {
		errs = append(errs, fmt.Errorf("%d rules without a CIDR (src=, dst= or net=), more than %d (RULES_CANDIDATES); the first past it is %s",
			len(wild), MaxCandidates, s.where(wild[MaxCandidates])))
	} else {
		for _, i := range wild {
			c.Wild.add(i, 0)
		}
	}

	errs = append(errs, compileSide(s, c.Src, "source", wild, SideSrc)...)
	errs = append(errs, compileSide(s, c.Dst, "destination", wild, SideDst)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(c.Src) > 0 {
		c.HasSrc = 1
	}
	if len(c.Dst) > 0 {
		c.HasDst = 1
	}
	return c, nil
}

func entryOf(r Rule, group uint16) RuleEntry {
	return RuleEntry{
		PortLo:        r.PortLo,
		PortHi:        r.PortHi,
		SampleN:       r.SampleN,
		IfaceGroup:    group,
		Proto:         r.Proto,
		PortSide:      uint8(r.PortSide),
		Direction:     uint8(r.Dir),
		Action:        uint8(r.Action),
		TCPFlagsMask:  r.FlagsMask,
		TCPFlagsValue: r.FlagsValue,
		AggPrefix:     r.AggPrefix,
		Used:          1,
	}
}

// compileSide fills one trie: an entry per distinct prefix of the rules on
// that side (side and net rules), listing every rule of the side and the
// same family whose prefix covers it, best first.
func compileSide(s Set, trie map[LPMKey]Candidates, name string, wild []int, side Side) []error {
	byPrefix := map[netip.Prefix][]int{} // slots ascending
	var prefixes []netip.Prefix          // in slot order, for stable errors
	for i, r := range s.rules {
		if r.Side != side && r.Side != SideNet {
			continue
		}
		if _, ok := byPrefix[r.Prefix]; !ok {
			prefixes = append(prefixes, r.Prefix)
		}
		byPrefix[r.Prefix] = append(byPrefix[r.Prefix], i)
	}
	barrier := false
	var errs []error
	for _, p := range prefixes {
		// Walk up the covering prefixes of p's own family: a netip.Prefix
		// never covers the other family, which is how an IPv4 entry leaves
		// out the IPv6 rules whose prefix covers ::ffff:0:0/96.
		type cand struct {
			slot int
			plen uint8
		}
		var list []cand
		hasZero := -1 // the highest slot of a ::/0 rule listed
		for bits := p.Bits(); bits >= 0; bits-- {
			anc := netip.PrefixFrom(p.Addr(), bits).Masked()
			for _, i := range byPrefix[anc] {
				list = append(list, cand{i, s.rules[i].Plen()})
				if s.rules[i].Plen() == 0 {
					hasZero = max(hasZero, i)
				}
			}
		}
		for _, i := range wild {
			if i < hasZero {
				list = append(list, cand{i, 0})
			}
		}
		slices.SortFunc(list, func(a, b cand) int {
			return cmp.Or(cmp.Compare(b.plen, a.plen), cmp.Compare(a.slot, b.slot))
		})
		if len(list) > MaxCandidates {
			why := "its own rules and those of the prefixes covering it"
			if hasZero >= 0 {
				why += ", and the rules without a CIDR before a ::/0 rule"
			}
			errs = append(errs, fmt.Errorf("%s prefix %s: %d candidate rules (%s), more than %d (RULES_CANDIDATES)",
				name, p, len(list), why, MaxCandidates))
			continue
		}
		var cs Candidates
		for _, x := range list {
			cs.add(x.slot, x.plen)
		}
		trie[KeyOf(p)] = cs
		if p.Addr().Is6() && p.Bits() < 96 && p.Contains(v4Barrier.Addr()) {
			barrier = true
		}
	}
	// With a 0.0.0.0/0 rule the key already exists, listing its rules;
	// otherwise no IPv4 rule covers the whole of ::ffff:0:0/96, and the
	// entry lists none.
	if k := KeyOf(v4Barrier); barrier {
		if _, ok := trie[k]; !ok {
			trie[k] = Candidates{}
		}
	}
	return errs
}

// IfaceGroups is the mask of the groups whose glob matches the interface
// name: what the datapath's per-interface mask must hold for this set.
func (c *Compiled) IfaceGroups(name string) uint64 {
	var m uint64
	for i, g := range c.IfaceGlobs {
		if g == "" {
			break
		}
		if ok, _ := filepath.Match(g, name); ok {
			m |= 1 << i
		}
	}
	return m
}
