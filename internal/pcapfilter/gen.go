package pcapfilter

import (
	"errors"
	"fmt"

	"golang.org/x/net/bpf"
)

// The predicate tree the parser builds and the cBPF generator walks.
type node interface{ isNode() }

type (
	andNode struct{ l, r node }
	orNode  struct{ l, r node }
	notNode struct{ x node }
	// cmpNode loads packet data, masks it and compares it with a
	// constant: every primitive is a tree of these.
	cmpNode struct {
		ld   load
		mask uint32 // 0: none
		test bpf.JumpTest
		k    uint32
	}
	// relNode is an arithmetic relation; its protocol guards are ANDed in
	// front of it by relation().
	relNode struct {
		l    arith
		test bpf.JumpTest
		r    arith
	}
)

func (andNode) isNode() {}
func (orNode) isNode()  {}
func (notNode) isNode() {}
func (cmpNode) isNode() {}
func (relNode) isNode() {}

// loadBase says where a load's offset counts from.
type loadBase int

const (
	baseFrame loadBase = iota // the start of the Ethernet frame
	// baseIPv4L4 is the IPv4 payload: libpcap's `ldxb 4*([14]&0xf)`
	// then `ld [x + 14 + off]`, so IPv4 options are skipped.
	baseIPv4L4
)

type load struct {
	base loadBase
	off  uint32
	size int // 1, 2 or 4
}

// Arithmetic values: cBPF's 32-bit unsigned arithmetic.
type arith interface{ isArith() }

type (
	constA struct{ v uint32 }
	lenA   struct{} // the packet's length on the wire
	loadA  struct {
		proto *accessor
		off   arith
		size  int
	}
	binA struct {
		op   bpf.ALUOp
		l, r arith
	}
	negA struct{ x arith }
)

func (constA) isArith() {}
func (lenA) isArith()   {}
func (loadA) isArith()  {}
func (binA) isArith()   {}
func (negA) isArith()   {}

// binaryArith builds l op r, folding constants as libpcap does, and rejects
// what libpcap rejects at compile time.
func binaryArith(op bpf.ALUOp, l, r arith) (arith, error) {
	rc, rok := r.(constA)
	if rok && rc.v == 0 && (op == bpf.ALUOpDiv || op == bpf.ALUOpMod) {
		return nil, errors.New("division by zero")
	}
	if rok && rc.v > 31 && (op == bpf.ALUOpShiftLeft || op == bpf.ALUOpShiftRight) {
		return nil, fmt.Errorf("shift by %d: more than 31 bits", rc.v)
	}
	lc, lok := l.(constA)
	if !lok || !rok {
		return binA{op, l, r}, nil
	}
	a, b := lc.v, rc.v
	var v uint32
	switch op {
	case bpf.ALUOpAdd:
		v = a + b
	case bpf.ALUOpSub:
		v = a - b
	case bpf.ALUOpMul:
		v = a * b
	case bpf.ALUOpDiv:
		v = a / b
	case bpf.ALUOpMod:
		v = a % b
	case bpf.ALUOpAnd:
		v = a & b
	case bpf.ALUOpOr:
		v = a | b
	case bpf.ALUOpXor:
		v = a ^ b
	case bpf.ALUOpShiftLeft:
		v = a << b
	case bpf.ALUOpShiftRight:
		v = a >> b
	}
	return constA{v}, nil
}

func negate(x arith) arith {
	if c, ok := x.(constA); ok {
		return constA{-c.v}
	}
	return negA{x}
}

