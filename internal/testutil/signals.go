package testutil

import (
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
)

// Ground truth for the kernel signals' tests (internal/datapath, test/e2e):
// TC programs that drop what a test chooses, a TCP transfer between two
// namespaces, what the sender's own counters (ss, /proc/net/snmp) say, and
// nftables rules.

// Ifindex is the index of interface ifname in ns.
func (ns *NS) Ifindex(t testing.TB, ifname string) int {
	t.Helper()
	return ns.iface(t, ifname).Index
}

// MAC is the hardware address of interface ifname in ns.
func (ns *NS) MAC(t testing.TB, ifname string) string {
	t.Helper()
	return ns.iface(t, ifname).HardwareAddr.String()
}

func (ns *NS) iface(t testing.TB, ifname string) *net.Interface {
	t.Helper()
	var ifc *net.Interface
	if err := ns.Do(func() (err error) {
		ifc, err = net.InterfaceByName(ifname)
		return err
	}); err != nil {
		t.Fatalf("interface %s in %s: %v", ifname, ns.Name, err)
	}
	return ifc
}

// TCProgram loads a TC program made of insns and attaches it with TCX at
// ifname's hook in ns; detached when the test ends.
func TCProgram(t testing.TB, ns *NS, ifname string, at ebpf.AttachType, insns asm.Instructions) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "lsg_test_tc", Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"})
	if err != nil {
		t.Fatalf("load test TC program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	idx := ns.Ifindex(t, ifname)
	var l link.Link
	if err := ns.Do(func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Interface: idx, Program: prog, Attach: at})
		return err
	}); err != nil {
		t.Fatalf("attach test TC program to %s: %v", ifname, err)
	}
	t.Cleanup(func() { l.Close() })
}

// Return codes of the tests' TCX programs.
const (
	TCXPass = -1 // TCX_NEXT: let the next program (or the stack) decide
	TCXDrop = 2  // TCX_DROP, TC_ACT_SHOT for cls_bpf
)

// DropLenProgram drops every buffer of exactly length bytes (the L2 length
// the hook sees, __sk_buff.len) and lets everything else through: ARP and
// neighbour discovery never have the length of the test's datagrams.
func DropLenProgram(length int) asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // __sk_buff.len
		asm.Mov.Imm(asm.R0, TCXPass),
		asm.JNE.Imm(asm.R2, int32(length), "out"),
		asm.Mov.Imm(asm.R0, TCXDrop),
		asm.Return().WithSymbol("out"),
	}
}

// DropEveryNthProgram drops every nth buffer longer than minLen (the data
// segments of a TCP connection; ACKs, SYNs and FINs are shorter), counting
// them in a one-entry array.
func DropEveryNthProgram(t testing.TB, minLen, nth int) asm.Instructions {
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
		asm.Mov.Imm(asm.R0, TCXDrop),
		asm.Return(),
		asm.Mov.Imm(asm.R0, TCXPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// TCPTransfer connects from ns a to a listener in ns b at dst, sends size
// bytes, and waits until the receiver has read them all (it answers one
// byte). before, if not nil, runs once the connection is up. It returns
// the connection, still open, so that the test reads the sender's socket
// state before closing it.
func TCPTransfer(t testing.TB, a, b *NS, dst netip.AddrPort, size int) net.Conn {
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

// SSInfo is what `ss -tin` says of one connection of a namespace.
type SSInfo struct {
	RTTUs        float64 // smoothed RTT, microseconds
	TotalRetrans uint64  // tcpi_total_retrans, segments
}

var (
	ssRTT     = regexp.MustCompile(`\brtt:([0-9.]+)/`)
	ssRetrans = regexp.MustCompile(`\bretrans:\d+/(\d+)`)
)

// SS reads what `ss -tin` says of the connection local > remote in ns.
func SS(t testing.TB, ns *NS, local, remote netip.AddrPort) SSInfo {
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
	info := SSInfo{RTTUs: ms * 1000}
	// ss leaves retrans out while the total is zero.
	if m := ssRetrans.FindStringSubmatch(out); m != nil {
		info.TotalRetrans, _ = strconv.ParseUint(m[1], 10, 64)
	}
	return info
}

// RetransSegs reads TcpRetransSegs, the namespace's count of retransmitted
// segments, from /proc/net/snmp as a process inside ns sees it.
func RetransSegs(t testing.TB, ns *NS) uint64 {
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

// NFTRules loads an nftables ruleset (nft -f syntax) into ns.
func NFTRules(t testing.TB, ns *NS, rules string) {
	t.Helper()
	nft := RequirePeer(t, "nft")
	cmd := ns.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s", ns.Name, err, out)
	}
}
