package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// Valid rules and their canonical text without the id: order of terms,
// spelling of CIDRs, ports and flags, implied proto and default action.
func TestParseRuleValid(t *testing.T) {
	cases := []struct{ in, want string }{
		{"measure", "measure"},
		{"skip", "skip"},
		{"dport=443 proto=tcp dst=10.0.0.0/8 skip", "dst=10.0.0.0/8 proto=tcp dport=443 skip"},
		{"src=10.1.2.3", "src=10.1.2.3/32 measure"},
		{"src=2001:DB8::1", "src=2001:db8::1/128 measure"},
		{"net=2001:db8::/32 sample 1:100", "net=2001:db8::/32 sample 1:100"},
		{"port=80-80", "port=80 measure"},
		{"sport=1024-65535 proto=udp", "proto=udp sport=1024-65535 measure"},
		{"proto=sctp dport=1", "proto=sctp dport=1 measure"},
		{"proto=47", "proto=47 measure"},
		{"proto=6", "proto=tcp measure"},
		{"flags=ack,!syn", "proto=tcp flags=!syn,ack measure"},
		{"flags=cwr,fin,ece,urg,psh,rst,syn,ack", "proto=tcp flags=fin,syn,rst,psh,ack,urg,ece,cwr measure"},
		{"iface=eth[0-3] dir=egress", "dir=egress iface=eth[0-3] measure"},
		{"dir=ingress   aggregate   /8", "dir=ingress aggregate /8"},
		{"net=::/0 aggregate /128", "net=::/0 aggregate /128"},
		{"dst=0.0.0.0/0 aggregate /32", "dst=0.0.0.0/0 aggregate /32"},
		{"id=web.1_x-Y port=8080 # a comment", "port=8080 measure"},
		{"sample 1:65535", "sample 1:65535"},
		{"proto=icmp6 net=fe80::/10", "net=fe80::/10 proto=icmp6 measure"},
	}
	for _, c := range cases {
		in := c.in
		r, err := ParseRule(in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", in, err)
			continue
		}
		if got := r.canonical(); got != c.want {
			t.Errorf("ParseRule(%q) = %q, want %q", in, got, c.want)
		}
		wantID := r.GeneratedID()
		if strings.HasPrefix(in, "id=") {
			wantID, _, _ = strings.Cut(strings.TrimPrefix(in, "id="), " ")
		}
		if r.ID != wantID {
			t.Errorf("ParseRule(%q).ID = %q, want %q", in, r.ID, wantID)
		}
		back, err := ParseRule(r.String())
		if err != nil || back != r {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", r.String(), back, err, r)
		}
	}
}