// relation builds `l test r` behind the guards of the protocols it reads:
// libpcap tests `tcp[13]` only on a TCP, unfragmented-or-first-fragment
// IPv4 packet, and evaluates the guards before the loads, so a load past
// the end of a packet of another protocol never aborts the filter.
func relation(l arith, test bpf.JumpTest, r arith) node {
	var n node = relNode{l: l, test: test, r: r}
	seen := map[*accessor]bool{}
	var guards []node
	var walk func(a arith)
	walk = func(a arith) {
		switch a := a.(type) {
		case loadA:
			if !seen[a.proto] && a.proto.guard != nil {
				seen[a.proto] = true
				guards = append(guards, a.proto.guard())
			}
			walk(a.off)
		case binA:
			walk(a.l)
			walk(a.r)
		case negA:
			walk(a.x)
		}
	}
	walk(l)
	walk(r)
	for i := len(guards) - 1; i >= 0; i-- {
		n = andNode{guards[i], n}
	}
	return n
}

// acceptVal is what the cBPF program returns on a match; like libpcap's,
// any non-zero value means "match".
const acceptVal = 262144

// cBPF has 16 scratch words; nested arithmetic uses one per level.
const scratchSlots = 16

type label int

// cinsn is a cBPF instruction before jump resolution: either a plain
// instruction, a conditional jump to two labels, or a label.
type cinsn struct {
	plain bpf.Instruction
	cond  bool
	condX bool // compare A with X instead of k
	test  bpf.JumpTest
	k     uint32
	t, f  label
	isLbl bool
	lbl   label
}

// gen compiles a predicate tree to cBPF with short-circuit jumps, the way
// libpcap's code generator does before its optimiser runs.
type gen struct {
	code    []cinsn
	nlabels int
	scratch int
}

func (g *gen) newLabel() label {
	g.nlabels++
	return label(g.nlabels)
}

func (g *gen) emit(i bpf.Instruction) { g.code = append(g.code, cinsn{plain: i}) }

func (g *gen) place(l label) { g.code = append(g.code, cinsn{isLbl: true, lbl: l}) }

// compile returns the cBPF program for n.
func compile(n node) ([]bpf.Instruction, error) {
	g := &gen{}
	accept, reject := g.newLabel(), g.newLabel()
	if err := g.pred(n, accept, reject); err != nil {
		return nil, err
	}
	g.place(accept)
	g.emit(bpf.RetConstant{Val: acceptVal})
	g.place(reject)
	g.emit(bpf.RetConstant{Val: 0})
	return g.resolve()
}

func (g *gen) pred(n node, t, f label) error {
	switch n := n.(type) {
	case andNode:
		m := g.newLabel()
		if err := g.pred(n.l, m, f); err != nil {
			return err
		}
		g.place(m)
		return g.pred(n.r, t, f)
	case orNode:
		m := g.newLabel()
		if err := g.pred(n.l, t, m); err != nil {
			return err
		}
		g.place(m)
		return g.pred(n.r, t, f)
	case notNode:
		return g.pred(n.x, f, t)
	case cmpNode:
		g.load(n.ld)
		if n.mask != 0 {
			g.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: n.mask})
		}
		g.code = append(g.code, cinsn{cond: true, test: n.test, k: n.k, t: t, f: f})
		return nil
	case relNode:
		if c, ok := n.r.(constA); ok {
			if err := g.arith(n.l); err != nil {
				return err
			}
			g.code = append(g.code, cinsn{cond: true, test: n.test, k: c.v, t: t, f: f})
			return nil
		}
		if err := g.binary(n.l, n.r); err != nil {
			return err
		}
		g.code = append(g.code, cinsn{cond: true, condX: true, test: n.test, t: t, f: f})
		return nil
	}
	return fmt.Errorf("internal error: unknown node %T", n)
}

func (g *gen) load(l load) {
	if l.base == baseIPv4L4 {
		g.emit(bpf.LoadMemShift{Off: 14})
		g.emit(bpf.LoadIndirect{Off: 14 + l.off, Size: l.size})
		return
	}
	g.emit(bpf.LoadAbsolute{Off: l.off, Size: l.size})
}

// binary leaves l in A and r in X, using one scratch word for r.
func (g *gen) binary(l, r arith) error {
	if g.scratch == scratchSlots {
		return errors.New("arithmetic nested too deeply: cBPF has 16 scratch words")
	}
	slot := g.scratch
	if err := g.arith(r); err != nil {
		return err
	}
	g.emit(bpf.StoreScratch{Src: bpf.RegA, N: slot})
	g.scratch++
	err := g.arith(l)
	g.scratch--
	if err != nil {
		return err
	}
	g.emit(bpf.LoadScratch{Dst: bpf.RegX, N: slot})
	return nil
}

