package hop

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"loupe/internal/flow"
)

// Interfaces of a node as the tests name them: a pod's veth (host side),
// the VXLAN device and the NIC, by index.
var testIfaces = map[uint32]Iface{
	1: {Name: "lxc1", Kind: "veth"},
	2: {Name: "vxlan0", Kind: "vxlan"},
	3: {Name: "eth0", Kind: "device"},
	4: {Name: "lxc2", Kind: "veth"},
}

type fixture struct {
	t    *testing.T
	mono uint64
	m    *Matcher
	out  []*Request
}

func newFixture(t *testing.T, table int) *fixture {
	f := &fixture{t: t, mono: 1_000_000_000}
	f.m = NewMatcher(Options{
		TableSize: table,
		Window:    100 * time.Millisecond,
		Resolver:  ResolverFunc(func(i uint32) Iface { return testIfaces[i] }),
		Node:      "node-a",
		MonoNow:   func() uint64 { return f.mono },
		WallNow:   func() time.Time { return time.Unix(1700000000, int64(f.mono)) },
		Emit:      func(r *Request) { f.out = append(f.out, r.Clone()) },
	})
	return f
}

// key is the flow key of the test's connection at a hook.
func key(ifindex uint32, dir flow.Direction) flow.Key {
	k := flow.Key{IfIndex: ifindex, Direction: dir, EtherType: flow.EtherTypeIPv4, Proto: 6, SrcPort: 40000, DstPort: 80}
	src, dst := netip.MustParseAddr("10.1.0.2").As16(), netip.MustParseAddr("10.2.0.2").As16()
	k.SrcAddr, k.DstAddr = src, dst
	return k
}

func stamp(ifindex uint32, dir flow.Direction, at, seq, n uint32) Stamp {
	return Stamp{TimeNs: uint64(at), Key: key(ifindex, dir), Seq: seq, Len: n, Kind: KindRequest}
}

// after moves the clock past the window and expires.
func (f *fixture) after() []*Request {
	f.mono += uint64(time.Second)
	f.m.Expire()
	out := f.out
	f.out = nil
	return out
}

