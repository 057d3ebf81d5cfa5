package datapath

import (
	"bytes"
	"runtime"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// onCPU runs fn on a thread bound to cpu, so that the programs fn runs
// (BPF_PROG_TEST_RUN runs on the caller's CPU) write that CPU's slots.
func onCPU(t *testing.T, cpu int, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			t.Errorf("bind to CPU %d: %v", cpu, err)
			return
		}
		fn()
	}()
	<-done
	if t.Failed() {
		t.FailNow()
	}
}

func requireCPUs(t *testing.T, n int) {
	t.Helper()
	if runtime.NumCPU() < n {
		t.Skipf("needs %d CPUs, has %d", n, runtime.NumCPU())
	}
}

// TestSlotHashMatchesProgram: every flow the program put in a slot has
// its index entry where the Go side computes it (slotHash, slotHome): at
// its home entry or at most slotProbes-1 after it, holding the tag the
// hash gives and the slot's number; the slots are filled in order.
func TestSlotHashMatchesProgram(t *testing.T) {
	testutil.RequirePrivileged(t)
	if s := unsafe.Sizeof(loupeFlowSlot{}); s != 128 {
		t.Fatalf("struct flow_slot is %d bytes, want 128 (two cache lines)", s)
	}
	if s := unsafe.Sizeof(loupeFlowKey{}); s != 60 {
		t.Fatalf("struct flow_key is %d bytes, want 60 (slotHash reads 60)", s)
	}
	const flows = 1000
	dp := loadForTest(t, Options{FlowBudget: flows, RingBufSize: 1 << 16})
	onCPU(t, 0, func() {
		for i := range flows {
			runProg(t, dp, flow.Ingress, udpFrame(t, uint16(1+i), 10))
		}
	})
	h := dp.slots[0]
	b := newSlotBuf(h.ncpu)
	if err := h.filled(b); err != nil {
		t.Fatal(err)
	}
	if n := b.fills[0].Used; n != flows {
		t.Fatalf("CPU 0 filled %d slots, want %d", n, flows)
	}
	slots, err := h.readSlots(b, 0, 0, flows)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint16]bool{}
	for n, s := range slots {
		hash := slotHash(&s.Key)
		if want := uint32(hash) | 1; s.Tag != want {
			t.Fatalf("slot %d: tag %#x, the Go hash gives %#x", n, s.Tag, want)
		}
		at := int(s.Entry)
		if at >= h.perCPU {
			t.Fatalf("slot %d: index entry %d, outside CPU 0's %d", n, at, h.perCPU)
		}
		if d := (at - slotHome(hash, h.perCPU) + h.perCPU) % h.perCPU; d >= slotProbes {
			t.Fatalf("slot %d: its entry is %d past its home, more than the %d probes", n, d, slotProbes)
		}
		var e uint64
		if err := h.index.Lookup(uint32(at), &e); err != nil {
			t.Fatal(err)
		}
		if want := uint64(s.Tag)<<32 | uint64(n+1); e != want {
			t.Fatalf("slot %d: index entry %d holds %#x, want %#x", n, at, e, want)
		}
		seen[s.Key.SrcPort] = true
	}
	if len(seen) != flows {
		t.Fatalf("%d distinct flows in CPU 0's slots, want %d", len(seen), flows)
	}
}

