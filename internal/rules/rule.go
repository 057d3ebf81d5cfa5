package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
)

// Limits of bpf/rules/rules.h: past them the datapath cannot hold a set.
const (
	// MaxRules is RULES_MAX, the rule slots of one set.
	MaxRules = 16384
	// MaxCandidates is RULES_CANDIDATES: the rules one prefix entry lists,
	// and the rules without a CIDR.
	MaxCandidates = 32
	// MaxIfaceGroups is the number of distinct iface globs a set may name:
	// one bit each in the kernel's per-interface 64-bit mask.
	MaxIfaceGroups = 64
	// maxIDLen and maxIfaceLen bound what a user can make the agent hold
	// and print; an interface name is at most 15 bytes anyway.
	maxIDLen    = 64
	maxIfaceLen = 64
)

// Side says which address of a packet a rule's CIDR is matched against.
type Side uint8

const (
	SideNone Side = iota // no CIDR: any address
	SideSrc              // src=
	SideDst              // dst=
	SideNet              // net=: the source or the destination
)

// PortSide is enum rule_port_side: which port a port term applies to.
type PortSide uint8

const (
	PortEither PortSide = 0 // port=
	PortSrc    PortSide = 1 // sport=
	PortDst    PortSide = 2 // dport=
)

// Direction is struct rule's direction field.
type Direction uint8

const (
	DirBoth    Direction = 0
	DirIngress Direction = 1
	DirEgress  Direction = 2
)

// Action is enum rule_action: what happens to the packets a rule decides.
type Action uint8

const (
	ActionMeasure   Action = 0
	ActionSkip      Action = 1
	ActionSample    Action = 2
	ActionAggregate Action = 3
)

// IP protocol numbers the language names.
const (
	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
	ProtoSCTP   = 132
)

// TCP flag bits, as in byte 13 of the TCP header.
const (
	FlagFIN = 1 << iota
	FlagSYN
	FlagRST
	FlagPSH
	FlagACK
	FlagURG
	FlagECE
	FlagCWR
)

// flagNames is indexed by bit number, which is also the canonical order.
var flagNames = [8]string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"}

// protoNames holds the names the language accepts and prints.
var protoNames = []struct {
	name string
	num  uint8
}{
	{"tcp", ProtoTCP}, {"udp", ProtoUDP}, {"icmp", ProtoICMP},
	{"icmp6", ProtoICMPv6}, {"sctp", ProtoSCTP},
}

// Rule is one measurement rule. The zero value of every match field matches
// anything; a Rule is only ever handed out valid (by ParseRule, ParseFile and
// the Set operations, which check rules built by hand).
//
// Rule is comparable: two rules are the same rule when they are ==.
type Rule struct {
	ID string

	Side   Side
	Prefix netip.Prefix // set iff Side != SideNone; masked, IPv4 as IPv4

	Proto uint8 // 0: any

	PortSide       PortSide
	PortLo, PortHi uint16 // 0, 0: any port

	Dir   Direction
	Iface string // filepath.Match glob; "": any interface

	FlagsMask, FlagsValue uint8 // TCP packets whose flags&mask == value

	Action    Action
	SampleN   uint16 // ActionSample: 1 in SampleN
	AggPrefix uint8  // ActionAggregate: prefix length
}

// Plen is the rule's prefix length as the datapath compares it: that of the
// IPv4-mapped address for an IPv4 CIDR (96 + P), P for an IPv6 one, 0
// without a CIDR.
func (r Rule) Plen() uint8 {
	if r.Side == SideNone {
		return 0
	}
	if r.Prefix.Addr().Is4() {
		return uint8(96 + r.Prefix.Bits())
	}
	return uint8(r.Prefix.Bits())
}

// String is the rule's canonical text, id first and action last; ParseRule
// gives the same rule back.
func (r Rule) String() string {
	return "id=" + r.ID + " " + r.canonical()
}

// canonical is the rule's text without its id: the match terms in a fixed
// order, then the action. It names what the rule does, so it is what the
// generated id hashes and what duplicate detection compares.
func (r Rule) canonical() string {
	t := r.matchTerms()
	return strings.Join(append(t, r.actionText()), " ")
}

