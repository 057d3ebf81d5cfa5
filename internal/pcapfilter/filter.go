// Package pcapfilter compiles the pcap-filter expressions tcpdump users type
// (`tcp port 80 and host 10.0.0.2`) into eBPF instructions that run in a TC
// (SchedCLS) program, without libpcap: the agent is one static binary
// with no cgo, and filters are typed at run time.
//
// An expression is parsed and compiled to classic BPF by this package,
// following libpcap's code generator for the same expression (the same
// offsets, the same protocol guards, the same IPv4 fragment and IPv6
// fragment-header rules), then translated to eBPF by
// github.com/cloudflare/cbpfc, which adds the packet bounds checks the
// verifier needs. Tests hold the result to tcpdump's verdicts on a set of
// frames.
//
// What is supported and what is rejected, and why, is in docs/capture.md.
// The frames the filter sees are Ethernet frames as skb->data has them at
// TC: the outer VLAN tag, if any, is in the skb's metadata, not in the
// frame, which is why `vlan` is rejected.
package pcapfilter

import (
	"fmt"
	"strings"

	"golang.org/x/net/bpf"
)

// Limits that keep a typed expression from turning into a program the
// verifier would take long to check: libpcap's own instruction limit
// (BPF_MAXINSNS) and a bound on the text that also bounds the parser's
// recursion.
const (
	maxExprLen   = 4096
	maxCBPFInsns = 4096
)

// Filter is a compiled pcap-filter expression. It is immutable and safe to
// use from several goroutines.
type Filter struct {
	expr string
	cbpf []bpf.Instruction // nil: the empty expression, which matches everything
}

// Error is a compile error. Its message names the expression and, for a
// construct that is not supported, the construct and why.
type Error struct {
	Expr   string
	Offset int // byte offset into Expr where the problem is (len(Expr): at its end)
	Msg    string
}

func (e *Error) Error() string { return fmt.Sprintf("pcap filter %q: %s", e.Expr, e.Msg) }

// Compile compiles expr. The empty (or all-blank) expression matches every
// packet, as it does for tcpdump.
func Compile(expr string) (*Filter, error) {
	f := &Filter{expr: strings.TrimSpace(expr)}
	if f.expr == "" {
		return f, nil
	}
	fail := func(off int, msg string) (*Filter, error) {
		return nil, &Error{Expr: f.expr, Offset: off, Msg: msg}
	}
	if len(f.expr) > maxExprLen {
		return fail(maxExprLen, fmt.Sprintf("expression is %d bytes long, more than %d", len(f.expr), maxExprLen))
	}
	toks, err := lex(f.expr)
	if err != nil {
		return fail(0, err.Error())
	}
	ps := &parser{toks: toks}
	n, err := ps.parse()
	if err != nil {
		if se, ok := err.(*syntaxError); ok {
			return fail(se.pos, se.msg)
		}
		return fail(0, err.Error())
	}
	prog, err := compile(n)
	if err != nil {
		return fail(0, err.Error())
	}
	if len(prog) > maxCBPFInsns {
		// libpcap's optimiser would make it smaller; this compiler has
		// none, so long chains of port or host tests reach the limit
		// sooner than in tcpdump (about 50 `port` alternatives).
		return fail(0, fmt.Sprintf("compiles to %d cBPF instructions, more than the limit of %d (libpcap's)", len(prog), maxCBPFInsns))
	}
	f.cbpf = prog
	return f, nil
}

// String returns the expression as given, without surrounding blanks.
func (f *Filter) String() string { return f.expr }

// MatchesAll reports whether the filter is the empty expression.
func (f *Filter) MatchesAll() bool { return f.cbpf == nil }

// CBPF returns the classic BPF program: it returns non-zero on a match.
// The empty filter has none. Inspecting it (bpf.Disassemble) or running it
// in golang.org/x/net/bpf's VM needs no privileges, which tests use.
func (f *Filter) CBPF() []bpf.Instruction {
	return append([]bpf.Instruction(nil), f.cbpf...)
}
