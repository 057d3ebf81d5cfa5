package rules

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// The generated id hashes the canonical text without the id, so it does
// not depend on spelling, and changes with what the rule does.
func TestGeneratedID(t *testing.T) {
	// sha256("dst=10.0.0.0/8 proto=tcp dport=443 skip") starts df21d10b.
	base := mustRule(t, "dst=10.0.0.0/8 proto=tcp dport=443 skip")
	if base.ID != "r-df21d10b" {
		t.Errorf("id %q, want r-df21d10b", base.ID)
	}
	if r := mustRule(t, "measure"); r.ID != "r-15016616" {
		t.Errorf("id of measure %q, want r-15016616", r.ID)
	}
	for _, same := range []string{
		"dport=443 dst=10.0.0.0/8 proto=6 skip",
		"  proto=tcp   dst=10.0.0.0/8 dport=443-443 skip # comment",
		"dst=10.0.0.0/8 proto=tcp dport=443 skip",
	} {
		if r := mustRule(t, same); r.ID != base.ID {
			t.Errorf("%q: id %q, want %q", same, r.ID, base.ID)
		}
	}
	for _, other := range []string{
		"dst=10.0.0.0/8 proto=tcp dport=443 measure",
		"dst=10.0.0.0/8 proto=tcp port=443 skip",
		"src=10.0.0.0/8 proto=tcp dport=443 skip",
		"dst=10.0.0.0/9 proto=tcp dport=443 skip",
	} {
		if r := mustRule(t, other); r.ID == base.ID {
			t.Errorf("%q has the id of %q", other, base)
		}
	}
	// An id given is kept, and is no part of the hash.
	if r := mustRule(t, "id=x dst=10.0.0.0/8 proto=tcp dport=443 skip"); r.ID != "x" || r.GeneratedID() != base.ID {
		t.Errorf("given id: %q, generated %q", r.ID, r.GeneratedID())
	}
	// The same file read twice, or with a rule inserted before, keeps ids.
	a := mustFile(t, "proto=udp skip\ndst=10.0.0.0/8 measure\n")
	b := mustFile(t, "dport=22 skip\nproto=udp skip\ndst=10.0.0.0/8 measure\n")
	if a.Rule(0).ID != b.Rule(1).ID || a.Rule(1).ID != b.Rule(2).ID {
		t.Errorf("ids moved: %v / %v", a.Rules(), b.Rules())
	}
}

func TestNewSetChecks(t *testing.T) {
	p := netip.MustParsePrefix
	cases := []struct {
		rules []Rule
		want  string
	}{
		{[]Rule{{Side: SideSrc, Prefix: p("10.0.0.1/8")}}, `10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?`},
		{[]Rule{{Prefix: p("10.0.0.0/8")}}, `a prefix without src, dst or net`},
		{[]Rule{{PortLo: 9, PortHi: 8}}, `port range 9-8: want 1 <= P <= Q <= 65535`},
		{[]Rule{{PortLo: 80, PortHi: 80, Proto: ProtoICMP}}, `a port term needs proto tcp, udp or sctp (or no proto), not proto=icmp`},
		{[]Rule{{FlagsMask: FlagSYN, FlagsValue: FlagSYN, Proto: ProtoUDP}}, `flags= needs proto=tcp (or no proto), not proto=udp`},
		{[]Rule{{FlagsMask: FlagSYN, FlagsValue: FlagACK}}, `flag values outside the flags mask`},
		{[]Rule{{Action: ActionSample, SampleN: 1}}, `sample 1:1: N must be 2 to 65535 (1:1 is measure)`},
		{[]Rule{{Action: ActionSkip, SampleN: 10}}, `a sampling rate or aggregation prefix with action skip`},
		{[]Rule{{Action: ActionAggregate, AggPrefix: 129}}, `aggregate /129: P must be 1 to 128`},
		{[]Rule{{Action: 4}}, `unknown action 4`},
		{[]Rule{{Dir: 3}}, `unknown direction 3`},
		{[]Rule{{Iface: "a b"}}, `iface glob "a b" holds a space or '#'`},
		{[]Rule{{ID: "x", Proto: 1}, {ID: "x", Proto: 2}}, `id "x" is already used by rule 1 (id=x)`},
		{[]Rule{{Proto: 1}, {Proto: 1, Action: ActionSkip}}, `the same match terms as rule 1 (id=r-`},
	}
	for _, c := range cases {
		_, err := NewSet(c.rules...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewSet(%+v) = %v, want an error with %q", c.rules, err, c.want)
		}
	}
	// Flags alone imply TCP, as in the language.
	s, err := NewSet(Rule{FlagsMask: FlagSYN, FlagsValue: FlagSYN})
	if err != nil || s.Rule(0).Proto != ProtoTCP || s.Rule(0).ID != mustRule(t, "flags=syn").ID {
		t.Errorf("flags alone: %v, %v", s.Rules(), err)
	}
}

