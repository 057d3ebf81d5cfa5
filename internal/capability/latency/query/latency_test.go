package query

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"loupe/internal/hop"
	"loupe/internal/store"
)

var (
	podA = netip.MustParseAddr("10.1.0.2")
	podB = netip.MustParseAddr("10.2.0.2")
	t0   = time.Now().Add(-time.Minute).Truncate(time.Second)
)

// sent is what node a's agent records of a request leaving pod A: veth
// ingress at 0, VXLAN egress at +3 µs, underlay egress at +5 µs (its
// monotonic clock starts at 1e9 ns; wall = mono + offset).
func sent(node, boot string, sync bool, seq uint32) *hop.Request {
	return record(node, boot, sync, podA, podB, 40000, 80, seq, 1_000_000_000, []hop.Point{
		{Iface: "vethA", Kind: "veth", Hook: "ingress"},
		{Iface: "vxlan0", Kind: "vxlan", Hook: "egress"},
		{Iface: "ulA", Kind: "veth", Hook: "egress", Tunneled: true},
	}, 0, 3000, 5000)
}

// received is node b's: underlay ingress at arrive, VXLAN ingress +4 µs,
// pod veth egress +6 µs.
func received(node, boot string, sync bool, src, dst netip.Addr, sport, dport uint16, seq uint32, arrive uint64) *hop.Request {
	return record(node, boot, sync, src, dst, sport, dport, seq, arrive, []hop.Point{
		{Iface: "ulB", Kind: "veth", Hook: "ingress", Tunneled: true},
		{Iface: "vxlan0", Kind: "vxlan", Hook: "ingress"},
		{Iface: "vethB", Kind: "veth", Hook: "egress"},
	}, 0, 4000, 6000)
}

func record(node, boot string, sync bool, src, dst netip.Addr, sport, dport uint16, seq uint32, start uint64, path []hop.Point, at ...uint64) *hop.Request {
	r := &hop.Request{
		TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331", Kind: "request",
		SrcAddr: src, DstAddr: dst, SrcPort: sport, DstPort: dport, Proto: 6, Seq: seq,
		Node: node, BootID: boot, ClockSync: sync, ClockOffsetNs: t0.UnixNano() - 1_000_000_000,
	}
	for i := range path {
		path[i].TimeNs = start + at[i]
	}
	r.Path = path
	r.Hops = hop.Hops(path)
	r.Time = r.Wall(path[0])
	return r
}

func writeStore(t *testing.T, rs ...*hop.Request) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	h, err := store.OpenHopLog(dir, store.HopOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Append(rs...); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runLatency(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if err := latencyCmd(args, &out, &errb); err != nil {
		t.Fatalf("loupe latency %v: %v (%s)", args, err, errb.String())
	}
	return out.String(), errb.String()
}

func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		objs = append(objs, m)
	}
	return objs
}

// The JSON names and shapes are the CLI's contract.
func TestLatencyJSONContract(t *testing.T) {
	dir := writeStore(t, sent("a", "boot-a", false, 100))
	out, _ := runLatency(t, "--store", dir, "--json")
	objs := jsonLines(t, out)
	if len(objs) != 1 {
		t.Fatalf("%d objects, want 1:\n%s", len(objs), out)
	}
	o := objs[0]
	for k, want := range map[string]any{
		"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331",
		"src_addr": "10.1.0.2", "dst_addr": "10.2.0.2", "src_port": 40000.0, "dst_port": 80.0, "seq": 100.0,
	} {
		if o[k] != want {
			t.Errorf("%s = %v (%T), want %v", k, o[k], o[k], want)
		}
	}
	want := []any{
		map[string]any{"from_iface": "vethA", "to_iface": "vxlan0", "direction": "out", "latency_ns": 3000.0},
		map[string]any{"from_iface": "vxlan0", "to_iface": "ulA", "direction": "out", "latency_ns": 2000.0},
	}
	if !reflect.DeepEqual(o["hops"], want) {
		t.Errorf("hops %v, want %v", o["hops"], want)
	}
	// --trace selects, and another id selects nothing.
	if out, _ := runLatency(t, "--store", dir, "--json", "--trace", "0AF7651916CD43DD8448EB211C80319C"); len(jsonLines(t, out)) != 1 {
		t.Errorf("--trace of the record's id: %q", out)
	}
	if out, errOut := runLatency(t, "--store", dir, "--json", "--trace", strings.Repeat("1", 32)); out != "" || !strings.Contains(errOut, "no records") {
		t.Errorf("--trace of another id: %q / %q", out, errOut)
	}
	// The table names every interface of the path.
	out, _ = runLatency(t, "--store", dir)
	if !strings.Contains(out, "vethA -[out 3µs]-> vxlan0 -[out 2µs]-> ulA") {
		t.Errorf("table:\n%s", out)
	}
	var errb bytes.Buffer
	if err := latencyCmd([]string{"--store", dir, "--trace", "xyz"}, &bytes.Buffer{}, &errb); err == nil {
		t.Error("--trace xyz accepted")
	}
}

