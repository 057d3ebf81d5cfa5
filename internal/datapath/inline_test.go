package datapath

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"loupe/internal/testutil"
)

// TestMapLookupsInlined checks that no map lookup of the entry programs
// goes through the generic helper. The verifier inlines an array lookup,
// or calls the map's own lookup directly, only where one map reaches the
// call; where clang picked the map before one shared call (`if (half)
// lookup(&map_b) else lookup(&map_a)`), the program calls
// bpf_map_lookup_elem, which calls the map's lookup indirectly. The
// per-CPU tables' probe did that twice a packet: 129-137 against 96-97 ns a
// packet at one flow (docs/architecture.md, "Helper calls per packet").
//
// The verified program's calls name their helper by its address, relative
// to __bpf_call_base (the kernel hides it from who may not read kernel
// addresses: then the test is skipped).
func TestMapLookupsInlined(t *testing.T) {
	testutil.RequirePrivileged(t)
	generic := helperOffset(t, "bpf_map_lookup_elem")
	all, err := Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"flows", Options{FlowBudget: 64, Capabilities: []string{"flows"}}},
		{"every capability", Options{FlowBudget: 64, Capabilities: all}},
		{"shared tables", Options{FlowBudget: 64, Tables: Shared, Capabilities: []string{"flows"}}},
		{"sketch", Options{FlowBudget: 64, SketchBytes: 1 << 20, Capabilities: []string{"flows"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.RingBufSize = 1 << 16
			dp := loadForTest(t, c.opts)
			for _, prog := range []*ebpf.Program{dp.Ingress(), dp.Egress()} {
				info, err := prog.Info()
				if err != nil {
					t.Fatal(err)
				}
				insns, err := info.Instructions()
				if err != nil {
					t.Fatal(err)
				}
				calls := 0
				for i, ins := range insns {
					if !ins.IsBuiltinCall() {
						continue
					}
					calls++
					if ins.Constant == generic {
						t.Errorf("%s: instruction %d calls bpf_map_lookup_elem: a lookup the verifier could not inline", info.Name, i)
					}
				}
				if calls == 0 {
					t.Fatalf("%s: no helper call in %d instructions", info.Name, len(insns))
				}
			}
		})
	}
}

// helperOffset is where a verified program's call to the kernel function
// name points: its address less __bpf_call_base's, from /proc/kallsyms.
func helperOffset(t *testing.T, name string) int64 {
	t.Helper()
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Skipf("kallsyms: %v", err)
	}
	defer f.Close()
	addr := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || (fields[2] != name && fields[2] != "__bpf_call_base") {
			continue
		}
		if _, ok := addr[fields[2]]; ok {
			continue
		}
		a, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		addr[fields[2]] = a
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	base, fn := addr["__bpf_call_base"], addr[name]
	if base == 0 || fn == 0 {
		t.Skipf("kallsyms hides kernel addresses (%s %#x, __bpf_call_base %#x)", name, fn, base)
	}
	return int64(int32(fn - base))
}
