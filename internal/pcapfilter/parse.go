package pcapfilter

import (
	"fmt"
	"strings"

	"golang.org/x/net/bpf"
)

// quals are the qualifiers of a primitive (`tcp src port`): the protocol,
// the direction and the type of the id that follows. libpcap carries them
// over to a bare id after `and` or `or`: in `port 80 or 443` the 443 is a
// port too.
type quals struct {
	valid bool   // false where libpcap has none to carry (after `tcp`, a relation, ...)
	proto string // "" or a protocol keyword
	dir   string // "", "src", "dst", "src or dst", "src and dst"
	typ   string // "", "host", "net", "port", "portrange"
}

// parser is a recursive-descent parser for the supported part of the
// pcap-filter language. It builds the predicate tree (node) directly.
type parser struct {
	toks []token
	p    int
	// group marks the '(' tokens whose contents can only be a group of
	// predicates, not arithmetic (see classifyParens).
	group map[int]bool
	// bareParens counts the enclosing parens that failed as arithmetic.
	bareParens int
}

// syntaxError is what the parser returns; Compile adds the expression.
type syntaxError struct {
	pos int
	msg string
}

func (e *syntaxError) Error() string { return e.msg }

func (ps *parser) peek() token { return ps.toks[ps.p] }

func (ps *parser) peekAt(n int) token {
	if ps.p+n < len(ps.toks) {
		return ps.toks[ps.p+n]
	}
	return ps.toks[len(ps.toks)-1]
}

func (ps *parser) next() token {
	t := ps.toks[ps.p]
	if t.kind != tokEOF {
		ps.p++
	}
	return t
}

func (ps *parser) errAt(t token, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if t.kind == tokEOF {
		msg += " at end of expression"
	} else {
		msg += fmt.Sprintf(" at offset %d", t.pos)
	}
	return &syntaxError{pos: t.pos, msg: msg}
}

// isWord reports whether t is the unescaped keyword w.
func isWord(t token, w string) bool { return t.kind == tokWord && !t.escaped && t.text == w }

func isPunct(t token, p string) bool { return t.kind == tokPunct && t.text == p }

func isAnd(t token) bool { return isWord(t, "and") || isPunct(t, "&&") }
func isOr(t token) bool  { return isWord(t, "or") || isPunct(t, "||") }
func isNot(t token) bool { return isWord(t, "not") || isPunct(t, "!") }

// parse parses a whole, non-empty expression.
func (ps *parser) parse() (node, error) {
	ps.classifyParens()
	n, _, err := ps.expr(quals{}, false)
	if err != nil {
		return nil, err
	}
	if t := ps.peek(); t.kind != tokEOF {
		return nil, ps.errAt(t, "unexpected %s", t)
	}
	return n, nil
}

// expr parses terms joined by and/or. libpcap gives `and` and `or` the same
// precedence and associates them to the left: `a or b and c` is
// `(a or b) and c`, which surprises people but is what tcpdump does.
// bare says whether the first term may be a bare id using q.
func (ps *parser) expr(q quals, bare bool) (node, quals, error) {
	l, q, err := ps.term(q, bare)
	if err != nil {
		return nil, q, err
	}
	for {
		t := ps.peek()
		if !isAnd(t) && !isOr(t) {
			return l, q, nil
		}
		ps.next()
		r, rq, err := ps.term(q, true)
		if err != nil {
			return nil, q, err
		}
		if isAnd(t) {
			l = andNode{l, r}
		} else {
			l = orNode{l, r}
		}
		q = rq
	}
}

