package main

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"loupe/internal/datapath"
)

// replayOpts are the flags of `hookbench replay`.
type replayOpts struct {
	objs     []string // flow program objects; "empty" is the empty program
	iface    string   // where the program sits (TCX ingress), in this namespace
	senderNS string   // the namespace tcpreplay sends from
	senderIf string   // and its interface there
	pcap     string
	rounds   int
	loops    int    // tcpreplay --loop
	budget   int    // flows a table holds (a CPU's, per-CPU tables)
	prog     string // the entry program: loupe_flows_ingress or loupe_ingress
	caps     string // capabilities switched on besides flows (loupe_ingress), e.g. "dns,handshake"
}

// replay measures the BPF run time per packet (bpf_stats) of several
// builds of the flow program on the same replayed traffic, attached one at
// a time to the same hook and alternating in every round, the round's
// first build moving on each round: on a machine whose speed drifts, each
// build meets the drift alike. Nothing drains the tables: a flow's first
// packet is an insert and every later one a hit, as in an interval much
// longer than the trace. It prints per round and build
// "ROUND OBJECT NS_PER_PACKET RUNS", then per build "median OBJECT NS MIN
// NS". Needs kernel.bpf_stats_enabled=1.
func replay(o replayOpts) error {
	if len(o.objs) == 0 || o.iface == "" || o.senderNS == "" || o.senderIf == "" || o.pcap == "" {
		return fmt.Errorf("replay needs -obj (repeatable), -iface, -sender-ns, -sender-iface and -pcap")
	}
	idx, err := ifindex(o.iface)
	if err != nil {
		return err
	}
	progs := make([]*ebpf.Program, len(o.objs))
	for i, path := range o.objs {
		if path == "empty" {
			if progs[i], err = datapath.LoadBaseline(); err != nil {
				return err
			}
			defer progs[i].Close()
			continue
		}
		coll, err := loadReplayObject(path, o)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer coll.Close()
		if progs[i] = coll.Programs[o.prog]; progs[i] == nil {
			return fmt.Errorf("%s: no program %s", path, o.prog)
		}
	}
	ns := make([][]float64, len(progs))
	for r := range o.rounds {
		for j := range progs {
			i := (j + r) % len(progs)
			v, runs, err := replayOnce(progs[i], idx, o)
			if err != nil {
				return fmt.Errorf("%s: %w", o.objs[i], err)
			}
			ns[i] = append(ns[i], v)
			fmt.Printf("%d %s %.1f %d\n", r+1, o.objs[i], v, runs)
		}
	}
	for i, v := range ns {
		slices.Sort(v)
		fmt.Printf("median %s %.1f min %.1f\n", o.objs[i], v[len(v)/2], v[0])
	}
	return nil
}

// loadReplayObject loads a loupe_bpfel.o with per-CPU tables of o.budget
// flows a CPU and the capabilities of o switched on.
func loadReplayObject(path string, o replayOpts) (*ebpf.Collection, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"flows_a", "flows_b", "tunnels_a", "tunnels_b"} {
		if m := spec.Maps[name]; m != nil {
			m.MaxEntries = uint32(o.budget)
		}
	}
	if err := sizeSlots(spec, true, o.budget); err != nil {
		return nil, err
	}
	for _, c := range strings.FieldsFunc(o.caps, func(r rune) bool { return r == ',' }) {
		v := spec.Variables["cfg_cap_"+c]
		if v == nil {
			return nil, fmt.Errorf("no capability %s", c)
		}
		if err := v.Set(uint8(1)); err != nil {
			return nil, err
		}
	}
	for name := range spec.Programs {
		if name != o.prog {
			delete(spec.Programs, name)
		}
	}
	return ebpf.NewCollection(spec)
}

// replayOnce attaches prog, replays the pcap once (o.loops times through)
// and returns the program's run time per packet over it.
func replayOnce(prog *ebpf.Program, idx int, o replayOpts) (float64, uint64, error) {
	l, err := link.AttachTCX(link.TCXOptions{Interface: idx, Program: prog, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return 0, 0, err
	}
	defer l.Close()
	s0, err := prog.Stats()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.Command("ip", "netns", "exec", o.senderNS, "taskset", "-c", "1", "tcpreplay", "-i", o.senderIf,
		"--preload-pcap", "--topspeed", "--loop", strconv.Itoa(o.loops), o.pcap)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("tcpreplay: %v: %s", err, out)
	}
	s1, err := prog.Stats()
	if err != nil {
		return 0, 0, err
	}
	runs := s1.RunCount - s0.RunCount
	if runs == 0 {
		return 0, 0, fmt.Errorf("the program never ran (kernel.bpf_stats_enabled=0?)")
	}
	return float64((s1.Runtime - s0.Runtime).Nanoseconds()) / float64(runs), runs, nil
}
