// Command hookbench is the benchmarks' handle on the kernel side of Loupe.
// It works on the interfaces of the network namespace it runs in (start it
// with `ip netns exec NS hookbench ...`).
//
//	hookbench attach -iface IF [-spin NS]
//	    Attach the empty TC program (datapath.LoadBaseline) with TCX at the
//	    ingress and egress of IF, print "attached", and hold it until
//	    SIGINT or SIGTERM. This is the "qdisc-only" configuration: the
//	    hook's own cost without the flow program. With -spin, a program
//	    that does nothing but read the clock until NS nanoseconds have
//	    passed since it started, then lets the packet go on: a known cost
//	    per run, to see what a hook's run time costs the traffic through
//	    it (bench/latency.sh, part "hooks").
//	hookbench stats -iface IF
//	    Print one line per program attached with TCX to IF:
//	    "DIRECTIONS PROG_ID NAME RUN_CNT RUN_TIME_NS RECURSION_MISSES"
//	    (DIRECTIONS is "ingress", "egress" or "ingress,egress").
//	    The counters only move while kernel.bpf_stats_enabled is 1.
//	hookbench progs -prefix NAME
//	    Print one line per loaded program whose name (the kernel keeps its
//	    first 15 bytes) starts with NAME, whatever it is attached to:
//	    "PROG_ID NAME RUN_CNT RUN_TIME_NS RECURSION_MISSES".
//	hookbench signals [-table-size N] [-empty]
//	    Load and attach the kernel signals' programs (datapath.LoadSignals,
//	    every signal on), print "attached", drain their tables every second
//	    as the agent would, and at SIGINT or SIGTERM print one line per
//	    signal: "stats SIGNAL TRACEPOINT RUN_CNT RUN_TIME_NS
//	    RECURSION_MISSES", its program's counters since it was loaded
//	    (the run time moves only while kernel.bpf_stats_enabled is 1). The
//	    tracepoints are the whole machine's: run it in any namespace.
//	    With -empty, an empty program at each of the three tracepoints
//	    instead: the cost of a raw tracepoint's dispatch and of bpf_stats.
//	hookbench mem -budget N
//	    Load the flow datapath with per-CPU tables, then with shared
//	    tables, of N flows each, and print per kind
//	    "KIND TABLES_BYTES TOTAL_BYTES CPUS": the kernel's memlock
//	    accounting of both flow tables (active and standby) and of all maps.
//	hookbench mem -budget N -obj A.o [-obj B.o ...]
//	    The same for flow program objects loaded from files (see testrun):
//	    "OBJECT KIND TABLES_BYTES CPUS".
//	hookbench testrun -obj A.o [-obj B.o ...] [-tables percpu|shared] [-flows N] [-rounds R] [-repeat K]
//	    Load each loupe_bpfel.o (flows_bpfel.o before the seam; say, this tree's and one from another
//	    commit: git show main:internal/datapath/loupe_bpfel.o > old.o) and
//	    measure its ingress program's run time per packet on N distinct
//	    64-byte UDP flows with BPF_PROG_TEST_RUN, the objects in
//	    alternation, R rounds. Prints "ROUND OBJECT FLOWS TABLES NS" lines.
//	    Needs no interface and no traffic, so it can compare builds on a
//	    busy machine; the absolute numbers are not bpf_stats' (see
//	    testrun.go).
//	hookbench replay -iface IF -sender-ns NS -sender-iface IF2 -pcap P -obj A.o [-obj B.o | -obj empty ...]
//	        [-rounds R] [-loops L] [-flow-budget N] [-prog loupe_ingress -caps dns,handshake]
//	    Attach each object's entry program (or the empty program) in turn at
//	    IF's TCX ingress, replay P from NS with tcpreplay --topspeed, and
//	    print its bpf_stats ns per packet over the replay, the objects in
//	    alternation, R rounds, then each one's median: real traffic, on the
//	    hook, for comparing builds (replay.go). Needs
//	    kernel.bpf_stats_enabled=1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"loupe/internal/datapath"
)

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		log.Fatal("usage: hookbench attach|stats|progs|signals|mem|testrun|replay [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	iface := fs.String("iface", "", "interface")
	budget := fs.Int("budget", 100000, "flow budget (mem)")
	var tr testrunOpts
	fs.Func("obj", "flow program object to measure (testrun, repeatable)", func(s string) error {
		tr.objs = append(tr.objs, s)
		return nil
	})
	fs.StringVar(&tr.tables, "tables", "percpu", "percpu or shared (testrun)")
	fs.IntVar(&tr.flows, "flows", 1, "distinct flows (testrun)")
	fs.IntVar(&tr.rounds, "rounds", 5, "rounds (testrun)")
	fs.IntVar(&tr.repeat, "repeat", 1, "runs of each frame per call (testrun)")
	rp := replayOpts{prog: "loupe_flows_ingress", loops: 1, budget: 65536}
	fs.StringVar(&rp.senderNS, "sender-ns", "", "namespace tcpreplay sends from (replay)")
	fs.StringVar(&rp.senderIf, "sender-iface", "", "interface tcpreplay sends on (replay)")
	fs.StringVar(&rp.pcap, "pcap", "", "trace to replay (replay)")
	fs.IntVar(&rp.loops, "loops", 1, "times through the trace per round (replay)")
	fs.IntVar(&rp.budget, "flow-budget", 65536, "flows a CPU's table holds (replay)")
	fs.StringVar(&rp.prog, "prog", "loupe_flows_ingress", "entry program (replay): loupe_flows_ingress, or loupe_ingress with -caps")
	fs.StringVar(&rp.caps, "caps", "", "capabilities besides flows, comma-separated (replay, loupe_ingress)")
	tableSize := fs.Int("table-size", 16384, "5-tuples per signal table (signals)")
	empty := fs.Bool("empty", false, "attach empty programs to the signals' tracepoints (signals)")
	prefix := fs.String("prefix", "", "program name prefix (progs)")
	spin := fs.Duration("spin", 0, "attach a program that spins this long per run instead of the empty one (attach)")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "attach":
		err = attach(*iface, *spin)
	case "stats":
		err = stats(*iface)
	case "progs":
		err = progs(*prefix)
	case "signals":
		if *empty {
			err = emptySignals()
		} else {
			err = signals(*tableSize)
		}
	case "mem":
		if len(tr.objs) > 0 {
			err = memObjects(tr.objs, *budget)
		} else {
			err = mem(*budget)
		}
	case "testrun":
		err = testrun(tr)
	case "replay":
		rp.objs, rp.iface, rp.rounds = tr.objs, *iface, tr.rounds
		err = replay(rp)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		log.Fatal("hookbench: ", err)
	}
}

