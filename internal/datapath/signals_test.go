package datapath

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"loupe/internal/testutil"
)

func TestSignalCounterNamesMatchGenerated(t *testing.T) {
	checkCounterNames(t, "signals_bpfel.go", "signalsSignalCounterSIGNAL_COUNTER_", signalCounterNames[:])
}

// sendUDP sends n datagrams of payload bytes from ns to dst and returns the
// source address they left from.
func sendUDP(t *testing.T, ns *testutil.NS, dst netip.AddrPort, n, payload int) netip.AddrPort {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.Dial("udp", dst.String())
		return err
	}); err != nil {
		t.Fatalf("dial %s: %v", dst, err)
	}
	defer c.Close()
	buf := make([]byte, payload)
	for range n {
		if _, err := c.Write(buf); err != nil {
			t.Fatalf("send to %s: %v", dst, err)
		}
	}
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// ipLen is the IP length of a UDP datagram: what a drop's bytes count.
func ipLen(dst netip.Addr, payload int) uint64 {
	if dst.Is4() {
		return uint64(20 + 8 + payload)
	}
	return uint64(40 + 8 + payload)
}

// checkDrops waits for the drops of key and requires exactly packets of
// them, of bytes each, all for reason.
func checkDrops(t *testing.T, s *Signals, key SignalKey, reason string, packets int, bytes uint64) {
	t.Helper()
	c := newCollector(t, s)
	c.until(func() bool { return c.got[key].Drops[reason].Packets >= uint64(packets) })
	got := c.got[key].Drops
	want := DropCount{Packets: uint64(packets), Bytes: uint64(packets) * bytes}
	if len(got) != 1 || got[reason] != want {
		t.Fatalf("drops of %s: %v, want %s: %+v", key, got, reason, want)
	}
}

// TestSignalsDropsNetfilter: an nftables rule drops every datagram to one
// port; the drops of that 5-tuple are exactly the datagrams sent, for the
// reason the kernel names NETFILTER_DROP, over IPv4 and IPv6.
func TestSignalsDropsNetfilter(t *testing.T) {
	s := loadSignalsForTest(t, SignalDrops)
	p := newSigPair(t)
	const port, n, payload = 9301, 17, 100
	testutil.NFTRules(t, p.b, `table inet lsg {
	chain in {
		type filter hook input priority 0; udp dport 9301 drop
	}
}`)
	for _, dst := range []netip.Addr{p.b4, p.b6} {
		t.Run(map[bool]string{true: "ipv4", false: "ipv6"}[dst.Is4()], func(t *testing.T) {
			to := netip.AddrPortFrom(dst, port)
			from := sendUDP(t, p.a, to, n, payload)
			checkDrops(t, s, sigKey(from, to, 17), "NETFILTER_DROP", n, ipLen(dst, payload))
		})
	}
}

// TestSignalsDropsTC: a TCX program that returns TC_ACT_SHOT for the
// test's datagrams, at the receiver's ingress or the sender's egress; the
// drops carry the reason the running kernel gives a TC drop at that hook.
func TestSignalsDropsTC(t *testing.T) {
	s := loadSignalsForTest(t, SignalDrops)
	for _, tc := range []struct {
		name   string
		at     ebpf.AttachType
		reason string
	}{
		{"ingress", ebpf.AttachTCXIngress, "TC_INGRESS"},
		{"egress", ebpf.AttachTCXEgress, "TC_EGRESS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newSigPair(t)
			const n, payload = 13, 333
			ns, ifname := p.b, p.ifB
			if tc.at == ebpf.AttachTCXEgress {
				ns, ifname = p.a, p.ifA
			}
			// The buffer's length at the hook: Ethernet, IPv4, UDP, payload.
			testutil.TCProgram(t, ns, ifname, tc.at, testutil.DropLenProgram(14+20+8+payload))
			to := netip.AddrPortFrom(p.b4, 9302)
			from := sendUDP(t, p.a, to, n, payload)
			checkDrops(t, s, sigKey(from, to, 17), tc.reason, n, ipLen(p.b4, payload))
		})
	}
}

// TestSignalsRetransmits: a TC program drops every 20th data segment of one
// connection at the receiver; the retransmitted segments the signal counts
// for the sender's 5-tuple equal the sender's own counts: ss's total for
// the connection, and TcpRetransSegs of its namespace.
func TestSignalsRetransmits(t *testing.T) {
	s := loadSignalsForTest(t, SignalRetransmits)
	p := newSigPair(t)
	// One buffer per segment at the hooks, so that "every 20th" is of
	// segments and each retransmission is one.
	p.a.SetOffload(t, p.ifA, testutil.TSO, false)
	p.a.SetOffload(t, p.ifA, testutil.GSO, false)
	testutil.TCProgram(t, p.b, p.ifB, ebpf.AttachTCXIngress, testutil.DropEveryNthProgram(t, 200, 20))

	c := newCollector(t, s)
	c.drain()
	before := testutil.RetransSegs(t, p.a)
	to := netip.AddrPortFrom(p.b4, 9303)
	conn := testutil.TCPTransfer(t, p.a, p.b, to, 2<<20)
	from := conn.LocalAddr().(*net.TCPAddr).AddrPort()
	ss := testutil.SS(t, p.a, from, to)
	delta := testutil.RetransSegs(t, p.a) - before

	key := sigKey(from, to, 6)
	c.until(func() bool { return c.got[key].Retransmits >= ss.TotalRetrans })
	got := c.got[key].Retransmits
	if ss.TotalRetrans == 0 {
		t.Fatal("the sender retransmitted nothing: the dropping program did not drop")
	}
	if got != ss.TotalRetrans || got != delta {
		t.Fatalf("retransmits of %s: %d; the sender's ss total %d, TcpRetransSegs delta %d", key, got, ss.TotalRetrans, delta)
	}
	t.Logf("%d segments retransmitted", got)
}

