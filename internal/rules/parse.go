package rules

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// keys lists the match keys in canonical order; suggestions pick from it.
var keys = []string{"id", "src", "dst", "net", "proto", "port", "sport", "dport", "dir", "iface", "flags"}

var actions = []string{"measure", "skip", "sample", "aggregate"}

// maxLineLen bounds one line of a rule file: the longest canonical rule is
// far shorter, and bufio.Scanner needs a bound anyway.
const maxLineLen = 4096

// LineError is a problem with one rule: its line in the file (0 for a rule
// given alone, as to ParseRule) and its text.
type LineError struct {
	Line int
	Text string
	Err  error
}

func (e *LineError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("rule %q: %v", e.Text, e.Err)
	}
	return fmt.Sprintf("line %d %q: %v", e.Line, e.Text, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// ParseRule parses one rule, as `loupe rules add` takes it. A trailing
// comment is allowed; an empty rule is not.
func ParseRule(s string) (Rule, error) {
	text := strings.TrimSpace(stripComment(s))
	if text == "" {
		return Rule{}, &LineError{Text: s, Err: errors.New("empty rule")}
	}
	r, errs := parseLine(text)
	if len(errs) > 0 {
		return Rule{}, &LineError{Text: text, Err: errors.Join(errs...)}
	}
	return r, nil
}

// ParseFile parses a rule file into a Set. It reports every problem of the
// file, each naming its line, joined with errors.Join: fixing a file one
// error per run is slow.
func ParseFile(rd io.Reader) (Set, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 1024), maxLineLen)
	var (
		errs  []error
		rules []Rule
		lines []int
		texts []string
	)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(stripComment(sc.Text()))
		if text == "" {
			continue
		}
		r, lerrs := parseLine(text)
		for _, err := range lerrs {
			errs = append(errs, &LineError{Line: n, Text: text, Err: err})
		}
		if len(lerrs) == 0 {
			rules = append(rules, r)
			lines = append(lines, n)
			texts = append(texts, text)
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("line %d: %w", n+1, err))
		return Set{}, errors.Join(errs...)
	}
	s, serrs := buildSet(rules, lines, texts)
	// Both lists are in line order; merge them so the report reads top down.
	errs = mergeByLine(errs, serrs)
	if len(errs) > 0 {
		return Set{}, errors.Join(errs...)
	}
	return s, nil
}

func stripComment(s string) string {
	if i := strings.IndexByte(s, '#'); i >= 0 {
		return s[:i]
	}
	return s
}

// parseLine parses the text of one rule. It returns every problem of its
// tokens; the checks across terms (normalize) run only on a rule whose
// tokens all parsed, so that one typo does not cascade.
func parseLine(text string) (Rule, []error) {
	var (
		r      Rule
		errs   []error
		seen   = map[string]string{} // key -> its token, for conflicts
		gotAct bool
	)
	toks := strings.Fields(text)
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		key, val, isTerm := strings.Cut(tok, "=")
		if !isTerm {
			if gotAct {
				errs = append(errs, fmt.Errorf("%q after the action: one action, last", tok))
				continue
			}
			gotAct = true
			n, err := parseAction(&r, toks[i:])
			if err != nil {
				errs = append(errs, err)
			}
			i += n - 1
			continue
		}
		if gotAct {
			errs = append(errs, fmt.Errorf("match term %q after the action: the action comes last", tok))
			continue
		}
		if !isKey(key) {
			errs = append(errs, unknown("key", key, keys))
			continue
		}
		if prev, ok := seen[key]; ok {
			errs = append(errs, fmt.Errorf("%q and %q: key %q given twice", prev, tok, key))
			continue
		}
		seen[key] = tok
		if err := exclusive(seen, key, tok); err != nil {
			errs = append(errs, err)
			continue
		}
		var err error
		switch key {
		case "id":
			err = checkID(val)
			r.ID = val
		case "src", "dst", "net":
			r.Side = map[string]Side{"src": SideSrc, "dst": SideDst, "net": SideNet}[key]
			r.Prefix, err = parseCIDR(val)
		case "proto":
			r.Proto, err = parseProto(val)
		case "port", "sport", "dport":
			r.PortSide = map[string]PortSide{"port": PortEither, "sport": PortSrc, "dport": PortDst}[key]
			r.PortLo, r.PortHi, err = parsePorts(val)
		case "dir":
			r.Dir, err = parseDir(val)
		case "iface":
			err = checkGlob(val)
			r.Iface = val
		case "flags":
			r.FlagsMask, r.FlagsValue, err = parseFlags(val)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tok, err))
		}
	}
	if len(errs) > 0 {
		return Rule{}, errs
	}
	// A protocol that cannot carry what the other terms ask for is named
	// with the term, which the generic check in normalize cannot do.
	if r.PortLo != 0 && !portProto(r.Proto) {
		return Rule{}, []error{fmt.Errorf("%q needs proto tcp, udp or sctp (or no proto), not %q", seen[portKey(seen)], seen["proto"])}
	}
	if r.FlagsMask != 0 && r.Proto != 0 && r.Proto != ProtoTCP {
		return Rule{}, []error{fmt.Errorf("%q needs proto=tcp (or no proto), not %q", seen["flags"], seen["proto"])}
	}
	r, err := r.normalize()
	if err != nil {
		return Rule{}, []error{err}
	}
	return r, nil
}

func portKey(seen map[string]string) string {
	for _, k := range []string{"port", "sport", "dport"} {
		if _, ok := seen[k]; ok {
			return k
		}
	}
	return ""
}

