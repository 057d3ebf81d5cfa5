package datapath

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// The kernel signals' tests: real traffic between two namespaces the test
// creates, the signals' programs attached to the real tracepoints, and
// ground truth from the test itself (what it sent, what the kernel's own
// counters say). The tracepoints are the whole kernel's, so every
// assertion is on the test's own 5-tuples, made of random addresses.

// sigPair is two namespaces joined by a veth pair, with random IPv4 and
// IPv6 addresses on each end.
type sigPair struct {
	a, b               *testutil.NS
	ifA, ifB           string
	a4, b4             netip.Addr
	a6, b6             netip.Addr
	ifindexA, ifindexB int
}

func newSigPair(t *testing.T) *sigPair {
	t.Helper()
	p := &sigPair{a: testutil.NewNSPrefix(t, "lsg-"), b: testutil.NewNSPrefix(t, "lsg-"),
		ifA: testutil.UniqueName("lsga"), ifB: testutil.UniqueName("lsgb")}
	var r [4]byte
	_, _ = rand.Read(r[:])
	p.a4 = netip.AddrFrom4([4]byte{10, r[0], r[1], 1})
	p.b4 = netip.AddrFrom4([4]byte{10, r[0], r[1], 2})
	p.a6 = netip.MustParseAddr(fmt.Sprintf("fd%02x:%02x%02x::1", r[1], r[2], r[3]))
	p.b6 = netip.MustParseAddr(fmt.Sprintf("fd%02x:%02x%02x::2", r[1], r[2], r[3]))
	testutil.Veth(t, p.a, p.ifA, p.b, p.ifB)
	for _, e := range []struct {
		ns     *testutil.NS
		ifname string
		v4, v6 netip.Addr
	}{{p.a, p.ifA, p.a4, p.a6}, {p.b, p.ifB, p.b4, p.b6}} {
		e.ns.IP(t, "addr", "add", e.v4.String()+"/24", "dev", e.ifname)
		e.ns.IP(t, "addr", "add", e.v6.String()+"/64", "dev", e.ifname, "nodad")
		e.ns.IP(t, "link", "set", e.ifname, "up")
	}
	p.ifindexA, p.ifindexB = ifindexIn(t, p.a, p.ifA), ifindexIn(t, p.b, p.ifB)
	return p
}

func ifindexIn(t *testing.T, ns *testutil.NS, ifname string) int {
	t.Helper()
	var idx int
	if err := ns.Do(func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		idx = ifc.Index
		return nil
	}); err != nil {
		t.Fatalf("interface %s in %s: %v", ifname, ns.Name, err)
	}
	return idx
}

// loadSignalsForTest loads the signals named (all when none is).
func loadSignalsForTest(t *testing.T, on ...Signal) *Signals {
	t.Helper()
	testutil.RequirePrivileged(t)
	if len(on) == 0 {
		on = AllSignals()
	}
	want := map[Signal]bool{}
	for _, sig := range on {
		want[sig] = true
	}
	s, err := LoadSignals(SignalsOptions{On: want, TableSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, sig := range on {
		if st := s.State(sig); !st.Up {
			t.Fatalf("signal %s is off: %s", sig, st.Reason)
		}
	}
	return s
}

// signalCollector sums what successive drains return, for the keys a test
// cares about.
type signalCollector struct {
	t   *testing.T
	s   *Signals
	got map[SignalKey]SignalValues
}

func newCollector(t *testing.T, s *Signals) *signalCollector {
	return &signalCollector{t: t, s: s, got: map[SignalKey]SignalValues{}}
}

// drain adds one drain's values: counts add up, the RTT of the latest
// interval with samples replaces the earlier one (its min and max are
// those of every interval).
func (c *signalCollector) drain() {
	c.t.Helper()
	m, err := c.s.Drain()
	if err != nil {
		c.t.Fatalf("drain: %v", err)
	}
	for k, v := range m {
		acc := c.got[k]
		acc.Retransmits += v.Retransmits
		if v.RTT != nil {
			if acc.RTT == nil {
				r := *v.RTT
				acc.RTT = &r
			} else {
				acc.RTT.MinNs = min(acc.RTT.MinNs, v.RTT.MinNs)
				acc.RTT.MaxNs = max(acc.RTT.MaxNs, v.RTT.MaxNs)
				acc.RTT.LastNs = v.RTT.LastNs
				acc.RTT.Samples += v.RTT.Samples
			}
		}
		for reason, d := range v.Drops {
			if acc.Drops == nil {
				acc.Drops = map[string]DropCount{}
			}
			sum := acc.Drops[reason]
			sum.Packets += d.Packets
			sum.Bytes += d.Bytes
			acc.Drops[reason] = sum
		}
		c.got[k] = acc
	}
}

// until drains every 20 ms until done says the key's values are complete,
// for at most 5 s; then once more after 100 ms, so that anything counted
// beyond what the test expects shows.
func (c *signalCollector) until(done func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.drain()
		if done() || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	c.drain()
}

// key4 is the signal key of a 5-tuple.
func sigKey(src netip.AddrPort, dst netip.AddrPort, proto uint8) SignalKey {
	return SignalKey{SrcAddr: src.Addr().As16(), DstAddr: dst.Addr().As16(), SrcPort: src.Port(),
		DstPort: dst.Port(), Proto: proto}
}