func ifindex(name string) (int, error) {
	if name == "" {
		return 0, fmt.Errorf("need -iface")
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

func attach(name string, spin time.Duration) error {
	idx, err := ifindex(name)
	if err != nil {
		return err
	}
	load := datapath.LoadBaseline
	if spin > 0 {
		load = func() (*ebpf.Program, error) { return spinProgram(spin) }
	}
	prog, err := load()
	if err != nil {
		return err
	}
	defer prog.Close()
	for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
		l, err := link.AttachTCX(link.TCXOptions{Interface: idx, Program: prog, Attach: at})
		if err != nil {
			return fmt.Errorf("attach %s to %s: %w", at, name, err)
		}
		defer l.Close()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	fmt.Println("attached")
	<-sig
	return nil
}

func stats(name string) error {
	idx, err := ifindex(name)
	if err != nil {
		return err
	}
	// One program may sit at both hooks (the empty one does): its
	// counters are per program, so each program is printed once.
	dirs := map[ebpf.ProgramID]string{}
	var order []ebpf.ProgramID
	for _, d := range []struct {
		name string
		at   ebpf.AttachType
	}{{"ingress", ebpf.AttachTCXIngress}, {"egress", ebpf.AttachTCXEgress}} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: d.at})
		if err != nil {
			return fmt.Errorf("query %s programs of %s: %w", d.name, name, err)
		}
		for _, ap := range res.Programs {
			if dirs[ap.ID] == "" {
				order = append(order, ap.ID)
				dirs[ap.ID] = d.name
			} else {
				dirs[ap.ID] += "," + d.name
			}
		}
	}
	for _, id := range order {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			return fmt.Errorf("open program %d: %w", id, err)
		}
		info, err := p.Info()
		if err != nil {
			p.Close()
			return err
		}
		st, err := p.Stats()
		p.Close()
		if err != nil {
			return err
		}
		fmt.Printf("%s %d %s %d %d %d\n", dirs[id], id, info.Name, st.RunCount, st.Runtime.Nanoseconds(), st.RecursionMisses)
	}
	return nil
}

func progs(prefix string) error {
	if prefix == "" {
		return errors.New("progs needs -prefix")
	}
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list programs: %w", err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // unloaded meanwhile
		}
		if err != nil {
			return fmt.Errorf("open program %d: %w", id, err)
		}
		info, err := p.Info()
		if err == nil && strings.HasPrefix(info.Name, prefix) {
			var st *ebpf.ProgramStats
			if st, err = p.Stats(); err == nil {
				fmt.Printf("%d %s %d %d %d\n", id, info.Name, st.RunCount, st.Runtime.Nanoseconds(), st.RecursionMisses)
			}
		}
		p.Close()
		if err != nil {
			return err
		}
	}
}

