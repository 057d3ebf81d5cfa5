package e2e

import (
	"bufio"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"loupe/internal/datapath"
	"loupe/internal/flow"
	"loupe/internal/testutil"
	"loupe/internal/tunnel"
)

// overlay is two namespaces joined by a veth pair (the underlay), with a
// VXLAN device in each (VNI 42, UDP 4789) over it: a pod-to-pod path
// between two nodes, reduced to its tunnel.
type overlay struct {
	a, b           *testutil.NS
	vethA, vethB   string
	vxA, vxB       string
	underA, underB netip.Addr
	podA, podB     netip.Addr
}

const overlayVNI = 42

// newOverlay builds the overlay over an IPv4 or IPv6 underlay, carrying
// IPv4 or IPv6, and waits until a ping crosses it (which also resolves
// the neighbours, so that no test packet waits for them). prefix (at most
// 3 bytes) starts the names of its namespaces and interfaces.
func newOverlay(t *testing.T, prefix string, under6, pod6 bool) *overlay {
	t.Helper()
	o := &overlay{
		a: testutil.NewNSPrefix(t, prefix+"-"), b: testutil.NewNSPrefix(t, prefix+"-"),
		vethA: testutil.UniqueName(prefix), vethB: testutil.UniqueName(prefix),
		vxA: testutil.UniqueName(prefix + "x"), vxB: testutil.UniqueName(prefix + "x"),
		underA: netip.MustParseAddr("10.88.0.1"), underB: netip.MustParseAddr("10.88.0.2"),
		podA: netip.MustParseAddr("10.99.0.1"), podB: netip.MustParseAddr("10.99.0.2"),
	}
	if under6 {
		o.underA, o.underB = netip.MustParseAddr("fd88::1"), netip.MustParseAddr("fd88::2")
	}
	if pod6 {
		o.podA, o.podB = netip.MustParseAddr("fd99::1"), netip.MustParseAddr("fd99::2")
	}
	testutil.Veth(t, o.a, o.vethA, o.b, o.vethB)
	for _, s := range []struct {
		ns                  *testutil.NS
		veth, vx            string
		local, remote, addr netip.Addr
	}{{o.a, o.vethA, o.vxA, o.underA, o.underB, o.podA}, {o.b, o.vethB, o.vxB, o.underB, o.underA, o.podB}} {
		addr := func(a netip.Addr, dev string) {
			if a.Is4() {
				s.ns.IP(t, "addr", "add", a.String()+"/24", "dev", dev)
			} else {
				s.ns.IP(t, "addr", "add", a.String()+"/64", "dev", dev, "nodad")
			}
		}
		addr(s.local, s.veth)
		s.ns.IP(t, "link", "set", s.veth, "up")
		s.ns.IP(t, "link", "add", s.vx, "type", "vxlan", "id", strconv.Itoa(overlayVNI), "dstport", "4789",
			"local", s.local.String(), "remote", s.remote.String(), "dev", s.veth)
		addr(s.addr, s.vx)
		s.ns.IP(t, "link", "set", s.vx, "up")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := o.a.Command("ping", "-c", "1", "-W", "1", o.podB.String()).CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ping across the overlay: %s", out)
		}
	}
	return o
}

// udpFlow sends n datagrams of size bytes from ns, from address from to
// address to, and waits until the receiver, bound in peer, has them all.
func udpFlow(t *testing.T, ns, peer *testutil.NS, from, to netip.AddrPort, n, size int) {
	t.Helper()
	var rx, tx *net.UDPConn
	if err := peer.Do(func() (err error) {
		rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(to))
		return err
	}); err != nil {
		t.Fatalf("listen %s: %v", to, err)
	}
	defer rx.Close()
	if err := ns.Do(func() (err error) {
		tx, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(from), net.UDPAddrFromAddrPort(to))
		return err
	}); err != nil {
		t.Fatalf("dial %s from %s: %v", to, from, err)
	}
	defer tx.Close()
	buf := make([]byte, size)
	for i := range n {
		if _, err := tx.Write(buf); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range n {
		if _, err := rx.Read(buf); err != nil {
			t.Fatalf("received %d of %d datagrams: %v", i, n, err)
		}
	}
}