// term parses one operand of and/or, with its leading nots.
func (ps *parser) term(q quals, bare bool) (node, quals, error) {
	t := ps.peek()
	switch {
	case isNot(t):
		ps.next()
		n, nq, err := ps.term(q, bare)
		if err != nil {
			return nil, q, err
		}
		return notNode{n}, nq, nil
	case isPunct(t, "(") && !ps.group[ps.p] && ps.bareParens == 0:
		// Only arithmetic inside: `(ip[0] & 0xf) > 5`; or, after and/or,
		// parenthesised bare ids: `port 80 or (443)`. Those hold no
		// comparison at any depth, so the parens inside them are not
		// tried as arithmetic again.
		save := ps.p
		n, err := ps.relation()
		if err == nil || !bare || !q.valid {
			return n, quals{}, err
		}
		ps.p = save
		ps.bareParens++
		defer func() { ps.bareParens-- }()
		return ps.term(q, bare)
	case isPunct(t, "("):
		ps.next()
		n, _, err := ps.expr(q, bare)
		if err != nil {
			return nil, q, err
		}
		if c := ps.next(); !isPunct(c, ")") {
			return nil, q, ps.errAt(c, "expected \")\", got %s", c)
		}
		// libpcap's group keeps the qualifiers from before it.
		return n, q, nil
	case ps.startsArith():
		n, err := ps.relation()
		return n, quals{}, err
	case t.kind == tokWord && (t.escaped || !keywords[t.text]):
		if !bare || !q.valid {
			return nil, q, ps.errAt(t, "%s needs a qualifier such as host, net or port before it", t)
		}
		ps.next()
		n, err := ps.primitive(q, t)
		return n, q, err
	}
	return ps.primitiveWithQuals()
}

// classifyParens decides, for each '(', whether it opens arithmetic
// (`(ip[0] & 0xf) > 5`) or a group of predicates (`(tcp or udp)`): a
// paren is a group if anything inside it, at any depth, cannot be part of
// arithmetic, such as a comparison, and/or/not or a primitive. Deciding up
// front keeps parsing linear; trying arithmetic first and backtracking at
// every level made `((((...` quadratic, and a typed filter must not stall
// the agent.
func (ps *parser) classifyParens() {
	ps.group = map[int]bool{}
	var open []int
	for i, t := range ps.toks {
		switch {
		case isPunct(t, "("):
			open = append(open, i)
			continue
		case isPunct(t, ")"):
			if len(open) == 0 {
				continue
			}
			inner := open[len(open)-1]
			open = open[:len(open)-1]
			if ps.group[inner] && len(open) > 0 {
				ps.group[open[len(open)-1]] = true
			}
			continue
		}
		if len(open) > 0 && !ps.arithToken(i) {
			ps.group[open[len(open)-1]] = true
		}
	}
}

// arithToken reports whether token i can be part of arithmetic.
func (ps *parser) arithToken(i int) bool {
	t := ps.toks[i]
	switch t.kind {
	case tokPunct:
		_, rel := relops[t.text]
		return !rel && t.text != "&&" && t.text != "||" && t.text != "!"
	case tokWord:
		if t.escaped {
			return false
		}
		if _, ok := parseNumber(t.text); ok || t.text == "len" || isNamedConst(t.text) {
			return true
		}
		return accessors[t.text] != nil && i+1 < len(ps.toks) && isPunct(ps.toks[i+1], "[")
	}
	return false
}

// startsArith reports whether the next tokens start an arithmetic relation
// rather than a primitive: a number followed by an operator, `len`, a
// unary minus, a named constant, or a protocol followed by '['.
func (ps *parser) startsArith() bool {
	t := ps.peek()
	switch {
	case isPunct(t, "-"):
		return true
	case t.kind != tokWord || t.escaped:
		return false
	case t.text == "len":
		return true
	case isNamedConst(t.text):
		return true
	case accessors[t.text] != nil:
		return isPunct(ps.peekAt(1), "[")
	}
	if _, ok := parseNumber(t.text); ok {
		n := ps.peekAt(1)
		return n.kind == tokPunct && !isPunct(n, "(") && !isPunct(n, ")") && n.text != "&&" && n.text != "||" && n.text != "!"
	}
	return false
}

// protoWords are the protocol qualifiers this package implements.
var protoWords = map[string]bool{
	"ether": true, "link": true, "ip": true, "ip6": true, "arp": true, "rarp": true,
	"tcp": true, "udp": true, "sctp": true, "icmp": true, "icmp6": true, "igmp": true,
}

