package promflow

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"loupe/internal/config/check"
)

// Group is a named set of CIDR prefixes, the value of the src_group and
// dst_group labels. An address belongs to the group of its longest matching
// prefix across all groups (as a routing table would decide), so the order
// of groups does not matter and a narrow group can be carved out of a wide
// one: internal=10.0.0.0/8 and lab=10.20.0.0/16 put 10.20.1.1 in lab.
// Addresses no prefix covers are "other"; name the rest of the world with
// 0.0.0.0/0 and ::/0 if "other" is not what you want.
//
// IPv4 prefixes match IPv4 flows and IPv6 prefixes IPv6 flows; an
// IPv4-mapped IPv6 prefix (::ffff:0:0/96) matches nothing the datapath
// records, since IPv4 flows are matched as IPv4.
type Group struct {
	Name     string
	Prefixes []netip.Prefix
}

// NewGroup builds a group from prefixes in text form, for configurations
// that map a name to a list.
func NewGroup(name string, prefixes []string) (Group, error) {
	g := Group{Name: strings.TrimSpace(name)}
	for _, s := range prefixes {
		p, err := parsePrefix(strings.TrimSpace(s))
		if err != nil {
			return Group{}, fmt.Errorf("cidr_groups: group %s: %w", check.Quote(g.Name), err)
		}
		g.Prefixes = append(g.Prefixes, p)
	}
	if err := g.validate(); err != nil {
		return Group{}, fmt.Errorf("cidr_groups: %w", err)
	}
	return g, nil
}

// ParseGroup parses "name=prefix,prefix,...", e.g.
// "internal=10.0.0.0/8,192.168.0.0/16,fd00::/8". A bare address is a host
// prefix (/32 or /128).
func ParseGroup(s string) (Group, error) {
	name, list, ok := strings.Cut(s, "=")
	if !ok {
		return Group{}, fmt.Errorf("cidr_groups: %s: want name=prefix[,prefix...]", check.Quote(s))
	}
	if strings.TrimSpace(list) == "" {
		return Group{}, fmt.Errorf("cidr_groups: %s: no prefix after '='", check.Quote(s))
	}
	return NewGroup(name, strings.Split(list, ","))
}

// ParseGroups parses the entries of prometheus.cidr_groups, each
// "name=prefix[,prefix...]", and checks the groups together (no prefix in
// two groups). Entries that repeat a name add prefixes to that group, so
// lists that arrive split at commas (an environment variable, repeated
// flags) work: "lan=10.0.0.0/8", "lan=fd00::/8". Groups keep the order of
// their first entry.
func ParseGroups(entries []string) ([]Group, error) {
	var out []Group
	for _, e := range entries {
		g, err := ParseGroup(e)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(out, func(o Group) bool { return o.Name == g.Name })
		if i < 0 {
			out = append(out, g)
			continue
		}
		out[i].Prefixes = append(out[i].Prefixes, g.Prefixes...)
	}
	if err := validateGroups(out); err != nil {
		return nil, err
	}
	return out, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%s is neither a prefix nor an address", check.Quote(s))
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s is not a CIDR prefix", check.Quote(s))
	}
	return p, nil
}

func (g *Group) validate() error {
	switch g.Name {
	case "":
		return fmt.Errorf("a group has no name")
	case Other, None:
		return fmt.Errorf("group name %s is reserved", check.Quote(g.Name))
	}
	if len(g.Prefixes) == 0 {
		return fmt.Errorf("group %s has no prefix", check.Quote(g.Name))
	}
	for i, p := range g.Prefixes {
		if !p.IsValid() {
			return fmt.Errorf("group %s: invalid prefix %v", check.Quote(g.Name), p)
		}
		if p.Addr().Zone() != "" {
			return fmt.Errorf("group %s: prefix %v has a zone", check.Quote(g.Name), p)
		}
		if m := p.Masked(); m != p {
			// Most likely a typo; matching the masked prefix silently
			// would hide it.
			return fmt.Errorf("group %s: %v has host bits set (did you mean %v?)", check.Quote(g.Name), p, m)
		}
		if slices.Contains(g.Prefixes[:i], p) {
			return fmt.Errorf("group %s: %v listed twice", check.Quote(g.Name), p)
		}
	}
	return nil
}

