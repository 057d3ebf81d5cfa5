package datapath

import (
	"testing"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
)

func loadForTest(t *testing.T, opts Options) *Datapath {
	t.Helper()
	dp, err := Load(opts)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { dp.Close() })
	return dp
}

// runProg runs the program of one direction once on frame with
// BPF_PROG_TEST_RUN and returns its return code.
func runProg(t *testing.T, dp *Datapath, dir flow.Direction, frame []byte) uint32 {
	t.Helper()
	prog := dp.Ingress()
	if dir == flow.Egress {
		prog = dp.Egress()
	}
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatalf("run %s program: %v", dir, err)
	}
	return ret
}

type drained struct {
	key   flow.Key
	stats flow.Stats
	cpus  int // per-CPU copies that counted something
}

// drainAll rotates the tables and returns every flow, merged across CPUs.
func drainAll(t *testing.T, dp *Datapath) []drained {
	t.Helper()
	var out []drained
	_, err := dp.Rotate(func(k *flow.Key, perCPU []flow.Stats) {
		d := drained{key: *k}
		for i := range perCPU {
			if perCPU[i].Packets > 0 {
				d.cpus++
			}
		}
		d.stats, _ = flow.MergePerCPU(perCPU, 0)
		out = append(out, d)
	})
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	return out
}

func counterMap(t *testing.T, dp *Datapath) map[string]uint64 {
	t.Helper()
	cs, err := dp.Counters()
	if err != nil {
		t.Fatalf("counters: %v", err)
	}
	m := make(map[string]uint64, len(cs))
	for _, c := range cs {
		m[c.Name] = c.Value
	}
	return m
}