// arith leaves the value of a in A.
func (g *gen) arith(a arith) error {
	switch a := a.(type) {
	case constA:
		g.emit(bpf.LoadConstant{Dst: bpf.RegA, Val: a.v})
	case lenA:
		g.emit(bpf.LoadExtension{Num: bpf.ExtLen})
	case negA:
		if err := g.arith(a.x); err != nil {
			return err
		}
		// -A as A * 0xffffffff, the same modulo 2^32: x/net/bpf's VM,
		// which tests use as a second opinion, has no NegateA.
		g.emit(bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: 0xffffffff})
	case binA:
		if c, ok := a.r.(constA); ok {
			if err := g.arith(a.l); err != nil {
				return err
			}
			g.emit(bpf.ALUOpConstant{Op: a.op, Val: c.v})
			return nil
		}
		if err := g.binary(a.l, a.r); err != nil {
			return err
		}
		g.emit(bpf.ALUOpX{Op: a.op})
	case loadA:
		if c, ok := a.off.(constA); ok {
			if a.proto.base == baseIPv4L4 {
				g.load(load{base: baseIPv4L4, off: c.v, size: a.size})
			} else {
				g.load(load{base: baseFrame, off: a.proto.off + c.v, size: a.size})
			}
			return nil
		}
		if err := g.arith(a.off); err != nil {
			return err
		}
		if a.proto.base == baseIPv4L4 {
			g.emit(bpf.LoadMemShift{Off: 14})
			g.emit(bpf.ALUOpX{Op: bpf.ALUOpAdd})
		}
		g.emit(bpf.TAX{})
		g.emit(bpf.LoadIndirect{Off: a.proto.off, Size: a.size})
	default:
		return fmt.Errorf("internal error: unknown arithmetic %T", a)
	}
	return nil
}

// resolve lays the code out and turns labels into cBPF's forward skips.
// A conditional jump skips at most 255 instructions; one that must go
// further becomes a conditional jump over two unconditional ones, which
// have 32-bit skips. Growing an instruction can only push others further,
// so the sizes are recomputed until nothing grows.
func (g *gen) resolve() ([]bpf.Instruction, error) {
	far := make([]bool, len(g.code))
	pos := make([]int, len(g.code)) // position of each entry
	at := map[label]int{}
	for {
		p := 0
		for i, c := range g.code {
			pos[i] = p
			switch {
			case c.isLbl:
				at[c.lbl] = p
			case c.cond && far[i]:
				p += 3
			default:
				p++
			}
		}
		grew := false
		for i, c := range g.code {
			if c.cond && !far[i] && (at[c.t]-pos[i]-1 > 255 || at[c.f]-pos[i]-1 > 255) {
				far[i], grew = true, true
			}
		}
		if !grew {
			break
		}
	}
	var out []bpf.Instruction
	for i, c := range g.code {
		p := pos[i]
		switch {
		case c.isLbl:
		case c.cond && far[i]:
			out = append(out, condInsn(c, 0, 1),
				bpf.Jump{Skip: uint32(at[c.t] - p - 2)},
				bpf.Jump{Skip: uint32(at[c.f] - p - 3)})
		case c.cond:
			out = append(out, condInsn(c, uint8(at[c.t]-p-1), uint8(at[c.f]-p-1)))
		default:
			out = append(out, c.plain)
		}
	}
	return out, nil
}

func condInsn(c cinsn, st, sf uint8) bpf.Instruction {
	if c.condX {
		return bpf.JumpIfX{Cond: c.test, SkipTrue: st, SkipFalse: sf}
	}
	return bpf.JumpIf{Cond: c.test, Val: c.k, SkipTrue: st, SkipFalse: sf}
}
