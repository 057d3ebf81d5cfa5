package datapath

import (
	"testing"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
)

// loadForTest loads the datapath with the flows capability on, unless opts
// names the capabilities.
func loadForTest(t testing.TB, opts Options) *Datapath {
	t.Helper()
	if opts.Capabilities == nil {
		opts.Capabilities = []string{"flows"}
	}
	dp, err := Load(opts)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { dp.Close() })
	return dp
}

// runProg runs the program of one direction once on frame with
// BPF_PROG_TEST_RUN and returns its return code.
func runProg(t testing.TB, dp *Datapath, dir flow.Direction, frame []byte) uint32 {
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

// drainAll rotates the tables and returns every flow, merged across CPUs,
// then clears the drained table.
func drainAll(t testing.TB, dp *Datapath) []drained {
	t.Helper()
	d, err := dp.Rotate()
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	return readDrain(t, d)
}

// readDrain reads a drain, merged across CPUs, then clears it.
func readDrain(t testing.TB, d flow.Drain) []drained {
	t.Helper()
	var out []drained
	_, err := d.Read(func(k *flow.Key, perCPU []flow.Stats) {
		r := drained{key: *k}
		for i := range perCPU {
			if perCPU[i].Packets > 0 {
				r.cpus++
			}
		}
		r.stats, _ = flow.MergePerCPU(perCPU, 0)
		out = append(out, r)
	})
	if err != nil {
		t.Fatalf("read drained table: %v", err)
	}
	if err := d.Clear(); err != nil {
		t.Fatalf("clear drained table: %v", err)
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
