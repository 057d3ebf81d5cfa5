package pcapfilter

import (
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"loupe/internal/testutil"
)

// In its default form the program is an observer: TC_ACT_UNSPEC whether
// or not the packet matches.
func TestProgramReturnsUnspec(t *testing.T) {
	testutil.RequirePrivileged(t)
	frames, _ := buildFrames(t)
	for _, e := range []string{"", "tcp port 80", "not ip"} {
		spec, err := Program(mustCompile(t, e), nil)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := ebpf.NewProgram(spec)
		if err != nil {
			t.Fatalf("load %q: %v", e, err)
		}
		defer prog.Close()
		for i, fr := range frames {
			ret, err := prog.Run(&ebpf.RunOptions{Data: fr})
			if err != nil {
				t.Fatal(err)
			}
			if int32(ret) != actUnspec {
				t.Errorf("%q, frame %d: returned %d, want TC_ACT_UNSPEC", e, i, int32(ret))
			}
		}
	}
}

// The filter as the capture capability embeds it: other registers, stack
// in use by the caller, its own labels. The caller's stack must survive
// the filter's scratch words, and the verdicts must not change.
func TestInstructionsEmbedded(t *testing.T) {
	testutil.RequirePrivileged(t)
	frames, _ := buildFrames(t)
	const sentinel = 0x5eed
	// udp[0:2] - udp[2:2] has a non-constant right operand, so it goes
	// through a scratch word on the stack.
	for _, e := range []string{"udp[0:2] - udp[2:2] > 100 or tcp[13] & tcp-syn != 0", "", "greater 100"} {
		f := mustCompile(t, e)
		filter, err := f.Instructions(Options{
			Ctx: asm.R9, PacketStart: asm.R6, PacketEnd: asm.R7,
			Result: asm.R1, ResultLabel: "caller_verdict",
			Working:     [4]asm.Register{asm.R1, asm.R2, asm.R3, asm.R8},
			StackOffset: 8, LabelPrefix: "caller_filter",
		})
		if err != nil {
			t.Fatal(err)
		}
		insns := asm.Instructions{
			asm.Mov.Reg(asm.R9, asm.R1),
			asm.LoadMem(asm.R6, asm.R9, skbData, asm.Word),
			asm.LoadMem(asm.R7, asm.R9, skbDataEnd, asm.Word),
			asm.Mov.Imm(asm.R2, sentinel),
			asm.StoreMem(asm.R10, -8, asm.R2, asm.DWord),
		}
		insns = append(insns, filter...)
		insns = append(insns,
			// Return 2 if the caller's stack was clobbered, else the verdict.
			asm.LoadMem(asm.R2, asm.R10, -8, asm.DWord).WithSymbol("caller_verdict"),
			asm.Mov.Imm(asm.R0, 2),
			asm.JNE.Imm(asm.R2, sentinel, "caller_exit"),
			asm.Mov.Imm(asm.R0, actUnspec),
			asm.JEq.Imm(asm.R1, 0, "caller_exit"),
			asm.Mov.Imm(asm.R0, 1),
			asm.Return().WithSymbol("caller_exit"),
		)
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: insns, License: "Dual BSD/GPL"})
		if err != nil {
			t.Fatalf("load %q: %v", e, err)
		}
		defer prog.Close()
		var got []int
		for i, fr := range frames {
			ret, err := prog.Run(&ebpf.RunOptions{Data: fr})
			if err != nil {
				t.Fatal(err)
			}
			switch int32(ret) {
			case 1:
				got = append(got, i)
			case 2:
				t.Fatalf("%q, frame %d: the filter overwrote the caller's stack", e, i)
			}
		}
		if want := vmVerdicts(t, f, frames); !slices.Equal(got, want) {
			t.Errorf("%q: embedded filter matches %v, cBPF %v", e, got, want)
		}
	}
}

// `len` must read skb->len (the wire length, paged data and GSO included),
// not data_end - data as cbpfc computes it.
func TestLenReadsSkbLen(t *testing.T) {
	f := mustCompile(t, "greater 100 or len < 60 or len - 14 > 1000")
	o := Options{Ctx: asm.R6, PacketStart: asm.R7, PacketEnd: asm.R8, Result: asm.R0, ResultLabel: "out",
		Working: [4]asm.Register{asm.R2, asm.R3, asm.R4, asm.R5}}
	insns, err := f.Instructions(o)
	if err != nil {
		t.Fatal(err)
	}
	loads := 0
	for _, ins := range insns {
		if ins.Src == o.PacketEnd && ins.OpCode.ALUOp() == asm.Mov {
			t.Errorf("length still computed from data_end: %v", ins)
		}
		if ins.OpCode.Class().IsLoad() && ins.Src == o.Ctx && ins.Offset == skbLen {
			loads++
		}
	}
	if loads != 3 {
		t.Errorf("%d loads of skb->len, want 3:\n%v", loads, insns)
	}
}

func TestInstructionsOptionErrors(t *testing.T) {
	f := mustCompile(t, "tcp")
	good := Options{Ctx: asm.R6, PacketStart: asm.R7, PacketEnd: asm.R8, Result: asm.R0, ResultLabel: "out",
		Working: [4]asm.Register{asm.R2, asm.R3, asm.R4, asm.R5}}
	if _, err := f.Instructions(good); err != nil {
		t.Fatalf("good options: %v", err)
	}
	bad := map[string]func(o *Options){
		"no result label":       func(o *Options) { o.ResultLabel = "" },
		"ctx is working":        func(o *Options) { o.Ctx = asm.R2 },
		"start is end":          func(o *Options) { o.PacketStart = o.PacketEnd },
		"result is ctx":         func(o *Options) { o.Result = o.Ctx },
		"frame pointer working": func(o *Options) { o.Working[3] = asm.R10 },
	}
	for name, mut := range bad {
		o := good
		mut(&o)
		if _, err := f.Instructions(o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The long-jump layout must also pass the verifier and agree in eBPF.
func TestLongJumpsEBPF(t *testing.T) {
	testutil.RequirePrivileged(t)
	frames, _ := buildFrames(t)
	e := "not (port 10000 or port 10001 or port 10002 or port 10003 or port 10004 or port 10005 or port 10006 or port 10007 or port 10008 or port 10009 or port 10010 or port 10011 or port 10012 or port 10013 or port 10014 or port 10015 or port 10016 or port 10017 or port 10018 or port 10019 or port 10020) and tcp"
	f := mustCompile(t, e)
	if got, want := ebpfVerdicts(t, f, frames), vmVerdicts(t, mustCompile(t, "tcp"), frames); !slices.Equal(got, want) {
		t.Errorf("eBPF matches %v, want %v", got, want)
	}
}