// TestSignalsRTT: the smoothed RTT recorded for a connection is the one
// the sender's socket reports (ss), on a bare veth and behind a
// rate-limited queue (tbf) that raises it by tens of milliseconds.
func TestSignalsRTT(t *testing.T) {
	s := loadSignalsForTest(t, SignalRTT)
	p := newSigPair(t)
	c := newCollector(t, s)

	measure := func(port uint16, size int) (RTT, float64) {
		t.Helper()
		to := netip.AddrPortFrom(p.b4, port)
		conn := testutil.TCPTransfer(t, p.a, p.b, to, size)
		from := conn.LocalAddr().(*net.TCPAddr).AddrPort()
		ss := testutil.SS(t, p.a, from, to)
		key := sigKey(from, to, 6)
		c.until(func() bool { return c.got[key].RTT != nil })
		r := c.got[key].RTT
		if r == nil {
			t.Fatalf("no RTT for %s", key)
		}
		if !(r.MinNs <= r.LastNs && r.LastNs <= r.MaxNs) || r.Samples == 0 {
			t.Fatalf("RTT of %s: %+v, want min <= last <= max and samples", key, *r)
		}
		// ss prints the RTT in milliseconds with three decimals; the
		// last sample is taken before the last segment's ACK is
		// processed, which may move the estimate by an eighth of a
		// new sample.
		last := float64(r.LastNs) / 1000
		if diff := last - ss.RTTUs; diff > 0.2*ss.RTTUs+2 || -diff > 0.2*ss.RTTUs+2 {
			t.Fatalf("RTT of %s: last %.0f µs, ss says %.0f µs", key, last, ss.RTTUs)
		}
		t.Logf("%s: %+v, ss %.0f µs", key, *r, ss.RTTUs)
		return *r, ss.RTTUs
	}

	bare, _ := measure(9304, 256<<10)
	// 10 Mbit/s with up to 40 ms of queue: a bulk sender fills it.
	p.a.Run(t, "tc", "qdisc", "add", "dev", p.ifA, "root", "tbf", "rate", "10mbit", "burst", "10kb", "latency", "40ms")
	shaped, _ := measure(9305, 1<<20)
	if shaped.MaxNs < 10*uint64(time.Millisecond) || shaped.LastNs < 10*bare.LastNs {
		t.Fatalf("behind the queue the RTT did not rise: bare %+v, shaped %+v", bare, shaped)
	}
}

// TestSignalsTracepointUnavailable: a signal whose tracepoint the kernel
// does not have is off, with the kernel's refusal as its reason; the other
// signals are attached and count.
func TestSignalsTracepointUnavailable(t *testing.T) {
	testutil.RequirePrivileged(t)
	s, err := LoadSignals(SignalsOptions{
		On: map[Signal]bool{SignalRTT: true, SignalRetransmits: true, SignalDrops: true},
		// The tracepoints see every connection of the machine: a table
		// as large as the other tests' keeps others' from crowding
		// this one's out.
		TableSize:   4096,
		Tracepoints: map[Signal]string{SignalDrops: "lsg_no_such_tracepoint"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.State(SignalDrops); st.Up || !strings.Contains(st.Reason, "lsg_no_such_tracepoint") {
		t.Fatalf("drops: %+v, want off with the tracepoint named", st)
	}
	for _, sig := range []Signal{SignalRTT, SignalRetransmits} {
		if st := s.State(sig); !st.Up {
			t.Fatalf("%s: %+v, want attached", sig, st)
		}
	}
	if _, ok, _ := s.ProgramStats(SignalDrops); ok {
		t.Fatal("drops has a program though it is off")
	}
	p := newSigPair(t)
	to := netip.AddrPortFrom(p.b4, 9306)
	conn := testutil.TCPTransfer(t, p.a, p.b, to, 64<<10)
	key := sigKey(conn.LocalAddr().(*net.TCPAddr).AddrPort(), to, 6)
	c := newCollector(t, s)
	c.until(func() bool { return c.got[key].RTT != nil })
	if c.got[key].RTT == nil {
		t.Fatalf("no RTT for %s while drops is off", key)
	}
}

// TestSignalsOnlyAsked: signals not asked for are off as disabled, and
// with none asked for nothing is loaded and Drain returns nothing.
func TestSignalsOnlyAsked(t *testing.T) {
	s := loadSignalsForTest(t, SignalRTT)
	for _, sig := range []Signal{SignalRetransmits, SignalDrops} {
		if st := s.State(sig); st.Up || st.Reason != ReasonDisabled {
			t.Fatalf("%s: %+v, want disabled", sig, st)
		}
	}
	none, err := LoadSignals(SignalsOptions{TableSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	if m, err := none.Drain(); err != nil || len(m) != 0 {
		t.Fatalf("drain with no signal: %v, %v", m, err)
	}
	if n, err := none.MemoryBytes(); err != nil || n != 0 {
		t.Fatalf("memory with no signal: %d, %v", n, err)
	}
}