func (r Rule) matchTerms() []string {
	var t []string
	switch r.Side {
	case SideSrc:
		t = append(t, "src="+r.Prefix.String())
	case SideDst:
		t = append(t, "dst="+r.Prefix.String())
	case SideNet:
		t = append(t, "net="+r.Prefix.String())
	}
	if r.Proto != 0 {
		t = append(t, "proto="+protoText(r.Proto))
	}
	if r.PortLo != 0 {
		key := [...]string{PortEither: "port", PortSrc: "sport", PortDst: "dport"}[r.PortSide]
		v := strconv.Itoa(int(r.PortLo))
		if r.PortHi != r.PortLo {
			v += "-" + strconv.Itoa(int(r.PortHi))
		}
		t = append(t, key+"="+v)
	}
	switch r.Dir {
	case DirIngress:
		t = append(t, "dir=ingress")
	case DirEgress:
		t = append(t, "dir=egress")
	}
	if r.Iface != "" {
		t = append(t, "iface="+r.Iface)
	}
	if r.FlagsMask != 0 {
		t = append(t, "flags="+flagsText(r.FlagsMask, r.FlagsValue))
	}
	return t
}

func (r Rule) actionText() string {
	switch r.Action {
	case ActionSkip:
		return "skip"
	case ActionSample:
		return "sample 1:" + strconv.Itoa(int(r.SampleN))
	case ActionAggregate:
		return "aggregate /" + strconv.Itoa(int(r.AggPrefix))
	}
	return "measure"
}

// matchKey identifies what a rule matches, whatever it does: two rules of a
// set with the same key would shadow one another.
func (r Rule) matchKey() string {
	return strings.Join(r.matchTerms(), " ")
}

// GeneratedID is the id a rule gets when it names none: "r-" and the first 8
// hex digits of the SHA-256 of its canonical text without the id, so that
// the same rule keeps its id when a file is replaced.
func (r Rule) GeneratedID() string {
	sum := sha256.Sum256([]byte(r.canonical()))
	return "r-" + hex.EncodeToString(sum[:4])
}

func protoText(p uint8) string {
	for _, n := range protoNames {
		if n.num == p {
			return n.name
		}
	}
	return strconv.Itoa(int(p))
}

func flagsText(mask, value uint8) string {
	var parts []string
	for bit, name := range flagNames {
		b := uint8(1) << bit
		if mask&b == 0 {
			continue
		}
		if value&b == 0 {
			name = "!" + name
		}
		parts = append(parts, name)
	}
	return strings.Join(parts, ",")
}

func portProto(p uint8) bool {
	return p == 0 || p == ProtoTCP || p == ProtoUDP || p == ProtoSCTP
}

