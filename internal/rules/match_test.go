package rules

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// Precedence and each term, by hand, through both matchers.
func TestMatch(t *testing.T) {
	s := mustFile(t, `
		id=dns      proto=udp port=53 skip
		id=ten      dst=10.0.0.0/8 sample 1:10
		id=ten16    dst=10.1.0.0/16 proto=tcp
		id=ten16b   net=10.1.0.0/16 aggregate /24
		id=host     src=10.1.2.3 dir=egress
		id=syn      flags=syn,!ack dir=ingress skip
		id=eth      iface=eth[01] proto=sctp
		id=v6       net=2001:db8::/32 dport=443-444
		id=sport    sport=7-9
		id=v4all    dst=0.0.0.0/0 proto=47
	`)
	c, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	cases := []struct {
		p    Packet
		want string
	}{
		// Longest prefix first, whatever the slot.
		{Packet{Src: a("192.0.2.1"), Dst: a("10.9.0.1"), Proto: ProtoTCP}, "ten"},
		{Packet{Src: a("192.0.2.1"), Dst: a("10.1.0.1"), Proto: ProtoTCP}, "ten16"},
		// Equal prefixes: the lower slot; ten16 wants TCP, so ten16b.
		{Packet{Src: a("192.0.2.1"), Dst: a("10.1.0.1"), Proto: ProtoUDP, SrcPort: 1000, DstPort: 53}, "ten16b"},
		// net= on the source address; a /16 beats a /8 on the other side.
		{Packet{Src: a("10.1.9.9"), Dst: a("10.9.0.1"), Proto: ProtoICMP}, "ten16b"},
		// A /32 beats everything, if its other terms match.
		{Packet{Src: a("10.1.2.3"), Dst: a("10.1.0.1"), Proto: ProtoTCP}, "host"},
		{Packet{Src: a("10.1.2.3"), Dst: a("10.1.0.1"), Proto: ProtoTCP, Ingress: true}, "ten16"},
		// No CIDR rule: the wild rules by slot.
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoUDP, SrcPort: 53, DstPort: 999}, "dns"},
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoUDP, SrcPort: 54, DstPort: 999}, "none"},
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoTCP, TCPFlags: FlagSYN, Ingress: true}, "syn"},
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoTCP, TCPFlags: FlagSYN | FlagECE, Ingress: true}, "syn"},
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoTCP, TCPFlags: FlagSYN | FlagACK, Ingress: true}, "none"},
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoTCP, TCPFlags: FlagSYN}, "none"},
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoSCTP, Iface: "eth1"}, "eth"},
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoSCTP, Iface: "eth2"}, "none"},
		// A port term without proto: TCP, UDP, SCTP only, never ICMP's type
		// and code.
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoSCTP, SrcPort: 8}, "sport"},
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoICMP, SrcPort: 8}, "none"},
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: ProtoTCP, DstPort: 8}, "none"},
		// 0.0.0.0/0 is longer than no CIDR, and IPv4 only.
		{Packet{Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Proto: 47}, "v4all"},
		{Packet{Src: a("2001:db9::1"), Dst: a("2001:db9::2"), Proto: 47}, "none"},
		{Packet{Src: a("2001:db8::1"), Dst: a("2001:db9::2"), Proto: ProtoTCP, DstPort: 444}, "v6"},
		{Packet{Src: a("2001:db8::1"), Dst: a("2001:db9::2"), Proto: ProtoTCP, DstPort: 445}, "none"},
		{Packet{Src: a("2001:db9::1"), Dst: a("2001:db8::2"), Proto: ProtoUDP, SrcPort: 443}, "none"}, // dport
		{Packet{Src: a("2001:db9::1"), Dst: a("2001:db8::2"), Proto: ProtoUDP, DstPort: 443}, "v6"},
	}
	for _, tc := range cases {
		ref, refOK := s.Match(tc.p)
		got, ok := MatchCompiled(c, tc.p, c.IfaceGroups)
		if name(s, ref, refOK) != tc.want || name(s, got, ok) != tc.want {
			t.Errorf("%+v: Match %s, MatchCompiled %s, want %s", tc.p, name(s, ref, refOK), name(s, got, ok), tc.want)
		}
	}
}

// The property the BPF tests rest on: on random rule sets (nested IPv4 and
// IPv6 prefixes, ::/0 and 0.0.0.0/0, every term) and random packets, the
// datapath's algorithm on the compiled set decides as precedence does.
func TestMatchCompiledProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	g := newGen(rng)
	var stats struct{ sets, packets, cidr, wild, none, v4, v6 int }
	for range 400 {
		s := g.set(1 + rng.IntN(MaxCandidates))
		c, err := Compile(s)
		if err != nil {
			t.Fatalf("Compile:\n%s: %v", s, err)
		}
		stats.sets++
		for range 150 {
			p := g.packet()
			ref, refOK := s.Match(p)
			got, ok := MatchCompiled(c, p, c.IfaceGroups)
			if ref != got || refOK != ok {
				t.Fatalf("packet %+v\nMatch %d %v, MatchCompiled %d %v, rule set:\n%s", p, ref, refOK, got, ok, s)
			}
			stats.packets++
			switch {
			case !ok:
				stats.none++
			case s.Rule(ref).Side == SideNone:
				stats.wild++
			default:
				stats.cidr++
			}
			if p.Src.Unmap().Is4() {
				stats.v4++
			} else {
				stats.v6++
			}
		}
	}
	// A generator that never produced a kind of outcome would prove little.
	if stats.cidr < stats.packets/10 || stats.wild < stats.packets/20 || stats.none < stats.packets/20 || stats.v6 < stats.packets/4 || stats.v4 < stats.packets/4 {
		t.Errorf("poor coverage: %+v", stats)
	}
	t.Logf("%+v", stats)
}

