package rules

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"unsafe"
)

// The Go mirrors must have rules.h's sizes, as the map value sizes the
// kernel checks, and as binary encoding (what cilium/ebpf marshals with)
// sees them: no implicit padding.
func TestMirrorSizes(t *testing.T) {
	for _, c := range []struct {
		name       string
		size, want uintptr
		bin        int
	}{
		{"struct rule", unsafe.Sizeof(RuleEntry{}), 20, binary.Size(RuleEntry{})},
		{"struct rule_lpm_key", unsafe.Sizeof(LPMKey{}), 20, binary.Size(LPMKey{})},
		{"struct rule_candidates", unsafe.Sizeof(Candidates{}), 100, binary.Size(Candidates{})},
		{"struct rules_config", unsafe.Sizeof(Config{}), 108, binary.Size(Config{})},
	} {
		if c.size != c.want || c.bin != int(c.want) {
			t.Errorf("%s: size %d, binary %d, want %d", c.name, c.size, c.bin, c.want)
		}
	}
	if off := unsafe.Offsetof(RuleEntry{}.Proto); off != 8 {
		t.Errorf("rule.proto at %d, want 8", off)
	}
	if off := unsafe.Offsetof(Candidates{}.Plen); off != 68 {
		t.Errorf("rule_candidates.plen at %d, want 68", off)
	}
	if off := unsafe.Offsetof(Config{}.Wild); off != 8 {
		t.Errorf("rules_config.wild at %d, want 8", off)
	}
}

func TestCompileEntries(t *testing.T) {
	s := mustFile(t, `
		id=r0 src=192.168.1.1 dport=8080-8090 dir=ingress iface=eth* skip
		id=r1 src=10.0.0.0/8 proto=udp sample 1:16
		id=r2 net=10.1.0.0/16 flags=syn,!ack aggregate /24
		id=r3 dst=10.1.2.0/24 iface=veth?
		id=r4 proto=icmp
		id=r5 src=0.0.0.0/0 sport=53 iface=eth*
	`)
	c, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []RuleEntry{
		{PortLo: 8080, PortHi: 8090, PortSide: 2, Direction: 1, IfaceGroup: 1, Action: 1, Used: 1},
		{Proto: 17, SampleN: 16, Action: 2, Used: 1},
		{Proto: 6, TCPFlagsMask: FlagSYN | FlagACK, TCPFlagsValue: FlagSYN, Action: 3, AggPrefix: 24, Used: 1},
		{IfaceGroup: 2, Used: 1},
		{Proto: 1, Used: 1},
		{PortLo: 53, PortHi: 53, PortSide: 1, IfaceGroup: 1, Used: 1},
	}
	if fmt.Sprint(c.Rules) != fmt.Sprint(want) {
		t.Errorf("rules:\n got %+v\nwant %+v", c.Rules, want)
	}
	if c.NRules != 6 || c.HasSrc != 1 || c.HasDst != 1 || c.HasIface != 1 || c.TCPFlags != FlagSYN|FlagACK {
		t.Errorf("config %+v", c.Config)
	}
	if c.IfaceGlobs[0] != "eth*" || c.IfaceGlobs[1] != "veth?" || c.IfaceGlobs[2] != "" {
		t.Errorf("iface globs %q", c.IfaceGlobs[:3])
	}
	if got := c.IfaceGroups("eth0"); got != 1 {
		t.Errorf("groups of eth0 %b", got)
	}
	if got := c.IfaceGroups("veth1"); got != 2 {
		t.Errorf("groups of veth1 %b", got)
	}
	if got := c.IfaceGroups("lo"); got != 0 {
		t.Errorf("groups of lo %b", got)
	}
	if got := dump(c.Wild); got != "4/0" {
		t.Errorf("wild %s", got)
	}
	// Source side: r0, r1, r2 (net), r5; destination: r2 (net), r3.
	wantSrc := map[string]string{
		"192.168.1.1/32": "0/128 5/96",
		"10.0.0.0/8":     "1/104 5/96",
		"10.1.0.0/16":    "2/112 1/104 5/96",
		"0.0.0.0/0":      "5/96",
	}
	wantDst := map[string]string{
		"10.1.0.0/16": "2/112",
		"10.1.2.0/24": "3/120 2/112",
	}
	checkTrie(t, "src", c.Src, wantSrc)
	checkTrie(t, "dst", c.Dst, wantDst)
}

func TestCompileNestedV6(t *testing.T) {
	s := mustFile(t, `
		id=a src=2001:db8:1:2::/64
		id=b src=2001:db8::/32 skip
		id=c net=2001:db8:1::/48 proto=tcp
		id=d src=2001:db8:1:2::5
		id=e src=2001:db8::/32 proto=udp
		id=f src=fe80::/10
		id=g dst=2001:db8:1::/48
	`)
	c, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	checkTrie(t, "src", c.Src, map[string]string{
		"2001:db8:1:2::/64":   "0/64 2/48 1/32 4/32",
		"2001:db8::/32":       "1/32 4/32",
		"2001:db8:1::/48":     "2/48 1/32 4/32",
		"2001:db8:1:2::5/128": "3/128 0/64 2/48 1/32 4/32",
		"fe80::/10":           "5/10",
	})
	checkTrie(t, "dst", c.Dst, map[string]string{
		"2001:db8:1::/48": "2/48 6/48",
	})
	// Nothing covers ::ffff:0:0/96: no barrier.
	if _, ok := c.Src[KeyOf(v4Barrier)]; ok {
		t.Error("a barrier without an IPv6 prefix covering IPv4")
	}
}