// keywords are the words that are never a bare id.
var keywords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range []string{"and", "or", "not", "src", "dst", "host", "net", "port", "portrange",
		"mask", "proto", "less", "greater", "len", "broadcast", "multicast"} {
		m[w] = true
	}
	for w := range protoWords {
		m[w] = true
	}
	for w := range unsupported {
		m[w] = true
	}
	return m
}()

// primitiveWithQuals parses a primitive that starts with a keyword.
func (ps *parser) primitiveWithQuals() (node, quals, error) {
	t := ps.peek()
	if t.kind != tokWord {
		return nil, quals{}, ps.errAt(t, "unexpected %s", t)
	}
	if err := ps.checkSupported(t); err != nil {
		return nil, quals{}, err
	}
	switch t.text {
	case "less", "greater":
		ps.next()
		v := ps.next()
		n, ok := parseNumber(v.text)
		if v.kind != tokWord || !ok {
			return nil, quals{}, ps.errAt(v, "%s needs a number, got %s", t.text, v)
		}
		test := bpf.JumpLessOrEqual
		if t.text == "greater" {
			test = bpf.JumpGreaterOrEqual
		}
		return relNode{l: lenA{}, test: test, r: constA{n}}, quals{}, nil
	}
	var q quals
	if protoWords[t.text] {
		ps.next()
		q.proto = t.text
		if q.proto == "link" {
			q.proto = "ether"
		}
	}
	// Direction: src, dst, src or dst, src and dst (and dst/src swapped).
	if d := ps.peek(); isWord(d, "src") || isWord(d, "dst") {
		ps.next()
		q.dir = d.text
		if j, o := ps.peek(), ps.peekAt(1); (isAnd(j) || isOr(j)) && (isWord(o, "src") || isWord(o, "dst")) && o.text != d.text {
			ps.p += 2
			if isAnd(j) {
				q.dir = "src and dst"
			} else {
				q.dir = "src or dst"
			}
		}
	}
	if err := ps.checkSupported(ps.peek()); err != nil {
		return nil, quals{}, err
	}
	switch w := ps.peek(); {
	case isWord(w, "host"), isWord(w, "net"), isWord(w, "port"), isWord(w, "portrange"):
		ps.next()
		q.typ = w.text
	case q.dir == "" && (isWord(w, "proto")):
		ps.next()
		n, err := ps.protoPrimitive(q.proto, ps.next())
		return n, quals{}, err
	case q.dir == "" && (isWord(w, "broadcast") || isWord(w, "multicast")):
		ps.next()
		n, err := castPrimitive(q.proto, w.text)
		if err != nil {
			return nil, quals{}, ps.errAt(w, "%v", err)
		}
		return n, quals{}, nil
	case q.dir == "" && q.typ == "" && q.proto != "":
		// A protocol alone: `tcp`, `ip6`.
		n, err := protoAlone(q.proto)
		if err != nil {
			return nil, quals{}, ps.errAt(t, "%v", err)
		}
		return n, quals{}, nil
	}
	if q.proto == "" && q.dir == "" && q.typ == "" {
		return nil, quals{}, ps.errAt(t, "unexpected %s", t)
	}
	q.valid = true
	id := ps.next()
	if id.kind != tokWord || (!id.escaped && keywords[id.text]) {
		return nil, quals{}, ps.errAt(id, "%s needs an address, network or port, got %s", qualsString(q), id)
	}
	n, err := ps.primitive(q, id)
	return n, q, err
}

func qualsString(q quals) string {
	return strings.Join(strings.Fields(q.proto+" "+q.dir+" "+q.typ), " ")
}

// checkSupported turns a keyword of the pcap-filter language that this
// package does not implement into an error that names it and says why.
func (ps *parser) checkSupported(t token) error {
	if t.kind != tokWord || t.escaped {
		return nil
	}
	if why, ok := unsupported[t.text]; ok {
		return &syntaxError{pos: t.pos, msg: fmt.Sprintf("%q is not supported: %s", t.text, why)}
	}
	return nil
}