func TestSetOps(t *testing.T) {
	s := mustFile(t, "id=a dst=10.0.0.0/8 skip\nid=b proto=udp\n")
	s2, err := s.Add(mustRule(t, "id=c dport=22 sample 1:10"))
	if err != nil {
		t.Fatal(err)
	}
	if ids(s2) != "a b c" || ids(s) != "a b" {
		t.Fatalf("after Add: %s; the old set: %s", ids(s2), ids(s))
	}
	if _, err := s2.Add(mustRule(t, "id=b proto=tcp")); err == nil || err.Error() != `rule "id=b proto=tcp measure": id "b" is already used by line 2` {
		t.Errorf("Add of a taken id: %v", err)
	}
	if _, err := s2.Add(mustRule(t, "id=d proto=udp skip")); err == nil || !strings.Contains(err.Error(), "the same match terms as line 2") {
		t.Errorf("Add of the same terms: %v", err)
	}
	if _, err := s2.Add(Rule{Iface: "x["}); err == nil || !strings.Contains(err.Error(), "syntax error in pattern") {
		t.Errorf("Add of a bad rule: %v", err)
	}
	// A rule without an id gets its generated one.
	s3, err := s2.Add(Rule{Proto: ProtoSCTP})
	if err != nil || s3.Rule(3).ID != mustRule(t, "proto=sctp").ID {
		t.Fatalf("Add without id: %v %v", s3.Rules(), err)
	}

	s4, err := s3.Delete("b")
	if err != nil {
		t.Fatal(err)
	}
	if ids(s4) != "a c "+s3.Rule(3).ID || ids(s3) != "a b c "+s3.Rule(3).ID {
		t.Errorf("after Delete: %s; the old set: %s", ids(s4), ids(s3))
	}
	if slot, ok := s4.Lookup("c"); !ok || slot != 1 {
		t.Errorf("Lookup(c) = %d %v", slot, ok)
	}
	if _, err := s4.Delete("b"); err == nil || err.Error() != `no rule with id "b"` {
		t.Errorf("Delete of an unknown id: %v", err)
	}
	// A deleted id is free again; the old line is not named any more.
	if _, err := s4.Add(mustRule(t, "id=b proto=tcp")); err != nil {
		t.Errorf("Add after Delete: %v", err)
	}

	n := mustFile(t, "id=a dst=10.0.0.0/8 measure\nid=c dport=22 sample 1:10\nproto=icmp\n")
	got, ch := s3.Replace(n)
	if ids(got) != ids(n) {
		t.Errorf("Replace gave %s", ids(got))
	}
	want := Change{
		Added:   []string{mustRule(t, "proto=icmp").ID},
		Removed: []string{"b", s3.Rule(3).ID},
		Changed: []string{"a"},
		Kept:    []string{"c"},
	}
	if fmt.Sprint(ch) != fmt.Sprint(want) {
		t.Errorf("Replace change %+v, want %+v", ch, want)
	}
}

func TestLimits(t *testing.T) {
	var b strings.Builder
	for i := range MaxRules {
		fmt.Fprintf(&b, "dst=10.%d.%d.0/24\n", i/256, i%256)
	}
	s, err := ParseFile(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != MaxRules {
		t.Fatalf("%d rules", s.Len())
	}
	if _, err := s.Add(mustRule(t, "proto=udp")); err == nil || !strings.Contains(err.Error(), "more than 16384 rules (RULES_MAX): the set has 16385") {
		t.Errorf("Add to a full set: %v", err)
	}
	b.WriteString("# one more\nproto=udp\n")
	_, err = ParseFile(strings.NewReader(b.String()))
	if want := `line 16386 "proto=udp": more than 16384 rules (RULES_MAX): the set has 16385`; err == nil || err.Error() != want {
		t.Errorf("file of 16385 rules: %v, want %s", err, want)
	}
	// A full set compiles: one entry each, no candidates beyond their own.
	c, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Dst) != MaxRules || len(c.Src) != 0 || c.HasSrc != 0 || c.HasDst != 1 {
		t.Errorf("compiled: %d dst entries, %d src", len(c.Dst), len(c.Src))
	}
}

