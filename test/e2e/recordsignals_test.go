package e2e

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
	"loupe/internal/testutil"
	"loupe/internal/tunnel"
)

// The kernel signals and tunnels on the agent's records, end to end: what
// the sender's own counters, nftables and a VXLAN overlay say lands on the
// records the join chooses, in the JSON export and in the store alike.
// The signals are the whole kernel's: every assertion is on the test's own
// 5-tuples, of random addresses.

// signalPair is two namespaces joined by a veth pair with random IPv4
// addresses, the agent's side's offloads off so that a segment is a buffer
// at the hooks (the TC program below drops every nth of them).
type signalPair struct {
	a, b     *testutil.NS
	ifA, ifB string
	a4, b4   netip.Addr
}

func newSignalPair(t *testing.T) *signalPair {
	t.Helper()
	p := &signalPair{a: testutil.NewNSPrefix(t, "lfd-"), b: testutil.NewNSPrefix(t, "lfd-"),
		ifA: testutil.UniqueName("lfda"), ifB: testutil.UniqueName("lfdb")}
	var r [2]byte
	_, _ = rand.Read(r[:])
	p.a4, p.b4 = netip.AddrFrom4([4]byte{10, r[0], r[1], 1}), netip.AddrFrom4([4]byte{10, r[0], r[1], 2})
	testutil.Veth(t, p.a, p.ifA, p.b, p.ifB)
	for _, e := range []struct {
		ns     *testutil.NS
		ifname string
		addr   netip.Addr
	}{{p.a, p.ifA, p.a4}, {p.b, p.ifB, p.b4}} {
		e.ns.IP(t, "addr", "add", e.addr.String()+"/24", "dev", e.ifname)
		e.ns.IP(t, "link", "set", e.ifname, "up")
	}
	p.a.SetOffload(t, p.ifA, testutil.TSO, false)
	p.a.SetOffload(t, p.ifA, testutil.GSO, false)
	return p
}

// recordsOf returns the records of one 5-tuple.
func recordsOf(recs []flow.Record, src, dst netip.AddrPort, proto uint8) []flow.Record {
	var out []flow.Record
	for _, r := range recs {
		if r.Proto == proto && r.SrcIP() == src.Addr() && r.DstIP() == dst.Addr() && r.SrcPort == src.Port() && r.DstPort == dst.Port() {
			out = append(out, r)
		}
	}
	return out
}