func TestMatchThreeHooksOut(t *testing.T) {
	f := newFixture(t, 0)
	f.m.Stamp(stamp(1, flow.Ingress, 1000, 5000, 300))
	f.m.Stamp(stamp(2, flow.Egress, 1700, 5000, 300))
	f.m.Stamp(stamp(3, flow.Egress, 2900, 5000, 300))
	f.m.Context(Context{Key: key(2, flow.Egress), Seq: 5000, TraceID: [16]byte{1, 2}, SpanID: [8]byte{9}, Source: SourceTraceparent})
	out := f.after()
	if len(out) != 1 {
		t.Fatalf("%d records, want 1", len(out))
	}
	r := out[0]
	want := []Hop{
		{FromIface: "lxc1", ToIface: "vxlan0", Direction: Out, LatencyNs: 700},
		{FromIface: "vxlan0", ToIface: "eth0", Direction: Out, LatencyNs: 1200},
	}
	if !reflect.DeepEqual(r.Hops, want) {
		t.Errorf("hops %+v, want %+v", r.Hops, want)
	}
	if r.TraceID != "01020000000000000000000000000000" || r.SpanID != "0900000000000000" || r.Seq != 5000 || r.Kind != "request" {
		t.Errorf("trace %q span %q seq %d kind %s", r.TraceID, r.SpanID, r.Seq, r.Kind)
	}
	if r.SrcAddr.String() != "10.1.0.2" || r.DstPort != 80 || r.Node != "node-a" || len(r.Path) != 3 {
		t.Errorf("record %+v", r)
	}
	if st := f.m.Stats(); st.Requests != 1 || st.Stamps != 3 || st.Contexts != 1 || st.Open != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestMatchTwoHooksIn(t *testing.T) {
	f := newFixture(t, 0)
	f.m.Stamp(Stamp{TimeNs: 10_000, Key: key(3, flow.Ingress), Tunneled: true, Seq: 7, Len: 100, Kind: KindSampled})
	f.m.Stamp(Stamp{TimeNs: 15_500, Key: key(4, flow.Egress), Seq: 7, Len: 100, Kind: KindSampled})
	out := f.after()
	if len(out) != 1 {
		t.Fatalf("%d records, want 1", len(out))
	}
	want := []Hop{{FromIface: "eth0", ToIface: "lxc2", Direction: In, LatencyNs: 5500}}
	if !reflect.DeepEqual(out[0].Hops, want) || out[0].TraceID != "" || out[0].Kind != "sampled" {
		t.Errorf("got %+v, want hops %+v, no trace, sampled", out[0], want)
	}
}

// GSO at the veth (one 4000-byte buffer), wire segments at the NIC: the
// segment holding the first byte is the one matched; the second wire
// segment's stamp is another piece, with no other hook to time it against.
func TestMatchGSOContainment(t *testing.T) {
	f := newFixture(t, 0)
	f.m.Stamp(stamp(1, flow.Ingress, 100, 1000, 4000))
	f.m.Stamp(stamp(3, flow.Egress, 400, 1000, 1448))
	f.m.Stamp(stamp(3, flow.Egress, 410, 2448, 1448))
	// GRO at the other end merged bytes before the request with it.
	f.m.Stamp(stamp(2, flow.Egress, 250, 900, 600))
	out := f.after()
	if len(out) != 1 {
		t.Fatalf("%d records, want 1", len(out))
	}
	r := out[0]
	if r.Seq != 1000 {
		t.Errorf("seq %d, want 1000", r.Seq)
	}
	want := []Hop{
		{FromIface: "lxc1", ToIface: "vxlan0", Direction: Out, LatencyNs: 150},
		{FromIface: "vxlan0", ToIface: "eth0", Direction: Out, LatencyNs: 150},
	}
	if !reflect.DeepEqual(r.Hops, want) {
		t.Errorf("hops %+v, want %+v", r.Hops, want)
	}
	if st := f.m.Stats(); st.Incomplete != 1 || st.Duplicates != 0 {
		t.Errorf("incomplete %d duplicates %d, want 1 and 0", st.Incomplete, st.Duplicates)
	}
}

// Stamps reach userspace from several CPUs out of time order, and the
// context may come first: the path is by time, not arrival.
func TestMatchOutOfOrder(t *testing.T) {
	f := newFixture(t, 0)
	f.m.Context(Context{Key: key(1, flow.Ingress), Seq: 42, TraceID: [16]byte{0xaa}, SpanID: [8]byte{0xbb}, Source: SourceTraceparent})
	f.m.Context(Context{Key: key(3, flow.Egress), Seq: 42, TraceID: [16]byte{0xaa}, SpanID: [8]byte{0xbb}, Source: SourceTraceparent})
	f.m.Stamp(stamp(3, flow.Egress, 900, 42, 10))
	f.m.Stamp(stamp(1, flow.Ingress, 100, 42, 10))
	f.m.Stamp(stamp(2, flow.Egress, 500, 42, 10))
	out := f.after()
	if len(out) != 1 {
		t.Fatalf("%d records, want 1", len(out))
	}
	var names []string
	for _, h := range out[0].Hops {
		names = append(names, h.FromIface+">"+h.ToIface)
	}
	if !reflect.DeepEqual(names, []string{"lxc1>vxlan0", "vxlan0>eth0"}) || out[0].TraceID == "" {
		t.Errorf("path %v trace %q", names, out[0].TraceID)
	}
	if st := f.m.Stats(); st.ContextsUnmatched != 0 || st.Open != 0 {
		t.Errorf("stats %+v: the second context of the request must not wait", st)
	}
}

// A hook that did not see the segment leaves a shorter path; a segment
// seen at one hook only is no record, and counted.
func TestMatchMissingHook(t *testing.T) {
	f := newFixture(t, 0)
	f.m.Stamp(stamp(1, flow.Ingress, 100, 1, 10))
	f.m.Stamp(stamp(3, flow.Egress, 800, 1, 10))
	f.m.Stamp(stamp(1, flow.Ingress, 100, 5000, 10))
	f.m.Context(Context{Key: key(1, flow.Ingress), Seq: 90000, TraceID: [16]byte{1}})
	out := f.after()
	if len(out) != 1 || len(out[0].Hops) != 1 || out[0].Hops[0].LatencyNs != 700 {
		t.Fatalf("got %d records (%+v), want one hop of 700 ns", len(out), out)
	}
	if st := f.m.Stats(); st.Incomplete != 1 || st.ContextsUnmatched != 1 {
		t.Errorf("stats %+v, want 1 incomplete, 1 unmatched context", st)
	}
}

// A flood of segments larger than the table: the table never holds more
// than its size, and what was pushed out early is counted.
func TestMatchTableFlood(t *testing.T) {
	const size, n = 64, 1000
	f := newFixture(t, size)
	for i := range uint32(n) {
		f.m.Stamp(stamp(1, flow.Ingress, 10*i, 1000*i, 100))
		if open := f.m.Stats().Open; open > size {
			t.Fatalf("table holds %d entries, more than its %d", open, size)
		}
	}
	for i := range uint32(16) {
		f.m.Context(Context{Key: key(1, flow.Ingress), Seq: 1<<30 + i})
	}
	f.after()
	st := f.m.Stats()
	if st.Evicted != n-size+16 || st.Incomplete != n || st.Open != 0 {
		t.Errorf("evicted %d incomplete %d open %d, want %d, %d, 0", st.Evicted, st.Incomplete, st.Open, n-size+16, n)
	}
	if st.ContextsUnmatched != 16 {
		t.Errorf("unmatched contexts %d, want 16", st.ContextsUnmatched)
	}
}

// A context pushed out of a full table is counted apart.
func TestMatchContextDropped(t *testing.T) {
	f := newFixture(t, 2)
	for i := range uint32(3) {
		f.m.Context(Context{Key: key(1, flow.Ingress), Seq: i * 100})
	}
	f.after()
	if st := f.m.Stats(); st.ContextsDropped != 1 || st.ContextsUnmatched != 2 {
		t.Errorf("stats %+v, want 1 dropped, 2 unmatched", st)
	}
}

// A retransmission crosses the same hooks again: it is a segment of its
// own, matched with the other hooks' second sight.
func TestMatchRetransmission(t *testing.T) {
	f := newFixture(t, 0)
	f.m.Stamp(stamp(1, flow.Ingress, 100, 1, 10))
	f.m.Stamp(stamp(3, flow.Egress, 300, 1, 10))
	f.m.Stamp(stamp(1, flow.Ingress, 50_000, 1, 10))
	f.m.Stamp(stamp(3, flow.Egress, 50_400, 1, 10))
	out := f.after()
	if len(out) != 2 || out[0].Hops[0].LatencyNs != 200 || out[1].Hops[0].LatencyNs != 400 {
		t.Fatalf("got %+v, want two records of 200 and 400 ns", out)
	}
}

// The window finishes a group only once it has passed.
func TestMatchWindow(t *testing.T) {
	f := newFixture(t, 0)
	f.m.Stamp(stamp(1, flow.Ingress, 100, 1, 10))
	f.m.Stamp(stamp(3, flow.Egress, 300, 1, 10))
	f.mono += uint64(50 * time.Millisecond)
	f.m.Expire()
	if len(f.out) != 0 {
		t.Fatalf("emitted before the window ended")
	}
	f.mono += uint64(50 * time.Millisecond)
	f.m.Expire()
	if len(f.out) != 1 {
		t.Fatalf("%d records after the window, want 1", len(f.out))
	}
	// Time is the first stamp's on the wall clock: the fixture's wall
	// clock is the monotonic one plus 1.7e9 s.
	if want := time.Unix(1700000000, 100); !f.out[0].Time.Equal(want) {
		t.Errorf("time %v, want %v", f.out[0].Time, want)
	}
}

func TestPathDirection(t *testing.T) {
	p := func(kind, hook string, tunneled bool) Point {
		return Point{Kind: kind, Hook: hook, Tunneled: tunneled}
	}
	cases := []struct {
		name string
		path []Point
		want string
	}{
		{"pod veth ingress first", []Point{p("veth", "ingress", false), p("vxlan", "egress", false), p("device", "egress", true)}, Out},
		{"pod veth egress last", []Point{p("device", "ingress", true), p("vxlan", "ingress", false), p("veth", "egress", false)}, In},
		{"veth underlay is no pod", []Point{p("veth", "ingress", true), p("vxlan", "ingress", false), p("veth", "egress", false)}, In},
		{"pod to pod on one node", []Point{p("veth", "ingress", false), p("veth", "egress", false)}, Out},
		{"no veth, starts at egress", []Point{p("vxlan", "egress", false), p("device", "egress", true)}, Out},
		{"no veth, starts at ingress", []Point{p("device", "ingress", true), p("vxlan", "ingress", false)}, In},
	}
	for _, c := range cases {
		if got := PathDirection(c.path); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestHopsNamePods: where the resolver knows the pod behind an interface
// (Kubernetes names on), each hop names it at that end, and the path
// keeps it for a join of two nodes' stores; other ends stay unnamed.
func TestHopsNamePods(t *testing.T) {
	f := newFixture(t, 0)
	f.m.opts.Resolver = ResolverFunc(func(i uint32) Iface {
		ifc := testIfaces[i]
		if i == 1 {
			ifc.Pod = "shop/web-0"
		}
		return ifc
	})
	f.m.Stamp(stamp(1, flow.Ingress, 1000, 5000, 300))
	f.m.Stamp(stamp(2, flow.Egress, 1700, 5000, 300))
	f.m.Stamp(stamp(3, flow.Egress, 2900, 5000, 300))
	out := f.after()
	if len(out) != 1 {
		t.Fatalf("%d records, want 1", len(out))
	}
	want := []Hop{
		{FromIface: "lxc1", ToIface: "vxlan0", Direction: Out, LatencyNs: 700, FromPod: "shop/web-0"},
		{FromIface: "vxlan0", ToIface: "eth0", Direction: Out, LatencyNs: 1200},
	}
	if !reflect.DeepEqual(out[0].Hops, want) {
		t.Errorf("hops %+v, want %+v", out[0].Hops, want)
	}
	if p := out[0].Path; p[0].Pod != "shop/web-0" || p[1].Pod != "" {
		t.Errorf("path %+v: want the pod on the first point only", p)
	}
}
