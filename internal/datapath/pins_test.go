package datapath

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

func sumDrained(ds []drained) (pk, by uint64) {
	for _, d := range ds {
		pk += d.stats.Packets
		by += d.stats.Bytes
	}
	return pk, by
}

func pinDirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestAdoptAfterCrashBetweenSwapAndDrain: an agent swaps the tables and
// dies before draining the one it swapped out. The next agent adopts the
// pinned maps, finds that table (with its epoch) among the leftovers, and
// refuses to swap until it is cleared; the packets counted meanwhile into
// the active table are in its first eviction. Nothing is lost, nothing
// counted twice.
func TestAdoptAfterCrashBetweenSwapAndDrain(t *testing.T) {
	for _, tables := range []TableKind{PerCPU, Shared} {
		t.Run(tables.String(), func(t *testing.T) {
			pins := filepath.Join(testutil.Bpffs(t), "loupe")
			opts := Options{FlowBudget: 16, Tables: tables, RingBufSize: 1 << 16, PinDir: pins}
			f := udpFrame(t, 1000, 100)

			first := loadForTest(t, opts)
			if !first.Pinned() || first.Adopted() {
				t.Fatalf("first agent: pinned %v adopted %v", first.Pinned(), first.Adopted())
			}
			set := first.Set()
			for range 3 {
				runProg(t, first, flow.Ingress, f)
			}
			swapped, err := first.Rotate()
			if err != nil {
				t.Fatal(err)
			}
			if m := swapped.Mark(); m.Set != set || m.Epoch != 1 {
				t.Fatalf("swapped out %+v, want set %x epoch 1", m, set)
			}
			for range 2 {
				runProg(t, first, flow.Ingress, f) // into epoch 2
			}
			first.Close() // the crash: pins stay

			second := loadForTest(t, opts)
			if !second.Adopted() || second.Set() != set {
				t.Fatalf("second agent: adopted %v set %x, want the set %x", second.Adopted(), second.Set(), set)
			}
			if _, err := second.Rotate(); err == nil {
				t.Fatal("swapped into a table that still holds epoch 1")
			}
			left, err := second.Leftovers()
			if err != nil || len(left) != 1 || left[0].Mark().Epoch != 1 {
				t.Fatalf("leftovers %v %v, want the table of epoch 1", left, err)
			}
			if pk, by := sumDrained(readDrain(t, left[0])); pk != 3 || by != 3*uint64(len(f)) {
				t.Fatalf("epoch 1: %d packets %d bytes, want 3 and %d", pk, by, 3*len(f))
			}
			runProg(t, second, flow.Ingress, f) // the new agent's programs count into epoch 2 too
			d, err := second.Rotate()
			if err != nil {
				t.Fatal(err)
			}
			if d.Mark().Epoch != 2 {
				t.Fatalf("swapped out epoch %d, want 2", d.Mark().Epoch)
			}
			if pk, _ := sumDrained(readDrain(t, d)); pk != 3 {
				t.Fatalf("epoch 2: %d packets, want 3 (2 before the restart, 1 after)", pk)
			}
			if err := second.Unpin(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("pin directory left after Unpin: %v %v", err, pinDirEntries(t, filepath.Dir(pins)))
			}
		})
	}
}