// Every rejected rule must say what is wrong with which token.
func TestParseRuleErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", `empty rule`},
		{"# only a comment", `empty rule`},
		{"dprot=80 skip", `unknown key "dprot"; did you mean "dport"?`},
		{"scr=10.0.0.0/8", `unknown key "scr"; did you mean "src"?`},
		{"color=red", `unknown key "color" (want one of id, src, dst, net, proto, port, sport, dport, dir, iface, flags)`},
		{"port=80 skp", `unknown action "skp"; did you mean "skip"?`},
		{"port=80 agregate /24", `unknown action "agregate"; did you mean "aggregate"?`},
		{"port=80 drop", `unknown action "drop" (want one of measure, skip, sample, aggregate)`},
		{"dport 80", `"dport" is a key: write dport=VALUE`},
		{"skip dport=80", `match term "dport=80" after the action: the action comes last`},
		{"skip measure", `"measure" after the action: one action, last`},
		{"src=10.0.0.1/8", `src=10.0.0.1/8: 10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?`},
		{"dst=2001:db8::1/32", `dst=2001:db8::1/32: 2001:db8::1/32 has host bits set; did you mean 2001:db8::/32?`},
		{"src=::ffff:10.0.0.0/104", `src=::ffff:10.0.0.0/104: ::ffff:10.0.0.0/104 is IPv4-mapped; write it as 10.0.0.0/8`},
		{"src=::ffff:10.0.0.1", `src=::ffff:10.0.0.1: ::ffff:10.0.0.1 is IPv4-mapped; write it as 10.0.0.1/32`},
		{"src=fe80::1%eth0", `src=fe80::1%eth0: fe80::1%eth0: a zone has no place in a rule`},
		{"src=10.0.0.0/33", `src=10.0.0.0/33: "10.0.0.0/33" is not a CIDR`},
		{"src=example.com", `src=example.com: "example.com" is not an address or CIDR`},
		{"src=10.0.0.0/8 dst=10.0.0.0/8", `"src=10.0.0.0/8" and "dst=10.0.0.0/8": at most one of src=, dst=, net= (net= matches either address)`},
		{"sport=1 dport=2", `"sport=1" and "dport=2": at most one of port=, sport=, dport= (port= matches either port)`},
		{"port=1 port=2", `"port=1" and "port=2": key "port" given twice`},
		{"proto=tpc", `proto=tpc: unknown protocol "tpc"; did you mean "tcp"?`},
		{"proto=0", `proto=0: protocol 0: leave proto out to match any protocol`},
		{"proto=256", `proto=256: unknown protocol "256" (want one of tcp, udp, icmp, icmp6, sctp)`},
		{"port=0", `port=0: "0": want a port P or range P-Q, from 1 to 65535`},
		{"port=65536", `port=65536: "65536": want a port P or range P-Q, from 1 to 65535`},
		{"port=90-80", `port=90-80: "90-80": range ends before it starts`},
		{"port=http", `port=http: "http": want a port P or range P-Q, from 1 to 65535`},
		{"proto=icmp dport=80", `"dport=80" needs proto tcp, udp or sctp (or no proto), not "proto=icmp"`},
		{"proto=udp flags=syn", `"flags=syn" needs proto=tcp (or no proto), not "proto=udp"`},
		{"flags=syn,sny", `flags=syn,sny: unknown TCP flag "sny"; did you mean "syn"?`},
		{"flags=syn,!syn", `flags=syn,!syn: flag "syn" named twice`},
		{"flags=", `flags=: an empty flag`},
		{"dir=ingres", `dir=ingres: unknown direction "ingres"; did you mean "ingress"?`},
		{"iface=eth[", `iface=eth[: iface glob "eth[": syntax error in pattern`},
		{"id=a/b", `id=a/b: id "a/b": want 1 to 64 of A-Z a-z 0-9 . _ -`},
		{"id=" + strings.Repeat("x", 65), `id=` + strings.Repeat("x", 65) + `: id "` + strings.Repeat("x", 65) + `": want 1 to 64 of A-Z a-z 0-9 . _ -`},
		{"id=", `id=: id "": want 1 to 64 of A-Z a-z 0-9 . _ -`},
		{"sample", `sample needs 1:N (N from 2 to 65535)`},
		{"sample 1:1", `sample 1:1: want 1:N, N from 2 to 65535`},
		{"sample 1:65536", `sample 1:65536: want 1:N, N from 2 to 65535`},
		{"sample 2:10", `sample 2:10: want 1:N, N from 2 to 65535`},
		{"aggregate", `aggregate needs /P (P from 1 to 128)`},
		{"aggregate 24", `aggregate 24: want /P, P from 1 to 128`},
		{"aggregate /129", `aggregate /129: want /P, P from 1 to 128`},
		{"aggregate /0", `aggregate /0: want /P, P from 1 to 128`},
		{"src=10.0.0.0/8 aggregate /33", `aggregate /33: the rule's CIDR 10.0.0.0/8 is IPv4, so P must be 1 to 32`},
		{"dst=2001:db8::/32 proto=icmp", `proto=icmp never matches IPv6 (2001:db8::/32); use proto=icmp6`},
		{"dst=10.0.0.0/8 proto=icmp6", `proto=icmp6 never matches IPv4 (10.0.0.0/8); use proto=icmp`},
		// Every token problem of a rule, not just the first.
		{"dprot=80 proto=tpc", `unknown key "dprot"; did you mean "dport"?` + "\n" + `proto=tpc: unknown protocol "tpc"; did you mean "tcp"?`},
	}
	for _, c := range cases {
		_, err := ParseRule(c.in)
		if err == nil {
			t.Errorf("ParseRule(%q) succeeded, want %s", c.in, c.want)
			continue
		}
		var le *LineError
		if !errors.As(err, &le) || le.Line != 0 {
			t.Errorf("ParseRule(%q): %T %v, want a *LineError without a line", c.in, err, err)
			continue
		}
		if got := le.Err.Error(); got != c.want {
			t.Errorf("ParseRule(%q):\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

// A file's errors: all of them, in line order, each with its line number
// and text, including the set-level ones that name two lines.
func TestParseFileErrors(t *testing.T) {
	file := strings.Join([]string{
		"# rules for the lab",                   // 1
		"",                                      // 2
		"id=web dst=10.1.0.0/16 dport=443 skip", // 3
		"dprot=80 skip   # typo",                // 4
		"src=10.0.0.1/8",                        // 5
		"id=web dst=10.2.0.0/16 measure",        // 6
		"   ",                                   // 7
		"dport=443 dst=10.1.0.0/16 sample 1:10", // 8: same terms as 3
		"proto=udp port=53 skip",                // 9
		"proto=udp port=53 skip",                // 10: same id and terms as 9
		"dst=10.3.0.0/16 measure id=x",          // 11
		"net=2001:db8::/32 proto=tcp flags=syn,!ack, ", // 12
	}, "\n")
	_, err := ParseFile(strings.NewReader(file))
	if err == nil {
		t.Fatal("ParseFile succeeded")
	}
	id53 := mustRule(t, "proto=udp port=53 skip").ID
	want := []string{
		`line 4 "dprot=80 skip": unknown key "dprot"; did you mean "dport"?`,
		`line 5 "src=10.0.0.1/8": src=10.0.0.1/8: 10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?`,
		`line 6 "id=web dst=10.2.0.0/16 measure": id "web" is already used by line 3`,
		`line 8 "dport=443 dst=10.1.0.0/16 sample 1:10": the same match terms as line 3, which comes first: this rule could never apply`,
		`line 10 "proto=udp port=53 skip": id "` + id53 + `" is already used by line 9`,
		`line 10 "proto=udp port=53 skip": the same match terms as line 9, which comes first: this rule could never apply`,
		`line 11 "dst=10.3.0.0/16 measure id=x": match term "id=x" after the action: the action comes last`,
		`line 12 "net=2001:db8::/32 proto=tcp flags=syn,!ack,": flags=syn,!ack,: an empty flag`,
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("ParseFile errors:\n got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	var lines []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var le *LineError
		if !errors.As(e, &le) {
			t.Fatalf("%T %v is not a *LineError", e, e)
		}
		lines = append(lines, le.Line)
	}
	if fmt.Sprint(lines) != "[4 5 6 8 10 10 11 12]" {
		t.Errorf("error lines %v", lines)
	}
}

func TestParseFileValid(t *testing.T) {
	file := "# header\n\nid=a dst=10.0.0.0/8 skip\n  \nproto=udp # dns and all\nnet=::/0 sample 1:4\n"
	s, err := ParseFile(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 {
		t.Fatalf("%d rules, want 3", s.Len())
	}
	for i, line := range []int{3, 5, 6} {
		if s.Line(i) != line {
			t.Errorf("rule %d: line %d, want %d", i, s.Line(i), line)
		}
	}
	if s.Rule(0).ID != "a" || s.Rule(1).canonical() != "proto=udp measure" || s.Rule(2).Prefix != netip.MustParsePrefix("::/0") {
		t.Errorf("rules: %v", s.Rules())
	}
	// The set's text is a rule file that gives the same set.
	back, err := ParseFile(strings.NewReader(s.String()))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(back.Rules()) != fmt.Sprint(s.Rules()) {
		t.Errorf("reparsed %v, want %v", back.Rules(), s.Rules())
	}
}

func TestParseFileLongLine(t *testing.T) {
	_, err := ParseFile(strings.NewReader("skip\n" + strings.Repeat("x", maxLineLen+1) + "\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2: ") {
		t.Errorf("err = %v, want one naming line 2", err)
	}
}

// The examples of the package documentation are valid, and stay so.
func TestDocExample(t *testing.T) {
	file := `
	# keep the backup traffic out of the flows
	id=backup dst=10.8.0.0/16 proto=tcp dport=873 skip
	# one flow per /24 for the clients of the web tier
	id=web-clients dst=10.1.0.0/16 dport=443 aggregate /24
	src=10.1.2.0/24 dir=egress sample 1:100
	net=2001:db8::/32 iface=eth* measure
	proto=tcp flags=syn,!ack dir=ingress       # connection attempts only
	proto=udp port=5353 skip
`
	s, err := ParseFile(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 6 {
		t.Fatalf("%d rules", s.Len())
	}
	if _, err := Compile(s); err != nil {
		t.Fatal(err)
	}
}

func TestSuggest(t *testing.T) {
	for w, want := range map[string]string{
		"dprot": "dport", "prot": "proto", "prto": "proto", "dprt": "dport", "iface": "iface", "ifcae": "iface",
		"flag": "flags", "sprot": "sport", "SRC": "src", "Dport": "dport", "x": "", "zzzz": "", "destination": "",
	} {
		if got := suggest(w, keys); got != want {
			t.Errorf("suggest(%q) = %q, want %q", w, got, want)
		}
	}
}

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