func signals(tableSize int) error {
	on := map[datapath.Signal]bool{}
	for _, s := range datapath.AllSignals() {
		on[s] = true
	}
	sig, err := datapath.LoadSignals(datapath.SignalsOptions{On: on, TableSize: tableSize})
	if err != nil {
		return err
	}
	defer sig.Close()
	for _, s := range datapath.AllSignals() {
		if st := sig.State(s); !st.Up {
			return fmt.Errorf("signal %s is off: %s", s, st.Reason)
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	fmt.Println("attached")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		case <-tick.C:
		}
		if _, err := sig.Drain(); err != nil {
			return err
		}
	}
	for _, s := range datapath.AllSignals() {
		st, _, err := sig.ProgramStats(s)
		if err != nil {
			return err
		}
		fmt.Printf("stats %s %s %d %d %d\n", s, s.Tracepoint(), st.RunCount, st.Runtime.Nanoseconds(), st.RecursionMisses)
	}
	cs, err := sig.Counters()
	if err != nil {
		return err
	}
	for _, c := range cs {
		fmt.Printf("counter %s %d\n", c.Name, c.Value)
	}
	return nil
}

// emptySignals attaches a program that returns at once to each signal's
// tracepoint, holds them until SIGINT or SIGTERM, and prints their
// counters as signals does.
func emptySignals() error {
	type attached struct {
		sig  datapath.Signal
		prog *ebpf.Program
	}
	var all []attached
	for _, s := range datapath.AllSignals() {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name: "empty_" + s.String(), Type: ebpf.RawTracepoint, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		})
		if err != nil {
			return fmt.Errorf("load empty program: %w", err)
		}
		defer prog.Close()
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: s.Tracepoint(), Program: prog})
		if err != nil {
			return fmt.Errorf("attach to %s: %w", s.Tracepoint(), err)
		}
		defer l.Close()
		all = append(all, attached{s, prog})
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	fmt.Println("attached")
	<-stop
	for _, a := range all {
		st, err := a.prog.Stats()
		if err != nil {
			return err
		}
		fmt.Printf("stats %s %s %d %d %d\n", a.sig, a.sig.Tracepoint(), st.RunCount, st.Runtime.Nanoseconds(), st.RecursionMisses)
	}
	return nil
}

func mem(budget int) error {
	for _, k := range []datapath.TableKind{datapath.PerCPU, datapath.Shared} {
		dp, err := datapath.Load(datapath.Options{FlowBudget: budget, Tables: k, Capabilities: []string{"flows"}})
		if err != nil {
			return err
		}
		total, tables, err := dp.MemoryBytes()
		cpus := dp.CPUs()
		dp.Close()
		if err != nil {
			return err
		}
		fmt.Printf("%s %d %d %d\n", k, tables, total, cpus)
	}
	return nil
}

// spinLoops bounds the spinning program's loop, for the verifier: each
// turn reads the clock (tens of ns), so the bound is past any -spin up to
// maxSpin.
const spinLoops = 4096

// maxSpin is the longest -spin: well within spinLoops clock reads.
const maxSpin = 50 * time.Microsecond

// spinProgram is a TC program that reads the clock until d has passed
// since it started (or spinLoops turns), then lets the packet go on
// (TCX_NEXT): a hook program of a known cost per run and no memory of its
// own.
func spinProgram(d time.Duration) (*ebpf.Program, error) {
	if d > maxSpin {
		return nil, fmt.Errorf("spin %v: at most %v (the loop's bound)", d, maxSpin)
	}
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "spin",
		Type:    ebpf.SchedCLS,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.FnKtimeGetNs.Call(),
			asm.Mov.Reg(asm.R6, asm.R0), // the start
			asm.Mov.Imm(asm.R7, spinLoops),
			asm.FnKtimeGetNs.Call().WithSymbol("turn"),
			asm.Sub.Reg(asm.R0, asm.R6),
			asm.JGE.Imm(asm.R0, int32(d.Nanoseconds()), "out"),
			asm.Sub.Imm(asm.R7, 1),
			asm.JNE.Imm(asm.R7, 0, "turn"),
			asm.Mov.Imm(asm.R0, -1).WithSymbol("out"), // TCX_NEXT / TC_ACT_UNSPEC
			asm.Return(),
		},
	})
}