// An IPv6 prefix covering ::ffff:0:0/96 must not catch IPv4 addresses.
func TestV4Barrier(t *testing.T) {
	for _, c := range []struct {
		file string
		src  map[string]string
	}{
		// ::/0 alone: the barrier lists nothing.
		{"src=::/0 skip", map[string]string{"::/0": "0/0", "::ffff:0:0/96": ""}},
		// ::/8 and ::/64 cover it too; 2001:db8::/32 does not.
		{"src=::/8 skip\nsrc=2001:db8::/32", map[string]string{"::/8": "0/8", "2001:db8::/32": "1/32", "::ffff:0:0/96": ""}},
		{"src=::/64 skip", map[string]string{"::/64": "0/64", "::ffff:0:0/96": ""}},
		{"src=::fffe:0:0/95 skip", map[string]string{"::fffe:0:0/95": "0/95", "::ffff:0:0/96": ""}},
		// Prefixes beside or inside ::ffff:0:0/96's: no barrier.
		{"src=::/97 skip\nsrc=::1:0:0:0/80", map[string]string{"::/97": "0/97", "::1:0:0:0/80": "1/80"}},
		// With IPv4 rules: theirs list IPv4 rules only, never ::/0.
		{"src=::/0 skip\nsrc=10.0.0.0/8", map[string]string{"::/0": "0/0", "10.0.0.0/8": "1/104", "::ffff:0:0/96": ""}},
		// 0.0.0.0/0 is the barrier's own key: it lists the IPv4 rule.
		{"src=::/0 skip\nsrc=0.0.0.0/0 sample 1:2\nsrc=10.0.0.0/8", map[string]string{"::/0": "0/0", "0.0.0.0/0": "1/96", "10.0.0.0/8": "2/104 1/96"}},
	} {
		s := mustFile(t, c.file)
		cp, err := Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		checkTrie(t, c.file, cp.Src, c.src)
	}

	// And what it is for: an IPv4 packet is judged by IPv4 rules only.
	s := mustFile(t, "id=v6 src=::/0 skip\nid=v4 src=10.0.0.0/8 sample 1:2\nid=any proto=udp aggregate /16")
	c, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src   string
		proto uint8
		want  string
	}{
		{"192.0.2.1", ProtoTCP, "none"},     // only ::/0 would cover it
		{"192.0.2.1", ProtoUDP, "any"},      // the wild rule
		{"10.0.0.1", ProtoTCP, "v4"},        // the IPv4 rule
		{"::ffff:10.0.0.1", ProtoTCP, "v4"}, // mapped is IPv4
		{"2001:db8::1", ProtoTCP, "v6"},
		{"::1", ProtoUDP, "v6"}, // ::/0 is slot 0: it wins the tie with the wild rule
	} {
		p := Packet{Src: netip.MustParseAddr(tc.src), Dst: netip.MustParseAddr(tc.src), Proto: tc.proto}
		ref, refOK := s.Match(p)
		got, ok := MatchCompiled(c, p, c.IfaceGroups)
		if name(s, ref, refOK) != tc.want || name(s, got, ok) != tc.want {
			t.Errorf("%s proto %d: Match %s, MatchCompiled %s, want %s", tc.src, tc.proto, name(s, ref, refOK), name(s, got, ok), tc.want)
		}
	}
	// Without the barrier the trie would give the IPv4 address ::/0's entry.
	delete(c.Src, KeyOf(v4Barrier))
	if got, ok := MatchCompiled(c, Packet{Src: netip.MustParseAddr("192.0.2.1"), Proto: ProtoTCP}, c.IfaceGroups); !ok || got != 0 {
		t.Errorf("without the barrier: %d %v; the test shows nothing", got, ok)
	}
}

// ::/0 ties with the rules without a CIDR (both length 0): the lower slot
// wins, so the ::/0 entry lists the earlier wild rules too.
func TestZeroPrefixTie(t *testing.T) {
	s := mustFile(t, "id=w0 proto=udp skip\nid=z net=::/0 sample 1:3\nid=w2 proto=tcp\nid=y src=2001:db8::/32 proto=icmp6")
	c, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	checkTrie(t, "src", c.Src, map[string]string{"::/0": "0/0 1/0", "2001:db8::/32": "3/32 0/0 1/0", "::ffff:0:0/96": ""})
	checkTrie(t, "dst", c.Dst, map[string]string{"::/0": "0/0 1/0", "::ffff:0:0/96": ""})
	if got := dump(c.Wild); got != "0/0 2/0" {
		t.Errorf("wild %s", got)
	}
	for _, tc := range []struct {
		proto uint8
		want  string
	}{{ProtoUDP, "w0"}, {ProtoTCP, "z"}, {ProtoICMPv6, "y"}} {
		p := Packet{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), Proto: tc.proto}
		ref, refOK := s.Match(p)
		got, ok := MatchCompiled(c, p, c.IfaceGroups)
		if name(s, ref, refOK) != tc.want || name(s, got, ok) != tc.want {
			t.Errorf("proto %d: Match %s, MatchCompiled %s, want %s", tc.proto, name(s, ref, refOK), name(s, got, ok), tc.want)
		}
	}
}