// attachIn attaches the datapath's programs to ifname in ns (TCX, at the
// head) until the test ends.
func attachIn(t *testing.T, ns *testutil.NS, ifname string, dp *datapath.Datapath) {
	t.Helper()
	idx := ifindexIn(t, ns, ifname)
	for _, at := range []struct {
		prog *ebpf.Program
		typ  ebpf.AttachType
	}{{dp.Ingress(), ebpf.AttachTCXIngress}, {dp.Egress(), ebpf.AttachTCXEgress}} {
		var l link.Link
		if err := ns.Do(func() (err error) {
			l, err = link.AttachTCX(link.TCXOptions{Interface: idx, Program: at.prog, Attach: at.typ, Anchor: link.Head()})
			return err
		}); err != nil {
			t.Fatalf("attach to %s: %v", ifname, err)
		}
		t.Cleanup(func() { l.Close() })
	}
}

// TestVXLANOverlay sends a known number of UDP datagrams each way between
// two pods over a real VXLAN overlay, watched at node A's underlay veth
// and at its VXLAN device, by the datapath (which exposes the outer side)
// and by the agent (whose records must key on the same inner 5-tuple).
// The veth sees the datagrams inside VXLAN, the VXLAN device sees them
// bare: both must count them under the inner 5-tuple, the veth's with the
// outer side beside it, the device's without, and the veth's bytes
// exactly the encapsulation's more. A TCP transfer over the overlay checks
// the same of super-packets, segment by segment.
func TestVXLANOverlay(t *testing.T) {
	for _, c := range []struct {
		name          string
		under6, pod6  bool
		encapOverhead uint64 // outer Ethernet, IP, UDP, VXLAN
	}{
		{"ipv4 over ipv4", false, false, 14 + 20 + 8 + 8},
		{"ipv6 over ipv6", true, true, 14 + 40 + 8 + 8},
		{"ipv4 over ipv6", true, false, 14 + 40 + 8 + 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, tables := range []datapath.TableKind{datapath.PerCPU, datapath.Shared} {
				t.Run(tables.String(), func(t *testing.T) { checkVXLANOverlay(t, c.under6, c.pod6, c.encapOverhead, tables) })
			}
		})
	}
}

