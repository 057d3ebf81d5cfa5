package pcapfilter

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cloudflare/cbpfc"
	"golang.org/x/net/bpf"
)

// Offsets in struct __sk_buff (include/uapi/linux/bpf.h), a stable ABI.
const (
	skbLen     = 0
	skbData    = 76
	skbDataEnd = 80
)

// Options place a filter's instructions in a larger program.
type Options struct {
	// Ctx holds the *__sk_buff; the filter reads skb->len from it for
	// `len`, `less` and `greater`. Not modified.
	Ctx asm.Register
	// PacketStart and PacketEnd hold skb->data and skb->data_end, which
	// must start at the Ethernet header. Not modified.
	PacketStart, PacketEnd asm.Register
	// Result receives the verdict: 0 no match, anything else a match.
	// It may be one of Working.
	Result asm.Register
	// ResultLabel is where the filter jumps when Result is set; the
	// caller places it right after the filter or anywhere later.
	ResultLabel string
	// Working are clobbered. All registers other than Result must differ.
	Working [4]asm.Register
	// StackOffset is how many bytes below R10 the caller already uses;
	// the filter uses up to 64 more below that for its scratch words.
	StackOffset int
	// LabelPrefix keeps the filter's labels apart from the caller's.
	LabelPrefix string
}

// StackBytes is the most stack a filter uses below Options.StackOffset:
// cBPF's 16 scratch words.
const StackBytes = 4 * scratchSlots

// Instructions returns the filter as eBPF instructions placed by o. They
// jump to o.ResultLabel with the verdict in o.Result and never exit the
// program themselves.
func (f *Filter) Instructions(o Options) (asm.Instructions, error) {
	if o.ResultLabel == "" {
		return nil, errors.New("pcap filter instructions: Options.ResultLabel is empty")
	}
	regs := append([]asm.Register{o.Ctx, o.PacketStart, o.PacketEnd}, o.Working[:]...)
	seen := map[asm.Register]bool{}
	for _, r := range regs {
		if r > asm.R9 || seen[r] {
			return nil, fmt.Errorf("pcap filter instructions: registers %v must be distinct and at most R9", regs)
		}
		seen[r] = true
	}
	if o.Result == o.Ctx || o.Result == o.PacketStart || o.Result == o.PacketEnd || o.Result > asm.R9 {
		return nil, fmt.Errorf("pcap filter instructions: Result %v must not be Ctx, PacketStart or PacketEnd", o.Result)
	}
	if f.MatchesAll() {
		return asm.Instructions{
			asm.Mov.Imm(o.Result, 1),
			asm.Ja.Label(o.ResultLabel),
		}, nil
	}
	insns, err := cbpfc.ToEBPF(f.cbpf, cbpfc.EBPFOpts{
		PacketStart: o.PacketStart,
		PacketEnd:   o.PacketEnd,
		Result:      o.Result,
		ResultLabel: o.ResultLabel,
		Working:     o.Working,
		StackOffset: o.StackOffset,
		LabelPrefix: o.LabelPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("pcap filter %q: to eBPF: %w", f.expr, err)
	}
	return f.wireLength(insns, o)
}

// wireLength makes `len` the packet's length on the wire. cbpfc computes
// it as data_end - data, the linear part of the skb only; at TC a GSO
// packet or one with paged data is longer than that, and libpcap's `len`
// (the kernel's skb->len for AF_PACKET) counts all of it. cbpfc emits
// exactly `A = end; A -= start` for each length load, and nothing else of
// that shape, so each is rewritten into one load of skb->len; the count is
// checked so a different cbpfc cannot slip through unnoticed.
func (f *Filter) wireLength(insns asm.Instructions, o Options) (asm.Instructions, error) {
	want := 0
	for _, ins := range f.cbpf {
		if ext, ok := ins.(bpf.LoadExtension); ok && ext.Num == bpf.ExtLen {
			want++
		}
	}
	regA := o.Working[0] // cbpfc's accumulator
	movEnd := asm.Mov.Reg(regA, o.PacketEnd)
	subStart := asm.Sub.Reg32(regA, o.PacketStart)
	out := make(asm.Instructions, 0, len(insns))
	got := 0
	for i := 0; i < len(insns); i++ {
		ins := insns[i]
		if i+1 < len(insns) && sameOp(ins, movEnd) && sameOp(insns[i+1], subStart) && insns[i+1].Symbol() == "" {
			ld := asm.LoadMem(regA, o.Ctx, skbLen, asm.Word)
			ld.Metadata = ins.Metadata // keeps a jump target's symbol
			out = append(out, ld)
			i++
			got++
			continue
		}
		out = append(out, ins)
	}
	if got != want {
		return nil, fmt.Errorf("pcap filter %q: found %d of %d packet length loads in cbpfc's output", f.expr, got, want)
	}
	return out, nil
}

func sameOp(a, b asm.Instruction) bool {
	return a.OpCode == b.OpCode && a.Dst == b.Dst && a.Src == b.Src && a.Offset == b.Offset && a.Constant == b.Constant
}

// Labels of the program Program builds.
const (
	// ExitLabel ends the program with TC_ACT_UNSPEC; onMatch may jump to it.
	ExitLabel    = "pcapfilter_exit"
	verdictLabel = "pcapfilter_verdict"
)

// TC_ACT_UNSPEC: let the packet go on as if no program had run, so that a
// capture never changes what happens to the traffic it watches.
const actUnspec = -1

// Program builds a complete SchedCLS program: it loads skb->data and
// skb->data_end, runs f, and on a match runs onMatch with R6 = skb,
// R7 = skb->data, R8 = skb->data_end (onMatch may clobber them). Unless
// onMatch exits itself, the program returns TC_ACT_UNSPEC (-1), match or
// not. The capture capability passes the code that outputs the packet;
// tests pass code that returns 1.
func Program(f *Filter, onMatch asm.Instructions) (*ebpf.ProgramSpec, error) {
	filter, err := f.Instructions(Options{
		Ctx:         asm.R6,
		PacketStart: asm.R7,
		PacketEnd:   asm.R8,
		Result:      asm.R0,
		ResultLabel: verdictLabel,
		Working:     [4]asm.Register{asm.R2, asm.R3, asm.R4, asm.R5},
		LabelPrefix: "pcapfilter",
	})
	if err != nil {
		return nil, err
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, skbData, asm.Word),
		asm.LoadMem(asm.R8, asm.R6, skbDataEnd, asm.Word),
	}
	insns = append(insns, filter...)
	insns = append(insns, asm.JEq.Imm(asm.R0, 0, ExitLabel).WithSymbol(verdictLabel))
	insns = append(insns, onMatch...)
	insns = append(insns,
		asm.Mov.Imm(asm.R0, actUnspec).WithSymbol(ExitLabel),
		asm.Return(),
	)
	return &ebpf.ProgramSpec{
		Name:         "pcap_filter",
		Type:         ebpf.SchedCLS,
		Instructions: insns,
		// The project's BPF is GPL-2.0-only OR BSD-2-Clause; declaring
		// GPL lets onMatch call GPL-only helpers such as perf output.
		License: "Dual BSD/GPL",
	}, nil
}
