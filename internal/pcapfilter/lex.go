package pcapfilter

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// tokKind is the kind of a lexical token.
type tokKind int

const (
	tokEOF   tokKind = iota
	tokWord          // a keyword, name, number or address
	tokPunct         // an operator or bracket
)

// token is one lexical token of an expression.
type token struct {
	kind tokKind
	text string
	pos  int // byte offset in the expression, for error messages
	// escaped is set for a word written with a leading backslash
	// (`ether proto \ip`): libpcap's way to use a keyword as a name.
	escaped bool
}

func (t token) String() string {
	if t.kind == tokEOF {
		return "end of expression"
	}
	return fmt.Sprintf("%q", t.text)
}

// twoCharOps are the operators of two characters; they are matched before
// the single characters they start with.
var twoCharOps = []string{"&&", "||", "<<", ">>", "<=", ">=", "==", "!="}

const oneCharOps = "()[]:!&|^+-*/%<>="

// lex splits expr into tokens the way libpcap's scanner does for the parts
// of the language this package supports. Words run over letters, digits,
// '_', '.' and '-', as libpcap's identifiers do, so `tcp-syn`, `icmp-echo`
// and `8000-8080` are one word each and `len-14` is a (bad) name, as in
// tcpdump; addresses with colons (IPv6, MAC) are recognised whole.
func lex(expr string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '\\':
			j := scanWord(expr, i+1)
			if j == i+1 {
				return nil, fmt.Errorf("backslash at offset %d is not followed by a name", i)
			}
			toks = append(toks, token{kind: tokWord, text: expr[i+1 : j], pos: i, escaped: true})
			i = j
			continue
		}
		if j := scanColonAddr(expr, i); j > i {
			toks = append(toks, token{kind: tokWord, text: expr[i:j], pos: i})
			i = j
			continue
		}
		if isWordStart(c) {
			j := scanWord(expr, i)
			toks = append(toks, token{kind: tokWord, text: expr[i:j], pos: i})
			i = j
			continue
		}
		matched := false
		for _, op := range twoCharOps {
			if strings.HasPrefix(expr[i:], op) {
				toks = append(toks, token{kind: tokPunct, text: op, pos: i})
				i += 2
				matched = true
				break
			}
		}
		if matched {
			continue
		}
		if strings.IndexByte(oneCharOps, c) >= 0 {
			toks = append(toks, token{kind: tokPunct, text: string(c), pos: i})
			i++
			continue
		}
		return nil, fmt.Errorf("unexpected character %q at offset %d", c, i)
	}
	toks = append(toks, token{kind: tokEOF, pos: len(expr)})
	return toks, nil
}

func isWordStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func isWordByte(c byte) bool {
	return isWordStart(c) || c == '.' || c == '-'
}

// scanWord returns the end of the word starting at i. Like libpcap's
// identifiers, a word does not end in '-': `foo-` is `foo` then a minus.
func scanWord(s string, i int) int {
	j := i
	for j < len(s) && isWordByte(s[j]) {
		j++
	}
	for j > i && s[j-1] == '-' {
		j--
	}
	return j
}

func isHexOrColon(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.'
}

// scanColonAddr returns the end of an IPv6 or MAC address starting at i, or
// i if none starts there. A run like `13:1` inside `tcp[13:1]` is neither,
// so it stays a number, a colon and a number.
func scanColonAddr(s string, i int) int {
	j := i
	for j < len(s) && isHexOrColon(s[j]) {
		j++
	}
	cand := s[i:j]
	if !strings.Contains(cand, ":") {
		return i
	}
	// A word character right after the run (`2001:db8::1x`) means this is
	// not an address; let the word scanner report the bad name.
	if j < len(s) && isWordByte(s[j]) && s[j] != '.' {
		return i
	}
	if a, err := netip.ParseAddr(cand); err == nil && a.Is6() {
		return j
	}
	if _, ok := parseMAC(cand); ok {
		return j
	}
	return i
}

// parseMAC accepts the MAC forms libpcap does: six colon- or
// hyphen-separated groups of one or two hex digits, or three dot-separated
// groups of four.
func parseMAC(s string) (net.HardwareAddr, bool) {
	var parts []string
	switch {
	case strings.Count(s, ":") == 5:
		parts = strings.Split(s, ":")
	case strings.Count(s, "-") == 5:
		parts = strings.Split(s, "-")
	case strings.Count(s, ".") == 2:
		ps := strings.Split(s, ".")
		for _, p := range ps {
			if len(p) != 4 {
				return nil, false
			}
			parts = append(parts, p[:2], p[2:])
		}
	default:
		return nil, false
	}
	mac := make(net.HardwareAddr, 6)
	for i, p := range parts {
		if len(p) < 1 || len(p) > 2 {
			return nil, false
		}
		var v byte
		for k := 0; k < len(p); k++ {
			d, ok := hexDigit(p[k])
			if !ok {
				return nil, false
			}
			v = v<<4 | d
		}
		mac[i] = v
	}
	return mac, true
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseNumber reads a number as libpcap does: 0x hexadecimal, a leading 0
// octal, otherwise decimal; it must fit 32 bits.
func parseNumber(s string) (uint32, bool) {
	if s == "" {
		return 0, false
	}
	base := uint64(10)
	digits := s
	switch {
	case len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X"):
		base, digits = 16, s[2:]
	case len(s) > 1 && s[0] == '0':
		base, digits = 8, s[1:]
	}
	var v uint64
	for i := 0; i < len(digits); i++ {
		d, ok := hexDigit(digits[i])
		if !ok || uint64(d) >= base {
			return 0, false
		}
		v = v*base + uint64(d)
		if v > 0xffffffff {
			return 0, false
		}
	}
	return uint32(v), true
}