func checkVXLANOverlay(t *testing.T, under6, pod6 bool, overhead uint64, tables datapath.TableKind) {
	o := newOverlay(t, "ltn", under6, pod6)
	dp, err := datapath.Load(datapath.Options{FlowBudget: 256, Tables: tables, RingBufSize: 1 << 16, Capabilities: []string{"flows"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	before, err := dp.Counters()
	if err != nil {
		t.Fatal(err)
	}
	attachIn(t, o.a, o.vethA, dp)
	attachIn(t, o.a, o.vxA, dp)
	ag := startAgent(t, o.a, agentOpts{args: []string{"--iface", o.vethA, "--iface", o.vxA, "--map-type", tables.String()}})
	ag.waitLog(10*time.Second, "msg=attached", "iface="+o.vxA+" ")
	ag.waitLog(10*time.Second, "msg=attached", "iface="+o.vethA+" ")
	// Whatever the attaching crossed so far (neighbour probes) is not the
	// test's: start the datapath's count from here.
	if d, err := dp.Rotate(); err != nil {
		t.Fatal(err)
	} else if err := d.Clear(); err != nil {
		t.Fatal(err)
	}

	const out, in, size = 40, 25, 300
	aPort := netip.AddrPortFrom(o.podA, 40001)
	bPort := netip.AddrPortFrom(o.podB, 40002)
	udpFlow(t, o.a, o.b, aPort, bPort, out, size)
	udpFlow(t, o.b, o.a, bPort, aPort, in, size)
	// A TCP transfer: the VXLAN device hands the veth super-packets
	// (GSO, UDP tunnel segmentation after the hook), whose segments each
	// repeat the outer and the inner headers.
	tcpTo := netip.AddrPortFrom(o.podB, 40003)
	tcpServer(t, o.b, tcpTo, 0)
	tcpFrom := netip.AddrPortFrom(o.podA, tcpExchange(t, o.a, tcpTo, 1<<20, 0))

	d, err := dp.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	flows := map[flow.Key]flow.Stats{}
	if _, err := d.Read(func(k *flow.Key, perCPU []flow.Stats) {
		s, _ := flow.MergePerCPU(perCPU, 0)
		flows[*k] = s
	}); err != nil {
		t.Fatal(err)
	}
	tunnels, err := datapath.Tunnels(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Clear(); err != nil {
		t.Fatal(err)
	}
	vethIdx, vxIdx := uint32(ifindexIn(t, o.a, o.vethA)), uint32(ifindexIn(t, o.a, o.vxA))
	macVxA, macVxB := macOf(t, o.a, o.vxA), macOf(t, o.b, o.vxB)
	macVethA, macVethB := macOf(t, o.a, o.vethA), macOf(t, o.b, o.vethB)

	// find returns the flow of the inner datagrams from src to dst at one
	// hook, and fails the test if there is not exactly one.
	find := func(ifindex uint32, dir flow.Direction, proto uint8, src, dst netip.AddrPort) (flow.Key, flow.Stats) {
		t.Helper()
		var keys []flow.Key
		for k := range flows {
			if k.IfIndex == ifindex && k.Direction == dir && k.Proto == proto && k.SrcIP() == src.Addr() && k.DstIP() == dst.Addr() &&
				k.SrcPort == src.Port() && k.DstPort == dst.Port() {
				keys = append(keys, k)
			}
		}
		if len(keys) != 1 {
			t.Fatalf("ifindex %d %s: %d flows of %v > %v; flows: %+v", ifindex, dir, len(keys), src, dst, flows)
		}
		return keys[0], flows[keys[0]]
	}
	for _, h := range []struct {
		dir        flow.Direction
		src, dst   netip.AddrPort
		n          uint64
		srcMAC     net.HardwareAddr
		dstMAC     net.HardwareAddr
		underSrc   netip.Addr
		underDst   netip.Addr
		outerSrcMA net.HardwareAddr
		outerDstMA net.HardwareAddr
	}{
		{flow.Egress, aPort, bPort, out, macVxA, macVxB, o.underA, o.underB, macVethA, macVethB},
		{flow.Ingress, bPort, aPort, in, macVxB, macVxA, o.underB, o.underA, macVethB, macVethA},
	} {
		vk, vs := find(vethIdx, h.dir, 17, h.src, h.dst)
		xk, xs := find(vxIdx, h.dir, 17, h.src, h.dst)
		if vs.Packets != h.n || xs.Packets != h.n {
			t.Errorf("%s: %d packets at the veth, %d at the VXLAN device; the test sent %d", h.dir, vs.Packets, xs.Packets, h.n)
		}
		if vs.Bytes != xs.Bytes+h.n*overhead {
			t.Errorf("%s: %d bytes at the veth, %d at the VXLAN device: want the device's plus %d a packet", h.dir, vs.Bytes, xs.Bytes, overhead)
		}
		// The inner frame's MACs (the VXLAN devices'), at both hooks.
		for _, k := range []flow.Key{vk, xk} {
			if net.HardwareAddr(k.SrcMAC[:]).String() != h.srcMAC.String() || net.HardwareAddr(k.DstMAC[:]).String() != h.dstMAC.String() {
				t.Errorf("%s ifindex %d: MACs %x > %x, want the VXLAN devices' %v > %v", h.dir, k.IfIndex, k.SrcMAC, k.DstMAC, h.srcMAC, h.dstMAC)
			}
		}
		if info, ok := tunnels[xk]; ok {
			t.Errorf("%s: the VXLAN device's flow has an outer side: %+v", h.dir, info)
		}
		info, ok := tunnels[vk]
		if !ok {
			t.Fatalf("%s: no outer side for the veth's flow; tunnel table: %+v", h.dir, tunnels)
		}
		want := tunnel.Info{Type: tunnel.VXLAN, ID: overlayVNI, HasID: true, SrcAddr: h.underSrc, DstAddr: h.underDst,
			SrcPort: info.SrcPort, DstPort: 4789, SrcMAC: [6]byte(h.outerSrcMA), DstMAC: [6]byte(h.outerDstMA), InnerEthernet: true}
		if info != want || info.SrcPort == 0 {
			t.Errorf("%s: outer side\n got %+v\nwant %+v (any source port but 0)", h.dir, info, want)
		}
	}
	// The TCP data, A to B: the same buffers at both hooks, the veth's each
	// with the encapsulation once more in bytes, and once more for each
	// segment in wire bytes.
	_, vt := find(vethIdx, flow.Egress, 6, tcpFrom, tcpTo)
	_, xt := find(vxIdx, flow.Egress, 6, tcpFrom, tcpTo)
	t.Logf("tcp at the veth: %d packets, %d segments; at the VXLAN device: %d packets, %d segments",
		vt.Packets, vt.Segments, xt.Packets, xt.Segments)
	if vt.Packets != xt.Packets || vt.Segments != xt.Segments || vt.Bytes != xt.Bytes+vt.Packets*overhead ||
		vt.WireBytes != xt.WireBytes+vt.Segments*overhead {
		t.Errorf("tcp: veth %+v, VXLAN device %+v: want the same packets and segments, and %d bytes more a packet and a segment",
			vt, xt, overhead)
	}
	if xt.WireBytes < 1<<20 || vt.Segments <= vt.Packets {
		t.Errorf("tcp: %d wire bytes for a 1 MiB transfer, %d segments in %d packets: no super-packets crossed the hooks",
			xt.WireBytes, vt.Segments, vt.Packets)
	}

	after, err := dp.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range after {
		if strings.HasPrefix(c.Name, "tunnel_") && c.Value != before[i].Value {
			t.Errorf("counter %s moved by %d", c.Name, c.Value-before[i].Value)
		}
	}

	// The agent, attached to the same hooks, keys its records the same.
	m := ag.metrics()
	ag.stop()
	for _, h := range []struct {
		iface    string
		dir      string
		src, dst netip.AddrPort
		n        uint64
	}{
		{o.vethA, "egress", aPort, bPort, out}, {o.vxA, "egress", aPort, bPort, out},
		{o.vethA, "ingress", bPort, aPort, in}, {o.vxA, "ingress", bPort, aPort, in},
	} {
		if got := agentPackets(t, ag, h.iface, h.dir, h.src, h.dst); got != h.n {
			t.Errorf("agent: %s %s %v > %v: %d packets, the test sent %d", h.iface, h.dir, h.src, h.dst, got, h.n)
		}
	}
	for _, ev := range []string{"tunnel_truncated", "tunnel_bad_header", "tunnel_depth", "tunnel_table_full"} {
		name := `loupe_datapath_events_total{event="` + ev + `"}`
		if v, ok := m[name]; !ok || v != 0 {
			t.Errorf("agent metric %s = %v (exported: %v), want 0", name, v, ok)
		}
	}
}

// agentPackets sums the packets of the agent's exported records of one
// 5-tuple at one hook.
func agentPackets(t *testing.T, a *agent, iface, dir string, src, dst netip.AddrPort) uint64 {
	t.Helper()
	f, err := os.Open(filepath.Join(a.dir, "flows.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Iface     string     `json:"iface"`
			Direction string     `json:"direction"`
			Proto     uint8      `json:"proto"`
			SrcAddr   netip.Addr `json:"src_addr"`
			DstAddr   netip.Addr `json:"dst_addr"`
			SrcPort   uint16     `json:"src_port"`
			DstPort   uint16     `json:"dst_port"`
			Packets   uint64     `json:"packets"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("decode %q: %v", sc.Text(), err)
		}
		if r.Iface == iface && r.Direction == dir && r.Proto == 17 && r.SrcAddr == src.Addr() && r.DstAddr == dst.Addr() &&
			r.SrcPort == src.Port() && r.DstPort == dst.Port() {
			n += r.Packets
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