func hopsOf(t *testing.T, o map[string]any) []string {
	t.Helper()
	var s []string
	for _, h := range o["hops"].([]any) {
		m := h.(map[string]any)
		s = append(s, m["from_node"].(string)+":"+m["from_iface"].(string)+">"+m["to_node"].(string)+":"+m["to_iface"].(string)+"="+
			time.Duration(m["latency_ns"].(float64)).String())
	}
	return s
}

func TestLatencyJoinTwoStores(t *testing.T) {
	// Node b saw the segment arrive 250 µs after node a's underlay sent it.
	arrive := uint64(1_000_000_000 + 5000 + 250_000)
	cases := []struct {
		name       string
		bootB      string
		syncA      bool
		syncB      bool
		flags      []string
		crossHop   bool
		crossValue time.Duration
	}{
		{name: "one machine: one monotonic clock", bootB: "boot-a", crossHop: true, crossValue: 250 * time.Microsecond},
		{name: "two machines, no clock sync", bootB: "boot-b"},
		{name: "one agent without clock sync", bootB: "boot-b", syncA: true},
		{name: "both agents say clock_sync", bootB: "boot-b", syncA: true, syncB: true, crossHop: true, crossValue: 250 * time.Microsecond},
		{name: "--clock-sync", bootB: "boot-b", flags: []string{"--clock-sync"}, crossHop: true, crossValue: 250 * time.Microsecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := writeStore(t, sent("a", "boot-a", c.syncA, 100))
			b := writeStore(t, received("b", c.bootB, c.syncB, podA, podB, 40000, 80, 100, arrive))
			out, _ := runLatency(t, append([]string{"--store", a, "--store", b, "--json"}, c.flags...)...)
			objs := jsonLines(t, out)
			if len(objs) != 1 {
				t.Fatalf("%d objects, want 1 joined:\n%s", len(objs), out)
			}
			want := []string{"a:vethA>a:vxlan0=3µs", "a:vxlan0>a:ulA=2µs"}
			if c.crossHop {
				want = append(want, "a:ulA>b:ulB="+c.crossValue.String())
			}
			want = append(want, "b:ulB>b:vxlan0=4µs", "b:vxlan0>b:vethB=2µs")
			if got := hopsOf(t, objs[0]); !slices.Equal(got, want) {
				t.Errorf("hops %v\nwant %v", got, want)
			}
			if !reflect.DeepEqual(objs[0]["nodes"], []any{"a", "b"}) {
				t.Errorf("nodes %v", objs[0]["nodes"])
			}
		})
	}
}

// A reply seen by both nodes gives the round trip on the wire with no
// clock sync: each node's part is on its own clock.
func TestLatencyRoundTrip(t *testing.T) {
	arrive := uint64(1_000_000_000 + 5000 + 250_000)
	// Node b: the reply leaves from pod B 100 µs after the request
	// arrived at its underlay; node a sees it arrive 700 µs after it sent
	// the request (its clock is 1 s apart from b's: no shared clock).
	reqB := received("b", "boot-b", false, podA, podB, 40000, 80, 100, arrive+1_000_000_000)
	replyB := record("b", "boot-b", false, podB, podA, 80, 40000, 9000, arrive+1_000_000_000+94_000, []hop.Point{
		{Iface: "vethB", Kind: "veth", Hook: "ingress"},
		{Iface: "ulB", Kind: "veth", Hook: "egress", Tunneled: true},
	}, 0, 6000)
	replyA := record("a", "boot-a", false, podB, podA, 80, 40000, 9000, 1_000_000_000+5000+700_000, []hop.Point{
		{Iface: "ulA", Kind: "veth", Hook: "ingress", Tunneled: true},
		{Iface: "vethA", Kind: "veth", Hook: "egress"},
	}, 0, 3000)
	replyB.Kind, replyA.Kind = "sampled", "sampled"
	replyB.TraceID, replyA.TraceID, replyB.SpanID, replyA.SpanID = "", "", "", ""
	reqB.ClockOffsetNs -= 1_000_000_000
	replyB.ClockOffsetNs -= 1_000_000_000
	a := writeStore(t, sent("a", "boot-a", false, 100), replyA)
	b := writeStore(t, reqB, replyB)
	out, _ := runLatency(t, "--store", a, "--store", b, "--json")
	objs := jsonLines(t, out)
	if len(objs) != 2 {
		t.Fatalf("%d objects, want 2:\n%s", len(objs), out)
	}
	rt, ok := objs[0]["round_trip"].(map[string]any)
	if !ok {
		t.Fatalf("no round trip in %v", objs[0])
	}
	// 700 µs at a, less the 100 µs the reply took to leave b.
	if rt["latency_ns"] != 600_000.0 || rt["from_iface"] != "ulA" || rt["to_iface"] != "ulB" || rt["reply_seq"] != 9000.0 {
		t.Errorf("round trip %v, want 600 µs ulA<->ulB, reply seq 9000", rt)
	}
	for _, h := range hopsOf(t, objs[0]) {
		if strings.HasPrefix(h, "a:ulA>b:") {
			t.Errorf("a one-way hop between nodes without clock sync: %s", h)
		}
	}
}