// TestRetiredSetOfAnotherBudget: an agent with another flow budget (the
// same structs, another layout) leaves tables and ring-buffer events; the
// next agent drains them through their BTF and unpins the set.
func TestRetiredSetOfAnotherBudget(t *testing.T) {
	pins := filepath.Join(testutil.Bpffs(t), "loupe")
	old := loadForTest(t, Options{FlowBudget: 4, Tables: PerCPU, RingBufSize: 1 << 16, PinDir: pins})
	oldSet := old.Set()
	var sent uint64
	for i := range 6 { // 4 flows fill the table, 2 go to the ring buffer
		f := udpFrame(t, uint16(2000+i), 10+i)
		sent += uint64(len(f))
		runProg(t, old, flow.Egress, f)
	}
	old.Close()

	dp := loadForTest(t, Options{FlowBudget: 8, Tables: Shared, RingBufSize: 1 << 16, PinDir: pins})
	if dp.Adopted() {
		t.Fatal("adopted a set of another layout")
	}
	left, err := dp.Leftovers()
	if err != nil || len(left) != 2 {
		t.Fatalf("leftovers %d, %v; want the retired set's two tables", len(left), err)
	}
	if m := left[1].Mark(); m.Set != oldSet || m.Epoch != 1 {
		t.Fatalf("active table of the retired set: %+v, want set %x epoch 1", m, oldSet)
	}
	var pk, by uint64
	for _, d := range left {
		p, b := sumDrained(readDrainNoClear(t, d))
		pk, by = pk+p, by+b
	}
	var events []flow.Event
	end, err := left[1].Events(0, func(e *flow.Event) { events = append(events, *e) })
	if err != nil || len(events) != 2 || end == 0 {
		t.Fatalf("retired ring buffer: %d events up to %d, %v; want 2", len(events), end, err)
	}
	for _, e := range events {
		pk, by = pk+e.Stats.Packets, by+e.Stats.Bytes
		if e.Reason != flow.ReasonMapFull || e.Key.Direction != flow.Egress {
			t.Errorf("event %+v", e)
		}
	}
	if pk != 6 || by != sent {
		t.Fatalf("drained %d packets %d bytes, sent 6 and %d", pk, by, sent)
	}
	for _, d := range left {
		if err := d.Clear(); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range pinDirEntries(t, pins) {
		if strings.HasPrefix(e, setPrefix+"percpu-4-") {
			t.Fatalf("retired set %s still pinned", e)
		}
	}
}

func readDrainNoClear(t *testing.T, d flow.Drain) []drained {
	t.Helper()
	var out []drained
	if _, err := d.Read(func(k *flow.Key, perCPU []flow.Stats) {
		s, _ := flow.MergePerCPU(perCPU, 0)
		out = append(out, drained{key: *k, stats: s})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRetiredSetOfAnotherStructLayout drains a table whose structs differ
// from this build's: an older key without vlan_id, a value with its fields
// in another order, no GSO counters and a field this build does not know,
// and a table state without install times. Every field is read by name
// through the map's own BTF, built here as a future build would find it.
func TestRetiredSetOfAnotherStructLayout(t *testing.T) {
	for _, typ := range []ebpf.MapType{ebpf.Hash, ebpf.PerCPUHash} {
		t.Run(typ.String(), func(t *testing.T) {
			pins := filepath.Join(testutil.Bpffs(t), "loupe")
			if err := os.Mkdir(pins, 0o700); err != nil {
				t.Fatal(err)
			}
			ncpu, err := ebpf.PossibleCPU()
			if err != nil {
				t.Fatal(err)
			}
			u8, u16 := &btf.Int{Name: "u8", Size: 1}, &btf.Int{Name: "u16", Size: 2}
			u32, u64 := &btf.Int{Name: "u32", Size: 4}, &btf.Int{Name: "u64", Size: 8}
			bytesOf := func(n uint32) btf.Type { return &btf.Array{Index: u32, Type: u8, Nelems: n} }
			mem := func(name string, typ btf.Type, off uint32) btf.Member {
				return btf.Member{Name: name, Type: typ, Offset: btf.Bits(off * 8)}
			}
			key := &btf.Struct{Name: "flow_key", Size: 56, Members: []btf.Member{
				mem("src_addr", bytesOf(16), 0), mem("dst_addr", bytesOf(16), 16), mem("src_mac", bytesOf(6), 32),
				mem("dst_mac", bytesOf(6), 38), mem("ifindex", u32, 44), mem("eth_type", u16, 48),
				mem("src_port", u16, 50), mem("dst_port", u16, 52), mem("proto", u8, 54), mem("direction", u8, 55)}}
			val := &btf.Struct{Name: "flow_stats", Size: 48, Members: []btf.Member{
				mem("bytes", u64, 0), mem("future_counter", u64, 8), mem("packets", u64, 16), mem("last_seen", u64, 24),
				mem("first_seen", u64, 32), mem("tcp_flags", u16, 40), mem("dscp", u8, 42), mem("sampling", u8, 43)}}
			state := &btf.Struct{Name: "table_state", Size: 32, Members: []btf.Member{
				mem("active", u32, 0), mem("pin_set", u64, 8), mem("epoch_a", u64, 16), mem("epoch_b", u64, 24)}}

			setDir := filepath.Join(pins, setPrefix+"percpu-100-4096-0ld0ld00-77")
			if err := os.Mkdir(setDir, 0o700); err != nil {
				t.Fatal(err)
			}
			newMap := func(name string, spec *ebpf.MapSpec) *ebpf.Map {
				m, err := ebpf.NewMap(spec)
				if err != nil {
					t.Fatalf("create %s: %v", name, err)
				}
				t.Cleanup(func() { m.Close() })
				if err := m.Pin(filepath.Join(setDir, name)); err != nil {
					t.Fatal(err)
				}
				return m
			}
			tbl := [2]*ebpf.Map{}
			for i, name := range []string{loupeMapFlowsA, loupeMapFlowsB} {
				tbl[i] = newMap(name, &ebpf.MapSpec{Name: name, Type: typ, KeySize: 56, ValueSize: 48, MaxEntries: 100, Key: key, Value: val})
			}
			st := newMap(loupeMapFlowState, &ebpf.MapSpec{Name: "flow_state", Type: ebpf.Array, KeySize: 4, ValueSize: 32,
				MaxEntries: 1, Key: u32, Value: state})
			ne := binary.NativeEndian
			sb := make([]byte, 32)
			ne.PutUint32(sb[0:], 0)     // flows_a active
			ne.PutUint64(sb[8:], 0x5e7) // pin_set
			ne.PutUint64(sb[16:], 8)    // epoch_a
			ne.PutUint64(sb[24:], 7)    // epoch_b
			if err := st.Put(uint32(0), sb); err != nil {
				t.Fatal(err)
			}
			put := func(m *ebpf.Map, port uint16, packets, bytes uint64) {
				k := make([]byte, 56)
				k[16+15] = 9 // dst_addr ...9
				ne.PutUint32(k[44:], 3)
				ne.PutUint16(k[48:], 0x0800)
				ne.PutUint16(k[50:], port)
				ne.PutUint16(k[52:], 53)
				k[54], k[55] = 17, 1
				v := make([]byte, 48)
				ne.PutUint64(v[0:], bytes)
				ne.PutUint64(v[8:], 0xdead) // unknown to this build
				ne.PutUint64(v[16:], packets)
				ne.PutUint64(v[24:], 2000)
				ne.PutUint64(v[32:], 1000)
				ne.PutUint16(v[40:], 0x12)
				v[42], v[43] = 46, 1
				var value any = v
				if typ == ebpf.PerCPUHash {
					per := make([][]byte, ncpu) // counted on the first CPU only
					per[0] = v
					for c := 1; c < ncpu; c++ {
						per[c] = make([]byte, 48)
					}
					value = per
				}
				if err := m.Put(k, value); err != nil {
					t.Fatalf("put: %v", err)
				}
			}
			put(tbl[1], 700, 5, 500) // flows_b: epoch 7, swapped out, never drained
			put(tbl[0], 800, 3, 300) // flows_a: epoch 8, active when the agent died
			put(tbl[0], 801, 1, 60)

			dp := loadForTest(t, Options{FlowBudget: 16, Tables: PerCPU, RingBufSize: 1 << 16, PinDir: pins})
			left, err := dp.Leftovers()
			if err != nil || len(left) != 2 {
				t.Fatalf("leftovers %d, %v", len(left), err)
			}
			for i, want := range []flow.Mark{{Set: 0x5e7, Epoch: 7}, {Set: 0x5e7, Epoch: 8}} {
				if m := left[i].Mark(); m != want {
					t.Fatalf("drain %d: mark %+v, want %+v (the swapped-out table first)", i, m, want)
				}
			}
			got := map[uint16]drained{}
			for _, d := range left {
				for _, r := range readDrain(t, d) {
					got[r.key.SrcPort] = r
				}
			}
			for port, want := range map[uint16][2]uint64{700: {5, 500}, 800: {3, 300}, 801: {1, 60}} {
				r, ok := got[port]
				if !ok {
					t.Fatalf("flow %d not drained: %+v", port, got)
				}
				s, k := r.stats, r.key
				if s.Packets != want[0] || s.Bytes != want[1] || s.Segments != want[0] || s.WireBytes != want[1] ||
					s.FirstSeen != 1000 || s.LastSeen != 2000 || s.TCPFlags != 0x12 || s.DSCP != 46 || s.Sampling != 1 {
					t.Errorf("flow %d: stats %+v", port, s)
				}
				if k.IfIndex != 3 || k.EtherType != 0x0800 || k.DstPort != 53 || k.Proto != 17 || k.Direction != flow.Egress ||
					k.DstAddr[15] != 9 || k.VlanID != 0 {
					t.Errorf("flow %d: key %+v", port, k)
				}
			}
			if _, err := os.Stat(setDir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("retired set still pinned after its last table: %v", err)
			}
		})
	}
}

// TestRingHoldsUntilReleased: diverted packets that were read but not
// released are read again by the next reader (an agent killed before
// storing them); released ones are not, and a start position skips what
// the store already holds.
func TestRingHoldsUntilReleased(t *testing.T) {
	testutil.RequirePrivileged(t)
	onOneCPU(t) // a per-CPU table's budget is each CPU's
	dp := loadForTest(t, Options{FlowBudget: 1, Tables: PerCPU, RingBufSize: 1 << 16})
	for i := range 4 { // the first flow takes the table, three are diverted
		runProg(t, dp, flow.Ingress, udpFrame(t, uint16(4000+i), 10))
	}
	read := func(from uint64) []flow.Event {
		ev, err := dp.OpenEvents(from)
		if err != nil {
			t.Fatal(err)
		}
		defer ev.Close()
		return readEvents(t, ev)
	}
	first := read(0)
	if len(first) != 3 {
		t.Fatalf("%d events, want 3", len(first))
	}
	if again := read(0); len(again) != 3 || again[2].RingPos != first[2].RingPos {
		t.Fatalf("after a reader that released nothing: %d events, want the same 3", len(again))
	}
	ev, err := dp.OpenEvents(0)
	if err != nil {
		t.Fatal(err)
	}
	ev.Release(first[0].RingPos)
	ev.Close()
	if rest := read(0); len(rest) != 2 || rest[0].Key.SrcPort != first[1].Key.SrcPort {
		t.Fatalf("after releasing the first event: %d events", len(rest))
	}
	if rest := read(first[1].RingPos); len(rest) != 1 || rest[0].Key.SrcPort != first[2].Key.SrcPort {
		t.Fatalf("starting after the second event: %d events", len(rest))
	}
}

// TestUnpinnableRunsUnpinned: a pin directory that is not on a bpf file
// system, or that another user owns, leaves the datapath unpinned, not
// failed; a pin directory another datapath holds is an error.
func TestUnpinnableRunsUnpinned(t *testing.T) {
	testutil.RequirePrivileged(t)
	opts := Options{FlowBudget: 16, Tables: PerCPU, RingBufSize: 1 << 16, Capabilities: []string{"flows"}}

	opts.PinDir = filepath.Join(t.TempDir(), "loupe")
	if dp := loadForTest(t, opts); dp.Pinned() {
		t.Fatal("pinned outside a bpf file system")
	}

	bpffs := testutil.Bpffs(t)
	opts.PinDir = filepath.Join(bpffs, "theirs")
	if err := os.Mkdir(opts.PinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(opts.PinDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if dp := loadForTest(t, opts); dp.Pinned() {
		t.Fatal("adopted a pin directory another user owns")
	}

	opts.PinDir = filepath.Join(bpffs, "ours")
	held := loadForTest(t, opts)
	if !held.Pinned() {
		t.Fatal("not pinned on a bpf file system")
	}
	if dp, err := Load(opts); !errors.Is(err, ErrPinDirLocked) {
		if dp != nil {
			dp.Close()
		}
		t.Fatalf("second datapath on a held pin directory: %v, want ErrPinDirLocked", err)
	}
}
