package datapath

import (
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

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

// tcProgram loads a TC program made of insns and attaches it with TCX at
// ifname's hook in ns; detached when the test ends.
func tcProgram(t *testing.T, ns *testutil.NS, ifname string, at ebpf.AttachType, insns asm.Instructions) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "lsg_test_tc", Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"})
	if err != nil {
		t.Fatalf("load test TC program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	idx := ifindexIn(t, ns, ifname)
	var l link.Link
	if err := ns.Do(func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Interface: idx, Program: prog, Attach: at})
		return err
	}); err != nil {
		t.Fatalf("attach test TC program to %s: %v", ifname, err)
	}
	t.Cleanup(func() { l.Close() })
}

// Return codes of the test's TCX programs.
const (
	tcxPass = -1 // TCX_NEXT: let the next program (or the stack) decide
	tcxDrop = 2  // TCX_DROP, TC_ACT_SHOT for cls_bpf
)

// dropLenProgram drops every buffer of exactly length bytes (the L2 length
// the hook sees, __sk_buff.len) and lets everything else through: ARP and
// neighbour discovery never have the length of the test's datagrams.
func dropLenProgram(length int) asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // __sk_buff.len
		asm.Mov.Imm(asm.R0, tcxPass),
		asm.JNE.Imm(asm.R2, int32(length), "out"),
		asm.Mov.Imm(asm.R0, tcxDrop),
		asm.Return().WithSymbol("out"),
	}
}

// dropEveryNthProgram drops every nth buffer longer than minLen (the data
// segments of a TCP connection; ACKs, SYNs and FINs are shorter), counting
// them in a one-entry array.
func dropEveryNthProgram(t *testing.T, minLen, nth int) asm.Instructions {
	t.Helper()
	count, err := ebpf.NewMap(&ebpf.MapSpec{Name: "lsg_test_nth", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatalf("create counter map: %v", err)
	}
	t.Cleanup(func() { count.Close() })
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // __sk_buff.len
		asm.JLE.Imm(asm.R2, int32(minLen), "pass"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, count.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mod.Imm(asm.R1, int32(nth)),
		asm.JNE.Imm(asm.R1, 0, "pass"),
		asm.Mov.Imm(asm.R0, tcxDrop),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// tcpTransfer connects from ns a to a listener in ns b at dst, sends size
// bytes, and waits until the receiver has read them all (it answers one
// byte). before, if not nil, runs once the connection is up. It returns
// the connection, still open, so that the test reads the sender's socket
// state before closing it.
func tcpTransfer(t *testing.T, a, b *testutil.NS, dst netip.AddrPort, size int) net.Conn {
	t.Helper()
	var ln net.Listener
	if err := b.Do(func() (err error) {
		ln, err = net.Listen("tcp", dst.String())
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", b.Name, err)
	}
	defer ln.Close()
	recvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			recvErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		if _, err := io.CopyN(io.Discard, c, int64(size)); err != nil {
			recvErr <- err
			return
		}
		_, err = c.Write([]byte{1})
		recvErr <- err
		// Stay open until the sender closes: a close here would
		// send a FIN the test does not expect yet.
		io.Copy(io.Discard, c)
	}()
	var c net.Conn
	if err := a.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", dst.String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect from %s: %v", a.Name, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatalf("send: %v", err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		t.Fatalf("read the receiver's answer: %v", err)
	}
	if err := <-recvErr; err != nil {
		t.Fatalf("receiver: %v", err)
	}
	return c
}

// ssInfo is what `ss -tin` says of one connection of ns.
type ssInfo struct {
	rttUs        float64 // smoothed RTT
	totalRetrans uint64  // tcpi_total_retrans, segments
}

var (
	ssRTT     = regexp.MustCompile(`\brtt:([0-9.]+)/`)
	ssRetrans = regexp.MustCompile(`\bretrans:\d+/(\d+)`)
)

func ssOf(t *testing.T, ns *testutil.NS, local, remote netip.AddrPort) ssInfo {
	t.Helper()
	out := ns.Run(t, "ss", "-tinH", "src", local.String(), "dst", remote.String())
	m := ssRTT.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no rtt in ss output for %s > %s:\n%s", local, remote, out)
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	info := ssInfo{rttUs: ms * 1000}
	// ss leaves retrans out while the total is zero.
	if m := ssRetrans.FindStringSubmatch(out); m != nil {
		info.totalRetrans, _ = strconv.ParseUint(m[1], 10, 64)
	}
	return info
}

// retransSegs reads TcpRetransSegs, the namespace's count of retransmitted
// segments, from /proc/net/snmp as a process inside ns sees it.
func retransSegs(t *testing.T, ns *testutil.NS) uint64 {
	t.Helper()
	out := ns.Run(t, "cat", "/proc/net/snmp")
	var names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "RetransSegs" && i < len(f) {
				v, err := strconv.ParseUint(f[i], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatalf("no Tcp RetransSegs in /proc/net/snmp:\n%s", out)
	return 0
}

// nftRules loads an nftables ruleset (nft -f syntax) into ns.
func nftRules(t *testing.T, ns *testutil.NS, rules string) {
	t.Helper()
	nft := testutil.RequirePeer(t, "nft")
	cmd := ns.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s", ns.Name, err, out)
	}
}
