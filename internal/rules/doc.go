// Package rules is the measurement rule language: which traffic the flows
// capability measures, skips, samples or aggregates, changed while the
// agent runs. It parses and checks rules and rule files, gives rules
// stable ids, compiles a set into the structures of bpf/rules/rules.h
// (which the datapath copies into its maps), and matches packets the way
// the datapath must, as the oracle of its tests. It needs neither BPF nor
// root.
//
// # Rules
//
// A rule is one line: match terms, key=value separated by spaces, each key
// at most once, then an action.
//
//	id=NAME               [A-Za-z0-9._-], 1 to 64; absent: generated (below)
//	src=CIDR              the source address is in CIDR
//	dst=CIDR              the destination address is in CIDR
//	net=CIDR              the source or the destination is in CIDR
//	proto=P               tcp, udp, icmp, icmp6, sctp or a number 1..255
//	port=P or port=P-Q    the source or the destination port is in P..Q
//	sport=..., dport=...  the source port, the destination port
//	dir=D                 ingress or egress
//	iface=GLOB            the interface's name matches GLOB (path/filepath.Match)
//	flags=LIST            TCP flags, comma-separated, each set or with ! clear:
//	                      fin syn rst psh ack urg ece cwr; unnamed flags are free
//
// At most one of src, dst and net, and one of port, sport and dport. A CIDR
// is IPv4 or IPv6; a bare address is a /32 or /128; host bits set are an
// error ("10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?"), and so
// is an IPv4-mapped IPv6 prefix (write it as IPv4). Ports run from 1 to
// 65535, P <= Q. A port term needs proto tcp, udp or sctp, or no proto: it
// then matches TCP, UDP and SCTP packets only. flags needs proto=tcp or no
// proto, which it then implies. proto=icmp with an IPv6 CIDR, or icmp6 with
// an IPv4 one, is refused: it could never match.
//
// The action comes last; without one, measure:
//
//	measure        a flow, as without rules
//	skip           no flow; the packets are counted in the rule's counters only
//	sample 1:N     1 in N packets measured, N from 2 to 65535 (the kernel
//	               keeps N in 16 bits); the flow records say N
//	aggregate /P   a flow per (source prefix, destination prefix, protocol),
//	               prefixes of length P, 1 to 128; IPv4 packets are
//	               aggregated at min(P, 32), and a rule whose CIDR is IPv4
//	               takes P up to 32 only
//
// # Files
//
// A rule file holds a rule a line; # starts a comment, blank lines are
// ignored. ParseFile reports every problem of a file at once, each naming
// its line and text, with a suggestion for what looks like a typo
// (unknown key "dprot"; did you mean "dport"?). A set holds at most 16384
// rules (RULES_MAX). For example:
//
//	# keep the backup traffic out of the flows
//	id=backup dst=10.8.0.0/16 proto=tcp dport=873 skip
//	# one flow per /24 for the clients of the web tier
//	id=web-clients dst=10.1.0.0/16 dport=443 aggregate /24
//	src=10.1.2.0/24 dir=egress sample 1:100
//	net=2001:db8::/32 iface=eth* measure
//	proto=tcp flags=syn,!ack dir=ingress       # connection attempts only
//	proto=udp port=5353 skip
//
// A rule without an id gets "r-" and the first 8 hex digits of the SHA-256
// of its canonical text without the id: the same rule keeps its id when
// the file is replaced. Rule.String is the canonical text: id, src, dst,
// net, proto, port, sport, dport, dir, iface, flags in that order, CIDRs
// normalized, the action last. Two rules of a set with the same id, or
// with the same match terms (the second could never apply), are an error
// naming both lines; other overlaps are what precedence is for.
//
// # Precedence
//
// The rule that decides a packet is, among the rules that match it, the
// one with the longest prefix length, and among those the first in the set
// (the lowest slot). Prefix lengths compare as the datapath stores them,
// on IPv4-mapped addresses: an IPv4 /P is 96+P, an IPv6 /P is P, a rule
// without a CIDR is 0. So every IPv4 CIDR rule, 0.0.0.0/0 included, comes
// before the rules without a CIDR; ::/0 ties with them, and the slot
// decides. A packet no rule matches is measured. A net= rule matches when
// either address is in its CIDR.
//
// # IPv4 and IPv6
//
// The datapath keys IPv4 addresses IPv4-mapped (::ffff:a.b.c.d), so a short
// IPv6 prefix such as ::/0 or ::/8 covers every IPv4 address. That is not
// what the rule says: an IPv6 CIDR never matches an IPv4 packet, and an
// IPv4 CIDR never matches an IPv6 packet (an IPv6 header carrying an
// IPv4-mapped address is an IPv4 packet here, as it is in the flow key).
// Compile makes the tries say so: an entry lists rules of its own family
// only, and wherever an IPv6 prefix covers ::ffff:0:0/96, the trie gets an
// entry for ::ffff:0:0/96 itself (listing the 0.0.0.0/0 rules, usually
// none) so that an IPv4 address's longest match is never an IPv6 entry.
// The datapath needs no test of its own for it.
//
// # Compiled form
//
// Compile produces the values of rules.h's maps for one of the two
// buffers: the rules by slot (RuleEntry), the two LPM tries (Src for src=
// and net= rules, Dst for dst= and net= rules) whose entries list every
// rule covering the entry's prefix longest first, and the rules without a
// CIDR (Config.Wild). Since the datapath tries the wild rules only when no
// CIDR rule matched, the entries listing a ::/0 rule (length 0, as the wild
// rules) also list the wild rules of lower slots, so that the slot decides
// that tie as precedence says. MatchCompiled runs the datapath's algorithm
// on these values; Set.Match is precedence by definition; a property test
// holds the two equal.
package rules