func validateGroups(groups []Group) error {
	names := make(map[string]bool, len(groups))
	owner := make(map[netip.Prefix]string)
	for i := range groups {
		g := &groups[i]
		if err := g.validate(); err != nil {
			return fmt.Errorf("cidr_groups: %w", err)
		}
		if names[g.Name] {
			return fmt.Errorf("cidr_groups: group %s defined twice", check.Quote(g.Name))
		}
		names[g.Name] = true
		for _, p := range g.Prefixes {
			if o, ok := owner[p]; ok {
				return fmt.Errorf("cidr_groups: %v is in both %s and %s", p, check.Quote(o), check.Quote(g.Name))
			}
			owner[p] = g.Name
		}
	}
	if len(groups) > 0xffff-groupBase {
		return fmt.Errorf("cidr_groups: %d groups, at most %d", len(groups), 0xffff-groupBase)
	}
	return nil
}

// groupTable answers longest-prefix-match lookups with one hash lookup per
// distinct prefix length, longest first: a handful of lengths in practice,
// no allocation, and no dependency on the number of prefixes.
type groupTable struct {
	v4    []len4
	v6    []len6
	names []string // by group index; groupNone and groupOut included
}

type len4 struct {
	mask uint32
	m    map[uint32]uint16
}

type len6 struct {
	bits int
	m    map[[16]byte]uint16
}

func newGroupTable(groups []Group) *groupTable {
	t := &groupTable{names: []string{groupNone: None, groupOut: Other}}
	by4 := map[int]map[uint32]uint16{}
	by6 := map[int]map[[16]byte]uint16{}
	for i, g := range groups {
		idx := uint16(groupBase + i)
		t.names = append(t.names, g.Name)
		for _, p := range g.Prefixes {
			bits := p.Bits()
			if p.Addr().Is4() {
				if by4[bits] == nil {
					by4[bits] = map[uint32]uint16{}
				}
				b := p.Addr().As4()
				by4[bits][binary.BigEndian.Uint32(b[:])] = idx
				continue
			}
			if by6[bits] == nil {
				by6[bits] = map[[16]byte]uint16{}
			}
			by6[bits][p.Addr().As16()] = idx
		}
	}
	for _, bits := range sortedDesc(by4) {
		t.v4 = append(t.v4, len4{mask: mask4(bits), m: by4[bits]})
	}
	for _, bits := range sortedDesc(by6) {
		t.v6 = append(t.v6, len6{bits: bits, m: by6[bits]})
	}
	return t
}

func sortedDesc[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

func mask4(bits int) uint32 {
	if bits == 0 {
		return 0
	}
	return ^uint32(0) << (32 - bits)
}

// lookup4 returns the group index of an IPv4 address.
func (t *groupTable) lookup4(a uint32) uint16 {
	for i := range t.v4 {
		l := &t.v4[i]
		if g, ok := l.m[a&l.mask]; ok {
			return g
		}
	}
	return groupOut
}

// lookup6 returns the group index of an IPv6 address.
func (t *groupTable) lookup6(a [16]byte) uint16 {
	for i := range t.v6 {
		l := &t.v6[i]
		if g, ok := l.m[mask16(a, l.bits)]; ok {
			return g
		}
	}
	return groupOut
}

func mask16(a [16]byte, bits int) [16]byte {
	full := bits / 8
	if full < 16 {
		if rem := bits % 8; rem != 0 {
			a[full] &= ^byte(0) << (8 - rem)
			full++
		}
		clear(a[full:])
	}
	return a
}

// lookup returns the group index of a flow-key address: groupNone for
// non-IP flows and IPv4 keys whose header was cut short.
func (t *groupTable) lookup(etherType uint16, a *[16]byte) uint16 {
	switch etherType {
	case 0x0800:
		// IPv4 is stored IPv4-mapped; anything else means the header
		// ended before the addresses.
		if binary.BigEndian.Uint64(a[:8]) != 0 || binary.BigEndian.Uint32(a[8:12]) != 0xffff {
			return groupNone
		}
		return t.lookup4(binary.BigEndian.Uint32(a[12:]))
	case 0x86DD:
		return t.lookup6(*a)
	}
	return groupNone
}