type gen struct {
	rng      *rand.Rand
	prefixes []netip.Prefix
	globs    []string
	ifaces   []string
}

func newGen(rng *rand.Rand) *gen {
	g := &gen{
		rng:    rng,
		globs:  []string{"eth*", "eth[01]", "veth?", "lo", "*", "wl*"},
		ifaces: []string{"eth0", "eth1", "eth2", "veth7", "lo", "wlan0"},
	}
	for _, p := range []string{
		"0.0.0.0/0", "10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.128/25", "10.1.2.3/32",
		"10.2.0.0/16", "192.168.0.0/16", "192.168.1.0/24",
		"::/0", "::/8", "::/64", "::fffe:0:0/95", "2001:db8::/32", "2001:db8:1::/48",
		"2001:db8:1:2::/64", "2001:db8:1:2::1/128", "fe80::/10",
	} {
		g.prefixes = append(g.prefixes, netip.MustParsePrefix(p))
	}
	return g
}

// prefix is one of the fixed ones or a random one inside a fixed one, so
// that prefixes nest at every length.
func (g *gen) prefix() netip.Prefix {
	p := g.prefixes[g.rng.IntN(len(g.prefixes))]
	if g.rng.IntN(2) == 0 || p.Bits() == 0 {
		return p
	}
	a := g.addrIn(p)
	bits := p.Bits() + g.rng.IntN(a.BitLen()-p.Bits()+1)
	q := netip.PrefixFrom(a, bits).Masked()
	if q.Addr().Is4In6() && bits >= 96 { // the language refuses them
		return p
	}
	return q
}

func (g *gen) addrIn(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		keep := min(max(p.Bits()-8*i, 0), 8)
		mask := byte(0xff) << (8 - keep)
		b[i] = b[i]&mask | byte(g.rng.UintN(256))&^mask
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func (g *gen) rule() string {
	var t []string
	pick := func(n int) bool { return g.rng.IntN(100) < n }
	var pfx netip.Prefix
	if pick(65) {
		pfx = g.prefix()
		t = append(t, []string{"src", "dst", "net"}[g.rng.IntN(3)]+"="+pfx.String())
	}
	proto := ""
	if pick(40) {
		protos := []string{"tcp", "udp", "sctp", "47", "icmp", "icmp6"}
		proto = protos[g.rng.IntN(len(protos))]
		if pfx.IsValid() && (proto == "icmp" && pfx.Addr().Is6() || proto == "icmp6" && pfx.Addr().Is4()) {
			proto = "tcp"
		}
		t = append(t, "proto="+proto)
	}
	if pick(30) && (proto == "" || proto == "tcp" || proto == "udp" || proto == "sctp") {
		lo := 1 + g.rng.IntN(10)
		hi := lo + g.rng.IntN(3)
		t = append(t, fmt.Sprintf("%s=%d-%d", []string{"port", "sport", "dport"}[g.rng.IntN(3)], lo, hi))
	}
	if pick(20) {
		t = append(t, "dir="+[]string{"ingress", "egress"}[g.rng.IntN(2)])
	}
	if pick(20) {
		t = append(t, "iface="+g.globs[g.rng.IntN(len(g.globs))])
	}
	if pick(15) && (proto == "" || proto == "tcp") {
		var fl []string
		for i, n := range flagNames {
			if g.rng.IntN(4) == 0 {
				if i%2 == 0 {
					n = "!" + n
				}
				fl = append(fl, n)
			}
		}
		if len(fl) > 0 {
			t = append(t, "flags="+strings.Join(fl, ","))
		}
	}
	t = append(t, []string{"measure", "skip", "sample 1:7", "aggregate /16"}[g.rng.IntN(4)])
	return strings.Join(t, " ")
}

// set draws up to n rules, in a random order, leaving out those the set
// refuses (the same match terms twice). Up to MaxCandidates rules never
// overflow a candidate list.
func (g *gen) set(n int) Set {
	var s Set
	for range n {
		r, err := ParseRule(g.rule())
		if err != nil {
			panic(err) // a generator that writes invalid rules is a bug
		}
		if ns, err := s.Add(r); err == nil {
			s = ns
		}
	}
	return s
}

func (g *gen) packet() Packet {
	v4 := g.rng.IntN(2) == 0
	addr := func() netip.Addr {
		for {
			var a netip.Addr
			if g.rng.IntN(5) == 0 { // anywhere
				b := make([]byte, 16)
				for i := range b {
					b[i] = byte(g.rng.UintN(256))
				}
				a = netip.AddrFrom16([16]byte(b))
				if v4 {
					a = netip.AddrFrom4([4]byte(b[:4]))
				}
			} else {
				a = g.addrIn(g.prefix())
			}
			if a.Unmap().Is4() == v4 {
				if v4 && g.rng.IntN(8) == 0 {
					a = netip.AddrFrom16(a.As16()) // IPv4-mapped: still IPv4
				}
				return a
			}
		}
	}
	protos := []uint8{ProtoTCP, ProtoUDP, ProtoSCTP, 47, ProtoICMP, ProtoICMPv6}
	return Packet{
		Src:      addr(),
		Dst:      addr(),
		Proto:    protos[g.rng.IntN(len(protos))],
		SrcPort:  uint16(1 + g.rng.IntN(12)),
		DstPort:  uint16(1 + g.rng.IntN(12)),
		Ingress:  g.rng.IntN(2) == 0,
		Iface:    g.ifaces[g.rng.IntN(len(g.ifaces))],
		TCPFlags: uint8(g.rng.UintN(256)),
	}
}