const (
	whyVLAN     = "at TC the outer VLAN tag has been moved out of the frame into the skb's metadata, so an in-frame test would never match it (see docs/capture.md)"
	whyEncap    = "encapsulation keywords move the offsets of everything after them; not implemented"
	whyLinkType = "filters run on Ethernet frames only"
	whyDir      = "the direction is chosen by the hook the capture is attached to (ingress or egress), not by the filter"
	whyName     = "it needs a name lookup (DNS or /etc files) that a filter compiled in the agent does not do; use addresses"
	whyProtoNum = "use its protocol number: `ip proto N`, `ip6 proto N` or `proto N`"
	whyRare     = "this legacy protocol keyword is not implemented; use `ether proto N` or a packet-data test"
	whyPF       = "OpenBSD pf log fields do not exist at TC"
	whyATM      = "ATM and SS7 fields do not exist on Ethernet"
)

// unsupported are the pcap-filter keywords that are rejected, with why.
var unsupported = map[string]string{
	"vlan": whyVLAN, "mpls": whyEncap, "pppoes": whyEncap, "pppoed": whyEncap, "geneve": whyEncap, "vxlan": whyEncap,
	"inbound": whyDir, "outbound": whyDir, "ifindex": whyDir, "ifname": whyPF, "on": whyPF, "rnr": whyPF,
	"rulenum": whyPF, "reason": whyPF, "rset": whyPF, "ruleset": whyPF, "srnr": whyPF, "subrulenum": whyPF, "action": whyPF,
	"gateway": whyName, "protochain": "it walks the IPv6 extension header chain with a backward jump, which cBPF has and this compiler does not",
	"ah": whyProtoNum, "esp": whyProtoNum, "pim": whyProtoNum, "vrrp": whyProtoNum, "carp": whyProtoNum, "igrp": whyProtoNum,
	"llc": whyRare, "atalk": whyRare, "aarp": whyRare, "decnet": whyRare, "lat": whyRare, "sca": whyRare, "moprc": whyRare,
	"mopdl": whyRare, "iso": whyRare, "esis": whyRare, "es-is": whyRare, "isis": whyRare, "is-is": whyRare, "clnp": whyRare,
	"stp": whyRare, "ipx": whyRare, "netbeui": whyRare, "l1": whyRare, "l2": whyRare, "iih": whyRare, "lsp": whyRare,
	"snp": whyRare, "csnp": whyRare, "psnp": whyRare,
	"fddi": whyLinkType, "tr": whyLinkType, "wlan": whyLinkType, "radio": whyLinkType, "type": whyLinkType, "subtype": whyLinkType,
	"dir": whyLinkType, "ra": whyLinkType, "ta": whyLinkType, "addr1": whyLinkType, "addr2": whyLinkType, "addr3": whyLinkType,
	"addr4": whyLinkType, "slip": whyLinkType, "ppp": whyLinkType, "hdlc": whyLinkType,
	"lane": whyATM, "oamf4": whyATM, "oamf4s": whyATM, "oamf4e": whyATM, "oam": whyATM, "metac": whyATM, "bcc": whyATM,
	"sc": whyATM, "ilmic": whyATM, "connectmsg": whyATM, "metaconnect": whyATM, "vpi": whyATM, "vci": whyATM,
	"fisu": whyATM, "lssu": whyATM, "msu": whyATM, "hfisu": whyATM, "hlssu": whyATM, "hmsu": whyATM, "sio": whyATM,
	"opc": whyATM, "dpc": whyATM, "sls": whyATM, "hsio": whyATM, "hopc": whyATM, "hdpc": whyATM, "hsls": whyATM,
}

// relation parses `arith relop arith`.
func (ps *parser) relation() (node, error) {
	l, err := ps.arith(0)
	if err != nil {
		return nil, err
	}
	op := ps.next()
	test, ok := relops[op.text]
	if op.kind != tokPunct || !ok {
		return nil, ps.errAt(op, "expected a comparison (=, !=, <, <=, >, >=), got %s", op)
	}
	r, err := ps.arith(0)
	if err != nil {
		return nil, err
	}
	return relation(l, test, r), nil
}

var relops = map[string]bpf.JumpTest{
	"=": bpf.JumpEqual, "==": bpf.JumpEqual, "!=": bpf.JumpNotEqual,
	">": bpf.JumpGreaterThan, ">=": bpf.JumpGreaterOrEqual,
	"<": bpf.JumpLessThan, "<=": bpf.JumpLessOrEqual,
}

