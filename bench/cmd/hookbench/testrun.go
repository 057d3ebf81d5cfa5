package main

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// testrunOpts are the flags of `hookbench testrun`.
type testrunOpts struct {
	objs   []string // flow program objects, compared in alternation
	tables string   // percpu or shared
	flows  int
	rounds int
	repeat int // runs per frame and call (1 flow); the 10 000-flow case cycles frames
}

// testrun measures the flow program's own run time per packet with
// BPF_PROG_TEST_RUN, for several builds of it alternately in one process, so
// that a busy machine disturbs every build alike. For one flow it runs one
// 64-byte UDP frame `repeat` times per call; for many flows it runs each
// frame once per call, cycling through all of them, so that every packet
// looks a different flow up in a table that holds them all. The kernel
// reports the mean run time of a call's runs; a call of one run includes the
// runner's two clock reads, the same for every build.
//
// It prints per round and object "ROUND OBJECT FLOWS TABLES NS_PER_PACKET".
func testrun(o testrunOpts) error {
	if len(o.objs) == 0 {
		return fmt.Errorf("need -obj (repeatable)")
	}
	frames := udpFrames(o.flows)
	progs := make([]*ebpf.Collection, len(o.objs))
	for i, path := range o.objs {
		coll, err := loadFlowObject(path, o.tables, max(o.flows*2, 65536))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer coll.Close()
		progs[i] = coll
		// Warm up: every flow is in the table before measuring.
		if _, err := runFrames(ingressProgram(coll), frames, 1); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	for r := 1; r <= o.rounds; r++ {
		for i, coll := range progs {
			ns, err := runFrames(ingressProgram(coll), frames, o.repeat)
			if err != nil {
				return fmt.Errorf("%s: %w", o.objs[i], err)
			}
			fmt.Printf("%d %s %d %s %.1f\n", r, o.objs[i], o.flows, o.tables, ns)
		}
	}
	return nil
}

// ingressProgram is the object's ingress entry program: loupe_ingress, or
// flows_ingress in objects built before the capability seam.
func ingressProgram(coll *ebpf.Collection) *ebpf.Program {
	if p := coll.Programs["loupe_ingress"]; p != nil {
		return p
	}
	return coll.Programs["flows_ingress"]
}

// loadFlowObject loads a loupe_bpfel.o (flows_bpfel.o before the seam) as the agent would (datapath.Load),
// but from a file, so that a build from another commit can be compared.
func loadFlowObject(path, tables string, budget int) (*ebpf.Collection, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, err
	}
	shared := uint8(0)
	switch tables {
	case "percpu":
	case "shared":
		shared = 1
	default:
		return nil, fmt.Errorf("tables %q: want percpu or shared", tables)
	}
	for _, name := range []string{"flows_a", "flows_b"} {
		m, ok := spec.Maps[name]
		if !ok {
			return nil, fmt.Errorf("no map %s", name)
		}
		m.MaxEntries = uint32(budget)
		if shared == 1 {
			m.Type = ebpf.Hash
		}
	}
	v, ok := spec.Variables["cfg_shared_table"]
	if !ok {
		return nil, fmt.Errorf("no variable cfg_shared_table")
	}
	if err := v.Set(shared); err != nil {
		return nil, err
	}
	if err := sizeSlots(spec, shared == 0, budget); err != nil {
		return nil, err
	}
	return ebpf.NewCollection(spec)
}

// sizeSlots sizes an object's per-CPU slot tables as datapath.Load does,
// if it has them (the objects since they replaced the per-CPU hash),
// whichever of their layouts the object has: budget flows a CPU in dense
// slots behind an index of twice as many entries (flow_index_*), or in
// slots probed in place, twice as many, with or without a list of them
// (flow_slot_list); the hash tables at one entry. An object of an earlier
// commit keeps its per-CPU hash.
func sizeSlots(spec *ebpf.CollectionSpec, percpu bool, budget int) error {
	a, ok := spec.Maps["flow_slots_a"]
	if !ok {
		return nil
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	slots, flows := 0, 0 // index entries (or slots in place) and flows a CPU
	if percpu {
		slots, flows = (2*budget+31)/32*32, budget // datapath.slotsFor
		for _, name := range []string{"flows_a", "flows_b"} {
			spec.Maps[name].MaxEntries = 1
		}
	}
	size := func(n int, names ...string) {
		for _, name := range names {
			if m, ok := spec.Maps[name]; ok {
				m.MaxEntries = uint32(max(n, 1))
			}
		}
	}
	if _, dense := spec.Maps["flow_index_a"]; dense {
		size(flows*ncpu, "flow_slots_a", "flow_slots_b")
		size(slots*ncpu, "flow_index_a", "flow_index_b")
	} else {
		size(slots*ncpu, a.Name, "flow_slots_b")
		size(2*flows*ncpu, "flow_slot_list")
	}
	if err := spec.Variables["cfg_slots"].Set(uint32(slots)); err != nil {
		return err
	}
	return spec.Variables["cfg_slot_budget"].Set(uint32(budget))
}

// runFrames runs prog on every frame, repeat times each, and returns the
// kernel's mean run time per packet in nanoseconds.
func runFrames(prog *ebpf.Program, frames [][]byte, repeat int) (float64, error) {
	var total time.Duration
	for _, f := range frames {
		ret, d, err := prog.Benchmark(f, repeat, nil)
		if err != nil {
			return 0, err
		}
		if int32(ret) != -1 {
			return 0, fmt.Errorf("program returned %d, want -1", int32(ret))
		}
		total += d * time.Duration(repeat)
	}
	return float64(total.Nanoseconds()) / float64(len(frames)*repeat), nil
}

// udpFrames returns n 64-byte IPv4/UDP frames of n distinct flows (source
// ports, then source addresses).
func udpFrames(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		f := make([]byte, 64)
		copy(f[0:], []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00})
		ip := f[14:34]
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(ip[2:], 64-14)
		copy(ip[12:], []byte{10, 1, byte(i >> 16), byte(i >> 8)})
		copy(ip[16:], []byte{10, 2, 0, 1})
		udp := f[34:42]
		binary.BigEndian.PutUint16(udp[0:], uint16(1024+i%50000))
		binary.BigEndian.PutUint16(udp[2:], 9)
		binary.BigEndian.PutUint16(udp[4:], 64-34)
		out[i] = f
	}
	return out
}

// memObjects prints the kernel's memlock accounting of both flow tables of
// each object, per table kind, for a budget of n flows.
func memObjects(objs []string, n int) error {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	for _, path := range objs {
		for _, kind := range []string{"percpu", "shared"} {
			coll, err := loadFlowObject(path, kind, n)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			var tables uint64
			for _, name := range []string{"flows_a", "flows_b"} {
				info, err := coll.Maps[name].Info()
				if err != nil {
					coll.Close()
					return err
				}
				m, _ := info.Memlock()
				tables += m
			}
			coll.Close()
			fmt.Printf("%s %s %d %d\n", path, kind, tables, cpus)
		}
	}
	return nil
}
