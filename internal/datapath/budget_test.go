package datapath

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"loupe/internal/testutil"
)

// TestMemoryPlanMatchesKernel holds the planner's estimate of every map to
// what the kernel accounts for it, and a loaded datapath to its budget.
func TestMemoryPlanMatchesKernel(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, tc := range []struct {
		name   string
		opts   Options
		budget uint64
	}{
		{"percpu/flows", Options{Tables: PerCPU, Capabilities: []string{"flows"}}, 8 << 20},
		{"shared/flows", Options{Tables: Shared, Capabilities: []string{"flows"}}, 8 << 20},
		{"percpu/all", Options{Tables: PerCPU, Capabilities: []string{"flows", "capture", "rules"}}, 64 << 20},
		{"percpu/given-budget", Options{Tables: PerCPU, FlowBudget: 4096, Capabilities: []string{"flows"}}, 8 << 20},
		{"ringbuf", Options{Tables: RingBuf, Capabilities: []string{"flows"}}, 8 << 20},
		{"percpu/given-sketch", Options{Tables: PerCPU, SketchBytes: 1 << 20, Capabilities: []string{"flows"}}, 16 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Memory, opts.RingBufSize = tc.budget, 1<<20
			dp := loadForTest(t, opts)
			plan := dp.Plan()
			total, tables, err := dp.MemoryBytes()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("plan %+v; kernel: total %d, tables %d", plan, total, tables)
			if total > tc.budget {
				t.Fatalf("the maps take %d bytes, over the budget of %d", total, tc.budget)
			}
			// Sized from the budget, the maps fill most of it, once
			// the tries are full.
			full := total
			for _, m := range dp.maps() {
				if grows(m) {
					full += mapBytes(&ebpf.MapSpec{Type: m.Type(), KeySize: m.KeySize(), ValueSize: m.ValueSize(), MaxEntries: m.MaxEntries()}, dp.CPUs())
				}
			}
			if opts.FlowBudget == 0 && opts.Tables != RingBuf && full < tc.budget*9/10 {
				t.Fatalf("the maps take %d bytes (%d with full tries) of a budget of %d: the plan wastes it", total, full, tc.budget)
			}
			// With room for it, a sketch takes half of what the maps of
			// fixed size and the ring buffer leave.
			if opts.Tables != RingBuf && opts.FlowBudget == 0 && opts.SketchBytes == 0 {
				if _, ok := dp.SketchParams(); !ok || plan.SketchBytes < (tc.budget-plan.OtherBytes-plan.RingBytes)*4/10 {
					t.Fatalf("sketch %d bytes (on: %v), want about half of the budget's rest", plan.SketchBytes, ok)
				}
			}
			if opts.FlowBudget > 0 && plan.FlowBudget != opts.FlowBudget {
				t.Fatalf("flow budget %d, want the given %d", plan.FlowBudget, opts.FlowBudget)
			}
			// Every map's estimate is within 1 % (or a page) of the kernel's.
			var bad []string
			for _, m := range dp.maps() {
				if grows(m) {
					continue // counted full, allocated as entries come
				}
				info, err := m.Info()
				if err != nil {
					t.Fatal(err)
				}
				got, _ := info.Memlock()
				spec := &ebpf.MapSpec{Type: m.Type(), KeySize: m.KeySize(), ValueSize: m.ValueSize(), MaxEntries: m.MaxEntries(), Flags: m.Flags()}
				est := mapBytes(spec, dp.CPUs())
				if diff := int64(est) - int64(got); diff < -4096 && -diff > int64(got)/100 || diff > 4096 && diff > int64(got)/100 {
					bad = append(bad, info.Name+": "+spec.Type.String()+" kernel "+itoa(got)+" estimate "+itoa(est))
				}
			}
			if len(bad) > 0 {
				t.Fatalf("estimates off:\n%s", strings.Join(bad, "\n"))
			}
		})
	}
}

// grows tells the maps that take memory as entries come: tries and hashes
// without preallocation.
func grows(m *ebpf.Map) bool {
	return m.Type() == ebpf.LPMTrie || m.Flags()&unix.BPF_F_NO_PREALLOC != 0
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