// TestSlotsMergeAcrossCPUs: flows counted on two CPUs come out of a drain
// once each, with each CPU's counts, at the budget (every CPU's list full,
// flows past the region's end), and the cleared table holds nothing.
func TestSlotsMergeAcrossCPUs(t *testing.T) {
	testutil.RequirePrivileged(t)
	requireCPUs(t, 2)
	const flows = 9000
	dp := loadForTest(t, Options{FlowBudget: flows, RingBufSize: 1 << 20})
	// CPU 0 sees every flow once; CPU 1 every third flow twice.
	frames := make([][]byte, flows)
	for i := range frames {
		frames[i] = udpFrame(t, uint16(1+i), i%50)
	}
	onCPU(t, 0, func() {
		for _, f := range frames {
			runProg(t, dp, flow.Ingress, f)
		}
	})
	onCPU(t, 1, func() {
		for i := 0; i < flows; i += 3 {
			runProg(t, dp, flow.Ingress, frames[i])
			runProg(t, dp, flow.Ingress, frames[i])
		}
	})
	got := drainAll(t, dp)
	if len(got) != flows {
		t.Fatalf("drained %d flows, want %d", len(got), flows)
	}
	seen := make(map[uint16]bool)
	for _, d := range got {
		i := int(d.key.SrcPort) - 1
		if seen[d.key.SrcPort] {
			t.Fatalf("flow %d drained twice", i)
		}
		seen[d.key.SrcPort] = true
		wantPk, wantCPUs := uint64(1), 1
		if i%3 == 0 {
			wantPk, wantCPUs = 3, 2
		}
		if d.stats.Packets != wantPk || d.stats.Bytes != wantPk*uint64(len(frames[i])) || d.cpus != wantCPUs {
			t.Fatalf("flow %d: %d packets %d bytes on %d CPUs, want %d, %d on %d",
				i, d.stats.Packets, d.stats.Bytes, d.cpus, wantPk, wantPk*uint64(len(frames[i])), wantCPUs)
		}
	}
	// Clearing freed every slot and index entry: none is left taken.
	for _, h := range dp.slots {
		for _, m := range []*ebpf.Map{h.m, h.index} {
			var k uint32
			v := make([]byte, m.ValueSize())
			for it := m.Iterate(); it.Next(&k, &v); {
				if !bytes.Equal(v, make([]byte, len(v))) {
					t.Fatalf("half %d: %v entry %d still taken after the drain", h.idx, m, k)
				}
			}
		}
	}
}

// TestSlotBudgetIsPerCPU: a CPU holds the flow budget, the next flow it
// sees goes through the ring buffer (counted as map_full), while another
// CPU still has room for it; a cleared table takes the budget again.
func TestSlotBudgetIsPerCPU(t *testing.T) {
	testutil.RequirePrivileged(t)
	requireCPUs(t, 2)
	const budget = 64
	dp := loadForTest(t, Options{FlowBudget: budget, RingBufSize: 1 << 16})
	counters := func() map[string]uint64 {
		cs, err := dp.Counters()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]uint64{}
		for _, c := range cs {
			m[c.Name] = c.Value
		}
		return m
	}
	for round := range 2 {
		before := counters()["map_full"]
		onCPU(t, 0, func() {
			for i := range budget + 1 {
				runProg(t, dp, flow.Ingress, udpFrame(t, uint16(1+i), 10))
			}
		})
		onCPU(t, 1, func() { runProg(t, dp, flow.Ingress, udpFrame(t, budget+1, 10)) })
		if full := counters()["map_full"] - before; full != 1 {
			t.Fatalf("round %d: %d packets refused as map_full, want 1 (CPU 0's flow past its budget)", round, full)
		}
		// What the ring buffer took is the evictor's to join; the tables
		// hold the budget on CPU 0 and the extra flow on CPU 1.
		got := drainAll(t, dp)
		if len(got) != budget+1 {
			t.Fatalf("round %d: %d flows in the table, want %d", round, len(got), budget+1)
		}
		for _, d := range got {
			if d.key.SrcPort == budget+1 && d.stats.Packets != 1 {
				t.Fatalf("round %d: the flow past CPU 0's budget has %d packets in the table, want CPU 1's 1", round, d.stats.Packets)
			}
		}
		drainAll(t, dp) // the other half: back to the first
	}
	// The ring buffer carries the refused packet.
	rg, err := openRing(dp.objs.FlowEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer rg.close()
	events := 0
	for {
		if _, _, err := rg.next(); err != nil {
			break
		}
		events++
	}
	if events != 2 {
		t.Fatalf("%d events in the ring buffer, want the 2 refused packets", events)
	}
}

// TestSlotPlaceSharedHash: two waiting flows of the same 64-bit hash (a
// collision forced here) keep places of their own, each found again.
func TestSlotPlaceSharedHash(t *testing.T) {
	b := newSlotBuf(2)
	var k1, k2 loupeFlowKey
	k1.SrcPort, k2.SrcPort = 1, 2
	a := b.place(7, &k1, 2)
	c := b.place(7, &k2, 2)
	if a == c {
		t.Fatalf("two keys of one hash share place %d", a)
	}
	if got := b.place(7, &k1, 2); got != a {
		t.Fatalf("the first key found at %d, placed at %d", got, a)
	}
	if got := b.place(7, &k2, 2); got != c {
		t.Fatalf("the second key found at %d, placed at %d", got, c)
	}
	if len(b.flows) != 2 || len(b.per) != 4 {
		t.Fatalf("%d flows and %d counters, want 2 and 4", len(b.flows), len(b.per))
	}
}