func TestCompileLimits(t *testing.T) {
	// 33 rules covering 10.0.0.0/32: /0 to /32.
	var b strings.Builder
	for bits := 0; bits <= 32; bits++ {
		fmt.Fprintf(&b, "src=%s\n", netip.PrefixFrom(netip.MustParseAddr("10.0.0.0"), bits).Masked())
	}
	_, err := Compile(mustFile(t, b.String()))
	want := "source prefix 10.0.0.0/32: 33 candidate rules (its own rules and those of the prefixes covering it), more than 32 (RULES_CANDIDATES)"
	if err == nil || err.Error() != want {
		t.Errorf("33 nested prefixes: %v, want %s", err, want)
	}
	// 32 are fine.
	s := mustFile(t, strings.Replace(b.String(), "src=0.0.0.0/0\n", "", 1))
	c, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	if cs := c.Src[KeyOf(netip.MustParsePrefix("10.0.0.0/32"))]; cs.N != 32 || cs.Slots[0] != 31 || cs.Plen[0] != 128 || cs.Plen[31] != 97 {
		t.Errorf("32 nested: %s", dump(cs))
	}

	// The wild rules a ::/0 entry lists count too.
	b.Reset()
	for i := range 31 {
		fmt.Fprintf(&b, "dport=%d\n", i+1)
	}
	b.WriteString("src=::/0\nsrc=2001:db8::/32\n")
	_, err = Compile(mustFile(t, b.String()))
	want = "source prefix 2001:db8::/32: 33 candidate rules (its own rules and those of the prefixes covering it, and the rules without a CIDR before a ::/0 rule), more than 32 (RULES_CANDIDATES)"
	if err == nil || err.Error() != want {
		t.Errorf("::/0 with 31 wild rules before: %v, want %s", err, want)
	}

	b.Reset()
	for i := range 33 {
		fmt.Fprintf(&b, "dport=%d\n", i+1)
	}
	_, err = Compile(mustFile(t, b.String()))
	want = "33 rules without a CIDR (src=, dst= or net=), more than 32 (RULES_CANDIDATES); the first past it is line 33"
	if err == nil || err.Error() != want {
		t.Errorf("33 wild rules: %v, want %s", err, want)
	}

	b.Reset()
	for i := range 65 {
		fmt.Fprintf(&b, "dst=10.0.0.%d iface=eth%d\n", i, i)
	}
	_, err = Compile(mustFile(t, b.String()))
	want = "line 65: iface=eth64 is a distinct iface glob past the 64 a set may name"
	if err == nil || err.Error() != want {
		t.Errorf("65 iface globs: %v, want %s", err, want)
	}
	// The same glob twice is one group.
	c, err = Compile(mustFile(t, "iface=eth* proto=udp\niface=eth* proto=tcp\n"))
	if err != nil || c.Rules[0].IfaceGroup != 1 || c.Rules[1].IfaceGroup != 1 || c.IfaceGlobs[1] != "" {
		t.Errorf("one glob twice: %+v %v", c, err)
	}
}

func TestCompileEmpty(t *testing.T) {
	c, err := Compile(Set{})
	if err != nil {
		t.Fatal(err)
	}
	if c.NRules != 0 || c.HasSrc != 0 || c.HasDst != 0 || c.HasIface != 0 || c.Wild.N != 0 {
		t.Errorf("empty set compiled to %+v", c.Config)
	}
	if _, ok := MatchCompiled(c, Packet{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}, c.IfaceGroups); ok {
		t.Error("an empty set matched")
	}
}

// checkTrie compares a trie with want: prefix -> "slot/plen ..." (an empty
// string: an entry without candidates).
func checkTrie(t *testing.T, name string, trie map[LPMKey]Candidates, want map[string]string) {
	t.Helper()
	for p, w := range want {
		cs, ok := trie[KeyOf(netip.MustParsePrefix(p))]
		if !ok {
			t.Errorf("%s: no entry for %s", name, p)
			continue
		}
		if got := dump(cs); got != w {
			t.Errorf("%s: entry %s lists %q, want %q", name, p, got, w)
		}
	}
	if len(trie) != len(want) {
		t.Errorf("%s: %d entries, want %d", name, len(trie), len(want))
	}
}

func dump(cs Candidates) string {
	var out []string
	slots, plens := cs.List()
	for i := range slots {
		out = append(out, fmt.Sprintf("%d/%d", slots[i], plens[i]))
	}
	return strings.Join(out, " ")
}

func name(s Set, slot int, ok bool) string {
	if !ok {
		return "none"
	}
	return s.Rule(slot).ID
}