// normalize checks a rule and returns it in the form a Set holds: flags
// without a protocol imply TCP, a missing id is generated. The checks are
// those of the language, so that a rule built by hand (or decoded from JSON)
// cannot hold what a rule file could not say.
func (r Rule) normalize() (Rule, error) {
	if r.ID != "" {
		if err := checkID(r.ID); err != nil {
			return r, err
		}
	}
	switch r.Side {
	case SideNone:
		if r.Prefix.IsValid() {
			return r, errors.New("a prefix without src, dst or net")
		}
	case SideSrc, SideDst, SideNet:
		if err := checkPrefix(r.Prefix, r.Prefix.String()); err != nil {
			return r, err
		}
	default:
		return r, fmt.Errorf("unknown side %d", r.Side)
	}
	if r.Side != SideNone {
		if r.Proto == ProtoICMP && r.Prefix.Addr().Is6() {
			return r, fmt.Errorf("proto=icmp never matches IPv6 (%s); use proto=icmp6", r.Prefix)
		}
		if r.Proto == ProtoICMPv6 && r.Prefix.Addr().Is4() {
			return r, fmt.Errorf("proto=icmp6 never matches IPv4 (%s); use proto=icmp", r.Prefix)
		}
	}
	if r.FlagsMask != 0 {
		if r.Proto == 0 {
			r.Proto = ProtoTCP
		}
		if r.Proto != ProtoTCP {
			return r, fmt.Errorf("flags= needs proto=tcp (or no proto), not proto=%s", protoText(r.Proto))
		}
	}
	if r.FlagsValue&^r.FlagsMask != 0 {
		return r, errors.New("flag values outside the flags mask")
	}
	if r.PortLo == 0 && r.PortHi == 0 {
		if r.PortSide != PortEither {
			return r, errors.New("a port side without ports")
		}
	} else {
		if r.PortLo == 0 || r.PortLo > r.PortHi {
			return r, fmt.Errorf("port range %d-%d: want 1 <= P <= Q <= 65535", r.PortLo, r.PortHi)
		}
		if r.PortSide > PortDst {
			return r, fmt.Errorf("unknown port side %d", r.PortSide)
		}
		if !portProto(r.Proto) {
			return r, fmt.Errorf("a port term needs proto tcp, udp or sctp (or no proto), not proto=%s", protoText(r.Proto))
		}
	}
	if r.Dir > DirEgress {
		return r, fmt.Errorf("unknown direction %d", r.Dir)
	}
	if r.Iface != "" {
		if err := checkGlob(r.Iface); err != nil {
			return r, err
		}
	}
	switch r.Action {
	case ActionMeasure, ActionSkip:
		if r.SampleN != 0 || r.AggPrefix != 0 {
			return r, fmt.Errorf("a sampling rate or aggregation prefix with action %s", r.actionText())
		}
	case ActionSample:
		if r.SampleN < 2 {
			return r, fmt.Errorf("sample 1:%d: N must be 2 to 65535 (1:1 is measure)", r.SampleN)
		}
		if r.AggPrefix != 0 {
			return r, errors.New("an aggregation prefix with action sample")
		}
	case ActionAggregate:
		if r.SampleN != 0 {
			return r, errors.New("a sampling rate with action aggregate")
		}
		// 0 is a flow's in the kernel's key: an aggregate has P >= 1.
		if r.AggPrefix < 1 || r.AggPrefix > 128 {
			return r, fmt.Errorf("aggregate /%d: P must be 1 to 128", r.AggPrefix)
		}
		if r.Side != SideNone && r.Prefix.Addr().Is4() && r.AggPrefix > 32 {
			return r, fmt.Errorf("aggregate /%d: the rule's CIDR %s is IPv4, so P must be 1 to 32", r.AggPrefix, r.Prefix)
		}
	default:
		return r, fmt.Errorf("unknown action %d", r.Action)
	}
	if r.ID == "" {
		r.ID = r.GeneratedID()
	}
	return r, nil
}

func checkID(id string) error {
	ok := len(id) >= 1 && len(id) <= maxIDLen
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("id %q: want 1 to %d of A-Z a-z 0-9 . _ -", id, maxIDLen)
	}
	return nil
}

// checkPrefix refuses what the datapath could not tell apart from something
// else: host bits (the trie would drop them silently), zones, and
// IPv4-mapped IPv6 prefixes (an IPv4 packet's key is IPv4-mapped, so such a
// prefix is an IPv4 CIDR in disguise; one spelling keeps ids and duplicates
// honest). text is the prefix as the user wrote it.
func checkPrefix(p netip.Prefix, text string) error {
	if !p.IsValid() {
		return fmt.Errorf("%q is not a CIDR", text)
	}
	if p.Addr().Zone() != "" {
		return fmt.Errorf("%s: a zone has no place in a rule", text)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		v4 := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		return fmt.Errorf("%s is IPv4-mapped; write it as %s", text, v4.Masked())
	}
	if m := p.Masked(); m != p {
		return fmt.Errorf("%s has host bits set; did you mean %s?", text, m)
	}
	return nil
}

func checkGlob(g string) error {
	if len(g) > maxIfaceLen {
		return fmt.Errorf("iface glob %q is longer than %d bytes", g, maxIfaceLen)
	}
	// The canonical text must parse back: no space or comment inside.
	if strings.ContainsAny(g, " \t\r\n#") {
		return fmt.Errorf("iface glob %q holds a space or '#'", g)
	}
	if _, err := filepath.Match(g, ""); err != nil {
		return fmt.Errorf("iface glob %q: %w", g, err)
	}
	return nil
}