// TestSignalsOnRecords: a TCP transfer through a TC program that drops
// every 20th data segment, and datagrams an nftables rule drops. One
// eviction (the final one) holds the run, so that the interval's signals
// are the whole run's: the egress record of the connection carries its
// RTT and exactly the retransmissions the sender counted (ss, and
// TcpRetransSegs), and no other record of its 5-tuple any; the datagrams'
// egress record carries their drops, under NETFILTER_DROP; the store says
// the same as the export.
func TestSignalsOnRecords(t *testing.T) {
	p := newSignalPair(t)
	ag := startAgent(t, p.a, agentOpts{args: []string{"--iface", p.ifA, "--cache-active-timeout", "1h"}})
	ag.waitLog(10*time.Second, "msg=attached", "iface="+p.ifA+" ")
	ag.waitLog(10*time.Second, "signals loaded", "rtt=attached", "retransmits=attached", "drops=attached")

	testutil.TCProgram(t, p.b, p.ifB, ebpf.AttachTCXIngress, testutil.DropEveryNthProgram(t, 200, 20))
	before := testutil.RetransSegs(t, p.a)
	to := netip.AddrPortFrom(p.b4, 9303)
	conn := testutil.TCPTransfer(t, p.a, p.b, to, 2<<20)
	from := conn.LocalAddr().(*net.TCPAddr).AddrPort()
	ss := testutil.SS(t, p.a, from, to)
	delta := testutil.RetransSegs(t, p.a) - before
	if ss.TotalRetrans == 0 || ss.TotalRetrans != delta {
		t.Fatalf("the sender retransmitted %d segments (ss), TcpRetransSegs moved by %d: want the same, and some", ss.TotalRetrans, delta)
	}

	const n, payload = 7, 100
	testutil.NFTRules(t, p.b, "table inet lfd {\n\tchain in {\n\t\ttype filter hook input priority 0;\n\t\tudp dport 9301 drop\n\t}\n}\n")
	var udp *net.UDPConn
	if err := p.a.Do(func() (err error) {
		udp, err = net.ListenUDP("udp4", nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	dropTo := netip.AddrPortFrom(p.b4, 9301)
	for range n {
		if _, err := udp.WriteToUDPAddrPort(make([]byte, payload), dropTo); err != nil {
			t.Fatal(err)
		}
	}
	dropFrom := netip.AddrPortFrom(p.a4, uint16(udp.LocalAddr().(*net.UDPAddr).Port))
	time.Sleep(200 * time.Millisecond) // the datagrams cross and are dropped
	ag.stop()

	for _, src := range []struct {
		name string
		recs []flow.Record
	}{{"export", ag.exported()}, {"store", ag.stored()}} {
		t.Run(src.name, func(t *testing.T) {
			checkSocketRecord(t, recordsOf(src.recs, from, to, flow.ProtoTCP), p.ifA, ss)
			checkDropRecord(t, recordsOf(src.recs, dropFrom, dropTo, flow.ProtoUDP), p.ifA, n, n*(20+8+payload))
		})
	}
}

// checkSocketRecord checks the records of the connection's own 5-tuple:
// exactly one carries its signals, the egress record on iface, with the
// sender's retransmissions and an RTT ss agrees with; the TC program's
// drops of its segments are there too.
func checkSocketRecord(t *testing.T, recs []flow.Record, iface string, ss testutil.SSInfo) {
	t.Helper()
	var carriers []flow.Record
	var retrans uint64
	for _, r := range recs {
		retrans += r.Retransmits
		if r.Has.Any(flow.HasRTT | flow.HasRetransmits) {
			carriers = append(carriers, r)
		}
	}
	if len(carriers) != 1 {
		t.Fatalf("%d records of the connection carry its signals, want 1: %+v", len(carriers), recs)
	}
	r := carriers[0]
	if r.Iface != iface || r.Direction != flow.Egress || r.Packets == 0 {
		t.Errorf("the connection's signals are on %s %s (%d packets), want its egress record on %s", r.Iface, r.Direction, r.Packets, iface)
	}
	if !r.Has.Any(flow.HasRetransmits) || r.Retransmits != ss.TotalRetrans || retrans != ss.TotalRetrans {
		t.Errorf("retransmits %d (present %v), %d over the 5-tuple's records; the sender counted %d", r.Retransmits,
			r.Has.Any(flow.HasRetransmits), retrans, ss.TotalRetrans)
	}
	if r.Has&flow.HasRTT != flow.HasRTT || r.RTTMinNs == 0 || !(r.RTTMinNs <= r.RTTLastNs && r.RTTLastNs <= r.RTTMaxNs) {
		t.Errorf("RTT min %d last %d max %d (present %v): want min <= last <= max, all measured", r.RTTMinNs, r.RTTLastNs, r.RTTMaxNs, r.Has&flow.HasRTT)
	}
	// ss prints the smoothed RTT in milliseconds with three decimals; the
	// last sample is taken before the last segment's ACK updates it.
	if last := float64(r.RTTLastNs) / 1000; last-ss.RTTUs > 0.2*ss.RTTUs+2 || ss.RTTUs-last > 0.2*ss.RTTUs+2 {
		t.Errorf("last RTT %.0f µs, ss says %.0f µs", last, ss.RTTUs)
	}
	if r.DropReasons["TC_INGRESS"] == 0 {
		t.Errorf("the segments the TC program dropped are not on the record: drops %d %v", r.DropPackets, r.DropReasons)
	}
	t.Logf("socket record: %d retransmits, RTT %d/%d/%d ns, drops %v; ss %.0f µs", r.Retransmits, r.RTTMinNs, r.RTTLastNs, r.RTTMaxNs, r.DropReasons, ss.RTTUs)
}

// checkDropRecord checks the records of the dropped datagrams' 5-tuple:
// their egress record on iface carries n drops of wantBytes bytes (IP
// length), all NETFILTER_DROP, and no other record any.
func checkDropRecord(t *testing.T, recs []flow.Record, iface string, n int, wantBytes int) {
	t.Helper()
	var with []flow.Record
	for _, r := range recs {
		if r.Has.Any(flow.HasDrops) {
			with = append(with, r)
		}
	}
	if len(with) != 1 {
		t.Fatalf("%d records of the dropped datagrams carry drops, want 1: %+v", len(with), recs)
	}
	r := with[0]
	want := flow.DropReasons{"NETFILTER_DROP": uint64(n)}
	if r.Iface != iface || r.Direction != flow.Egress || r.Packets != uint64(n) || r.DropPackets != uint64(n) ||
		r.DropBytes != uint64(wantBytes) || fmt.Sprint(r.DropReasons) != fmt.Sprint(want) {
		t.Errorf("drop record: %s %s, %d packets, drops %d (%d bytes) %v; want the egress record on %s, %d packets, %d drops (%d bytes) %v",
			r.Iface, r.Direction, r.Packets, r.DropPackets, r.DropBytes, r.DropReasons, iface, n, n, wantBytes, want)
	}
}

// TestTunnelOnRecords: datagrams across a VXLAN overlay, the agent at the
// underlay veth and at the VXLAN device: the veth's records of the inner
// 5-tuple carry the tunnel (VXLAN, VNI 42, the underlay's addresses and
// port 4789), the device's do not; the store says the same as the export.
func TestTunnelOnRecords(t *testing.T) {
	o := newOverlay(t, "lfd", false, false)
	ag := startAgent(t, o.a, agentOpts{args: []string{"--iface", o.vethA, "--iface", o.vxA, "--cache-active-timeout", "1h"}})
	ag.waitLog(10*time.Second, "msg=attached", "iface="+o.vxA+" ")
	ag.waitLog(10*time.Second, "msg=attached", "iface="+o.vethA+" ")
	const n, size = 30, 200
	aPort, bPort := netip.AddrPortFrom(o.podA, 40011), netip.AddrPortFrom(o.podB, 40012)
	udpFlow(t, o.a, o.b, aPort, bPort, n, size)
	ag.stop()

	for _, src := range []struct {
		name string
		recs []flow.Record
	}{{"export", ag.exported()}, {"store", ag.stored()}} {
		t.Run(src.name, func(t *testing.T) {
			var veth, vx uint64
			for _, r := range recordsOf(src.recs, aPort, bPort, flow.ProtoUDP) {
				switch r.Iface {
				case o.vethA:
					veth += r.Packets
					if r.Has&(flow.HasTunnel|flow.HasTunnelID) != flow.HasTunnel|flow.HasTunnelID || r.TunnelType != tunnel.VXLAN ||
						r.TunnelID != overlayVNI || r.OuterSrcAddr != o.underA || r.OuterDstAddr != o.underB ||
						r.OuterDstPort != 4789 || r.OuterSrcPort == 0 {
						t.Errorf("underlay record: tunnel %v %d %v > %v ports %d > %d (present %#x); want vxlan %d %v > %v, 4789",
							r.TunnelType, r.TunnelID, r.OuterSrcAddr, r.OuterDstAddr, r.OuterSrcPort, r.OuterDstPort, r.Has,
							overlayVNI, o.underA, o.underB)
					}
				case o.vxA:
					vx += r.Packets
					if r.Has.Any(flow.HasTunnel | flow.HasTunnelID) {
						t.Errorf("the VXLAN device's record has a tunnel: %+v", r)
					}
				}
			}
			if veth != n || vx != n {
				t.Errorf("%d packets at the veth, %d at the VXLAN device; the test sent %d", veth, vx, n)
			}
		})
	}
	if out := ag.run("flows", "--since", "0", "--iface", o.vethA, "--proto", "udp", "--port", "40012"); !regexp.MustCompile(`vxlan 42 ` + o.underA.String() + `:\d+ > ` + o.underB.String() + `:4789`).MatchString(out) {
		t.Errorf("loupe flows shows no tunnel:\n%s", out)
	}
}