// binops are libpcap's arithmetic operators by precedence, loosest first.
// '^' is missing on purpose: libpcap's grammar gives it no precedence, so
// yacc shifts and it binds everything to its right; operand() does that.
var binops = []map[string]bpf.ALUOp{
	{"|": bpf.ALUOpOr},
	{"&": bpf.ALUOpAnd},
	{"<<": bpf.ALUOpShiftLeft, ">>": bpf.ALUOpShiftRight},
	{"+": bpf.ALUOpAdd, "-": bpf.ALUOpSub},
	{"*": bpf.ALUOpMul, "/": bpf.ALUOpDiv, "%": bpf.ALUOpMod},
}

// arith parses arithmetic at precedence level lvl and tighter.
func (ps *parser) arith(lvl int) (arith, error) {
	if lvl == len(binops) {
		return ps.operand()
	}
	l, err := ps.arith(lvl + 1)
	if err != nil {
		return nil, err
	}
	for {
		t := ps.peek()
		op, ok := binops[lvl][t.text]
		if t.kind != tokPunct || !ok {
			return l, nil
		}
		ps.next()
		r, err := ps.arith(lvl + 1)
		if err != nil {
			return nil, err
		}
		if l, err = binaryArith(op, l, r); err != nil {
			return nil, ps.errAt(t, "%v", err)
		}
	}
}

// operand parses a number, len, a named constant, a packet access, a
// parenthesised expression or a negation, then any '^' that follows.
func (ps *parser) operand() (arith, error) {
	var a arith
	t := ps.next()
	switch {
	case isPunct(t, "-"):
		x, err := ps.operand()
		if err != nil {
			return nil, err
		}
		return negate(x), nil
	case isPunct(t, "("):
		x, err := ps.arith(0)
		if err != nil {
			return nil, err
		}
		if c := ps.next(); !isPunct(c, ")") {
			return nil, ps.errAt(c, "expected \")\", got %s", c)
		}
		a = x
	case t.kind != tokWord || t.escaped:
		return nil, ps.errAt(t, "expected a number or packet data, got %s", t)
	case t.text == "len":
		a = lenA{}
	case isNamedConst(t.text):
		a = constA{namedConsts[t.text]}
	case accessors[t.text] != nil && isPunct(ps.peek(), "["):
		x, err := ps.access(t)
		if err != nil {
			return nil, err
		}
		a = x
	default:
		if err := ps.checkSupported(t); err != nil {
			return nil, err
		}
		v, ok := parseNumber(t.text)
		if !ok {
			return nil, ps.errAt(t, "expected a number or packet data, got %s", t)
		}
		a = constA{v}
	}
	if t := ps.peek(); isPunct(t, "^") {
		ps.next()
		r, err := ps.arith(0)
		if err != nil {
			return nil, err
		}
		return binaryArith(bpf.ALUOpXor, a, r)
	}
	return a, nil
}

// access parses `proto[off]` or `proto[off:size]`.
func (ps *parser) access(proto token) (arith, error) {
	ps.next() // '['
	off, err := ps.arith(0)
	if err != nil {
		return nil, err
	}
	size := 1
	if c := ps.peek(); isPunct(c, ":") {
		ps.next()
		s := ps.next()
		n, ok := parseNumber(s.text)
		if s.kind != tokWord || !ok || (n != 1 && n != 2 && n != 4) {
			return nil, ps.errAt(s, "data size must be 1, 2 or 4, got %s", s)
		}
		size = int(n)
	}
	if c := ps.next(); !isPunct(c, "]") {
		return nil, ps.errAt(c, "expected \"]\", got %s", c)
	}
	// A constant offset past any packet is a typo, not a filter.
	if c, ok := off.(constA); ok && c.v > 0xffff {
		return nil, ps.errAt(proto, "offset %d into %s is past the largest packet", c.v, proto.text)
	}
	return loadA{proto: accessors[proto.text], off: off, size: size}, nil
}