func isKey(k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// exclusive refuses a second key of a group of which a rule takes one.
func exclusive(seen map[string]string, key, tok string) error {
	for _, group := range [][]string{{"src", "dst", "net"}, {"port", "sport", "dport"}} {
		in := false
		for _, k := range group {
			in = in || k == key
		}
		if !in {
			continue
		}
		for _, k := range group {
			if prev, ok := seen[k]; ok && k != key {
				return fmt.Errorf("%q and %q: at most one of %s= (%s)", prev, tok,
					strings.Join(group, "=, "), exclusiveWhy[group[0]])
			}
		}
	}
	return nil
}

var exclusiveWhy = map[string]string{
	"src":  "net= matches either address",
	"port": "port= matches either port",
}

// parseAction parses the action at toks[0] and returns how many tokens it
// took.
func parseAction(r *Rule, toks []string) (int, error) {
	word := toks[0]
	arg := func(what string) (string, error) {
		if len(toks) < 2 || strings.Contains(toks[1], "=") {
			return "", fmt.Errorf("%s needs %s", word, what)
		}
		return toks[1], nil
	}
	switch word {
	case "measure":
		r.Action = ActionMeasure
		return 1, nil
	case "skip":
		r.Action = ActionSkip
		return 1, nil
	case "sample":
		r.Action = ActionSample
		a, err := arg("1:N (N from 2 to 65535)")
		if err != nil {
			return 1, err
		}
		n, ok := strings.CutPrefix(a, "1:")
		v, err := strconv.ParseUint(n, 10, 16)
		if !ok || err != nil || v < 2 {
			return 2, fmt.Errorf("sample %s: want 1:N, N from 2 to 65535", a)
		}
		r.SampleN = uint16(v)
		return 2, nil
	case "aggregate":
		r.Action = ActionAggregate
		a, err := arg("/P (P from 1 to 128)")
		if err != nil {
			return 1, err
		}
		n, ok := strings.CutPrefix(a, "/")
		v, err := strconv.ParseUint(n, 10, 8)
		if !ok || err != nil || v < 1 || v > 128 {
			return 2, fmt.Errorf("aggregate %s: want /P, P from 1 to 128", a)
		}
		r.AggPrefix = uint8(v)
		return 2, nil
	}
	// The words after an unknown action are likely its arguments: one
	// error for the lot.
	n := 1
	for n < len(toks) && !strings.Contains(toks[n], "=") {
		n++
	}
	if isKey(word) {
		return n, fmt.Errorf("%q is a key: write %s=VALUE", word, word)
	}
	return n, unknown("action", word, actions)
}

func parseCIDR(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("%q is not a CIDR", s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("%q is not an address or CIDR", s)
		}
		// PrefixFrom drops a zone silently.
		if a.Zone() != "" {
			return p, fmt.Errorf("%s: a zone has no place in a rule", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return p, checkPrefix(p, s)
}

func parseProto(s string) (uint8, error) {
	for _, n := range protoNames {
		if n.name == s {
			return n.num, nil
		}
	}
	v, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		names := make([]string, len(protoNames))
		for i, n := range protoNames {
			names[i] = n.name
		}
		return 0, unknown("protocol", s, names)
	}
	if v == 0 {
		return 0, errors.New("protocol 0: leave proto out to match any protocol")
	}
	return uint8(v), nil
}

func parsePorts(s string) (lo, hi uint16, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		b = a
	}
	l, err1 := strconv.ParseUint(a, 10, 16)
	h, err2 := strconv.ParseUint(b, 10, 16)
	if err1 != nil || err2 != nil || l == 0 || h == 0 {
		return 0, 0, fmt.Errorf("%q: want a port P or range P-Q, from 1 to 65535", s)
	}
	if l > h {
		return 0, 0, fmt.Errorf("%q: range ends before it starts", s)
	}
	return uint16(l), uint16(h), nil
}

func parseDir(s string) (Direction, error) {
	switch s {
	case "ingress":
		return DirIngress, nil
	case "egress":
		return DirEgress, nil
	}
	return 0, unknown("direction", s, []string{"ingress", "egress"})
}

func parseFlags(s string) (mask, value uint8, err error) {
	for f := range strings.SplitSeq(s, ",") {
		name, neg := strings.CutPrefix(f, "!")
		bit := -1
		for i, n := range flagNames {
			if n == name {
				bit = i
			}
		}
		if bit < 0 {
			if f == "" {
				return 0, 0, errors.New("an empty flag")
			}
			return 0, 0, unknown("TCP flag", name, flagNames[:])
		}
		b := uint8(1) << bit
		if mask&b != 0 {
			return 0, 0, fmt.Errorf("flag %q named twice", name)
		}
		mask |= b
		if !neg {
			value |= b
		}
	}
	return mask, value, nil
}

// unknown names a word that is none of known, with the closest one when it
// is close enough to be a typo.
func unknown(what, word string, known []string) error {
	if s := suggest(word, known); s != "" {
		return fmt.Errorf("unknown %s %q; did you mean %q?", what, word, s)
	}
	return fmt.Errorf("unknown %s %q (want one of %s)", what, word, strings.Join(known, ", "))
}

// suggest returns the word of known closest to w by edit distance (with
// transpositions, the commonest typo), if close enough: one edit for short
// words, two for longer ones.
func suggest(w string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(w), k); d < bestD {
			best, bestD = k, d
		}
	}
	if bestD > 1 && len(w) <= 4 || bestD > 2 {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent bytes.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
