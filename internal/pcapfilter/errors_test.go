package pcapfilter

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every rejected expression must come back as an *Error whose message
// names the expression and the construct, so a user can act on it.
func TestCompileErrors(t *testing.T) {
	cases := []struct {
		expr string
		want string // the whole message after `pcap filter "expr": `
	}{
		{"vlan 7", `"vlan" is not supported: at TC the outer VLAN tag has been moved out of the frame into the skb's metadata, so an in-frame test would never match it (see docs/capture.md)`},
		{"tcp and vlan", `"vlan" is not supported: at TC the outer VLAN tag has been moved out of the frame into the skb's metadata, so an in-frame test would never match it (see docs/capture.md)`},
		{"mpls 100 and ip", `"mpls" is not supported: encapsulation keywords move the offsets of everything after them; not implemented`},
		{"inbound", `"inbound" is not supported: the direction is chosen by the hook the capture is attached to (ingress or egress), not by the filter`},
		{"gateway router1", `"gateway" is not supported: it needs a name lookup (DNS or /etc files) that a filter compiled in the agent does not do; use addresses`},
		{"ip6 protochain 6", `"protochain" is not supported: it walks the IPv6 extension header chain with a backward jump, which cBPF has and this compiler does not`},
		{"esp", `"esp" is not supported: use its protocol number: ` + "`ip proto N`, `ip6 proto N` or `proto N`"},
		{"host example.com", `"example.com" is not an address: names are not resolved (no DNS or /etc/hosts in the agent), use an IPv4 or IPv6 address at offset 5`},
		{"port http", `"http" is not a port number: service names are not resolved, use the number at offset 5`},
		{"port 70000", `illegal port number 70000 > 65535 at offset 5`},
		{"portrange 80", `portrange needs two ports joined by '-', got "80" at offset 10`},
		{"net 10.1.2.3/8", `non-network bits set in "10.1.2.3/8" at offset 4`},
		{"net 10.0.0.0 mask 255.0.255.0", `mask 255.0.255.0 is not contiguous at offset 18`},
		{"tcp port", `tcp port needs an address, network or port, got end of expression at end of expression`},
		{"tcp[13", `expected "]", got end of expression at end of expression`},
		{"(tcp or udp", `expected ")", got end of expression at end of expression`},
		{"ip[0] / 0 = 1", `division by zero at offset 6`},
		{"ip[0] << 32 = 0", `shift by 32: more than 31 bits at offset 6`},
		{"tcp[70000] = 1", `offset 70000 into tcp is past the largest packet at offset 0`},
		{"tcp[13:3] = 1", `data size must be 1, 2 or 4, got "3" at offset 7`},
		{"10.0.0.1", `"10.0.0.1" needs a qualifier such as host, net or port before it at offset 0`},
		{"tcp or 80", `"80" needs a qualifier such as host, net or port before it at offset 7`},
		{"ether proto 100", `ether proto 100 is an 802.3 length (up to 1500), which is not supported at offset 12`},
		{"ip broadcast", "ip broadcast needs the interface's netmask, which a filter compiled in the agent does not know; use `ip dst 10.0.0.255` or `ether broadcast` at offset 3"},
		{"ip6 host 10.0.0.1", `'ip6' modifier applied to ip host at offset 9`},
		{"ip host 2001:db8::1", `'ip' modifier applied to ip6 host at offset 8`},
		{"tcp host 10.0.0.1", `'tcp' modifier applied to host at offset 9`},
		{"ether host 10.0.0.1", `ether host needs a MAC address, got "10.0.0.1" at offset 11`},
		{"ip port 80", `'ip' modifier applied to port at offset 8`},
		{"ip proto foo", `unknown ip proto protocol "foo" at offset 9`},
		{"tcp port 80 $", `unexpected character '$' at offset 12`},
		{"tcp tcp", `unexpected "tcp" at offset 4`},
		{"ip[0] = ", `expected a number or packet data, got end of expression at end of expression`},
		{"len", `expected a comparison (=, !=, <, <=, >, >=), got end of expression at end of expression`},
		{"greater x", `greater needs a number, got "x" at offset 8`},
		{"host 10.0.0.1/33", `bad prefix length "33" for 10.0.0.1 at offset 14`},
		{strings.Repeat("tcp or ", 700) + "udp", `expression is 4903 bytes long, more than 4096`},
	}
	for _, c := range cases {
		t.Run(c.expr[:min(len(c.expr), 40)], func(t *testing.T) {
			f, err := Compile(c.expr)
			if err == nil {
				t.Fatalf("Compile(%q) = %v, want an error", c.expr, f.CBPF())
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			if ce.Expr != strings.TrimSpace(c.expr) {
				t.Errorf("Error.Expr = %q", ce.Expr)
			}
			want := `pcap filter "` + strings.TrimSpace(c.expr) + `": ` + c.want
			if len(c.expr) > maxExprLen {
				want = `pcap filter "` + c.expr + `": ` + c.want
			}
			if err.Error() != want {
				t.Errorf("error:\n got %s\nwant %s", err, want)
			}
		})
	}
}

// Accepted forms that are easy to get wrong in a parser, beyond the ones
// TestAgainstTcpdump holds to tcpdump's verdicts.
func TestCompileAccepts(t *testing.T) {
	for _, e := range []string{
		"src or dst host 10.0.0.1",
		"src and dst net 10.0.0.0/8",
		"dst or src port 1",
		"host 10.0.0.1 or (10.0.0.2 or 10.0.0.3)",
		"port 80 or (443)",
		"port 80 or ((443) or 22)",
		"port 80 or not 443",
		"ether src 02-00-00-00-00-0a",
		"ether dst 0200.0000.000b",
		"host 02:00:00:00:00:0a",
		"ip6 net ::/0",
		"net 0.0.0.0/0",
		"ether proto \\ip6 && !udp || arp",
		"-ip[0] + 1 = 0",
		"(((tcp)))",
		"tcp[(tcp[12] >> 4) * 4] = 0x47",
		"udp[4:2] - 8 > 0",
		"link[0] & 1 = 1",
		"  tcp  ",
	} {
		if _, err := Compile(e); err != nil {
			t.Errorf("Compile(%q): %v", e, err)
		}
	}
}

func TestEmptyMatchesAll(t *testing.T) {
	for _, e := range []string{"", "  \t"} {
		f, err := Compile(e)
		if err != nil {
			t.Fatal(err)
		}
		if !f.MatchesAll() || f.String() != "" || f.CBPF() != nil {
			t.Errorf("Compile(%q): MatchesAll %v, String %q, CBPF %v", e, f.MatchesAll(), f.String(), f.CBPF())
		}
	}
	f, err := Compile(" tcp port 80 ")
	if err != nil {
		t.Fatal(err)
	}
	if f.MatchesAll() || f.String() != "tcp port 80" {
		t.Errorf("MatchesAll %v, String %q", f.MatchesAll(), f.String())
	}
}

// A large filter needs conditional jumps longer than cBPF's 255: they must
// be laid out as jumps over long unconditional jumps, and still agree.
func TestLongJumps(t *testing.T) {
	var parts []string
	for i := 0; i < 40; i++ {
		parts = append(parts, "port "+strconv.Itoa(10000+i))
	}
	e := "not (" + strings.Join(parts, " or ") + ") and tcp"
	f, err := Compile(e)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.CBPF()); n < 600 {
		t.Fatalf("%d instructions: too few to need long jumps", n)
	}
	frames, _ := buildFrames(t)
	want := vmVerdicts(t, mustCompile(t, "tcp"), frames)
	if got := vmVerdicts(t, f, frames); !slices.Equal(got, want) {
		t.Errorf("cBPF matches %v, want %v", got, want)
	}
}

func mustCompile(t testing.TB, e string) *Filter {
	t.Helper()
	f, err := Compile(e)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