func TestJSON(t *testing.T) {
	r := mustRule(t, "id=w net=2001:db8::/32 proto=tcp dport=443-444 dir=egress iface=eth* flags=syn,!ack aggregate /48")
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"w","net":"2001:db8::/32","proto":"tcp","dport":"443-444","dir":"egress","iface":"eth*","flags":"syn,!ack","action":"aggregate","aggregate":48,"text":"id=w net=2001:db8::/32 proto=tcp dport=443-444 dir=egress iface=eth* flags=syn,!ack aggregate /48"}`
	if string(b) != want {
		t.Errorf("Marshal:\n got %s\nwant %s", b, want)
	}
	var back Rule
	if err := json.Unmarshal(b, &back); err != nil || back != r {
		t.Errorf("Unmarshal: %+v %v", back, err)
	}

	s := mustFile(t, "id=a src=10.0.0.0/8 sport=1 skip\nproto=udp sample 1:8\n")
	b, err = json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	id := s.Rule(1).ID
	want = `{"rules":[{"id":"a","src":"10.0.0.0/8","sport":"1","action":"skip","text":"id=a src=10.0.0.0/8 sport=1 skip"},` +
		`{"id":"` + id + `","proto":"udp","action":"sample","sample":8,"text":"id=` + id + ` proto=udp sample 1:8"}]}`
	if string(b) != want {
		t.Errorf("Marshal set:\n got %s\nwant %s", b, want)
	}
	var bs Set
	if err := json.Unmarshal(b, &bs); err != nil || !slices.Equal(bs.Rules(), s.Rules()) {
		t.Errorf("Unmarshal set: %v %v", bs.Rules(), err)
	}
	if b, _ := json.Marshal(Set{}); string(b) != `{"rules":[]}` {
		t.Errorf("empty set: %s", b)
	}

	for in, want := range map[string]string{
		`{"text":"dport=22 skip"}`:                                 mustRule(t, "dport=22 skip").String(),
		`{"id":"x","text":"dport=22 skip"}`:                        "",
		`{"id":"x","text":"id=x dport=22 skip"}`:                   "id=x dport=22 skip",
		`{"dport":"22","action":"skip"}`:                           mustRule(t, "dport=22 skip").String(),
		`{"id":"x"}`:                                               "id=x measure",
		`{"proto":"udp","action":"aggregate","aggregate":24}`:      mustRule(t, "proto=udp aggregate /24").String(),
		`{"dport":"22","action":"skip","text":"dport=22 measure"}`: "",
		`{"dport":"22","action":"sample"}`:                         "",
		`{"action":"aggregate"}`:                                   "",
		`{"action":"skip","sample":3}`:                             "",
		`{"action":"drop"}`:                                        "",
		`{"dprot":"22","action":"skip"}`:                           "", // a typo is not ignored
		`{}`:                                                       "",
		`{"src":"10.0.0.1/8"}`:                                     "",
	} {
		var r Rule
		err := json.Unmarshal([]byte(in), &r)
		switch {
		case want == "" && err == nil:
			t.Errorf("Unmarshal(%s) = %v, want an error", in, r)
		case want != "" && (err != nil || r.String() != want):
			t.Errorf("Unmarshal(%s) = %v, %v; want %s", in, r, err, want)
		}
	}
	if err := json.Unmarshal([]byte(`{"rules":[{"id":"a"},{"id":"a","proto":"udp"}]}`), &bs); err == nil {
		t.Error("a set with an id twice decoded")
	}
}

func ids(s Set) string {
	var out []string
	for _, r := range s.Rules() {
		out = append(out, r.ID)
	}
	return strings.Join(out, " ")
}

func mustFile(t *testing.T, text string) Set {
	t.Helper()
	s, err := ParseFile(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
