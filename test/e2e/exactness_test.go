package e2e

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"loupe/internal/testutil"
)

// The exactness tests run the agent under every attach mode and table kind:
// what the hook sees must not depend on either.
var hookModes = []struct {
	name string
	args []string
}{
	{"tcx/percpu", []string{"--attach-mode", "tcx", "--map-type", "percpu"}},
	{"tcx/shared", []string{"--attach-mode", "tcx", "--map-type", "shared"}},
	{"tc/percpu", []string{"--attach-mode", "tc", "--map-type", "percpu"}},
	{"tc/shared", []string{"--attach-mode", "tc", "--map-type", "shared"}},
	// Off-path: every packet through the ring buffer, counted in userspace;
	// a ring buffer that holds the tests' bursts whole (a full one loses
	// packets, counted: TestOffPathCountsWhatItLoses).
	{"tcx/ringbuf", []string{"--attach-mode", "tcx", "--map-type", "ringbuf", "--ringbuf-size", "32MiB"}},
}

// wireRecord is the part of an exported JSON record these tests read,
// including the fields that say what crossed the wire. The pointers tell a
// field the export does not carry from a zero.
type wireRecord struct {
	Iface     string  `json:"iface"`
	Direction string  `json:"direction"`
	EtherType uint16  `json:"eth_type"`
	SrcPort   uint16  `json:"src_port"`
	Packets   uint64  `json:"packets"`
	Bytes     uint64  `json:"bytes"`
	Segments  *uint64 `json:"segments"`
	WireBytes *uint64 `json:"wire_bytes"`
	VlanID    *uint16 `json:"vlan_id"`
}

// wireRecords reads the JSON export of the agent for one interface.
func (a *agent) wireRecords(iface string) []wireRecord {
	a.t.Helper()
	f, err := os.Open(filepath.Join(a.dir, "flows.jsonl"))
	if err != nil {
		a.t.Fatal(err)
	}
	defer f.Close()
	var out []wireRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r wireRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			a.t.Fatalf("decode %q: %v", sc.Text(), err)
		}
		if r.Iface == iface {
			out = append(out, r)
		}
	}
	if err := sc.Err(); err != nil {
		a.t.Fatal(err)
	}
	if len(out) == 0 {
		a.t.Fatalf("no record of %s exported", iface)
	}
	return out
}

// requireWireFields fails the test unless every record carries segments,
// wire_bytes and vlan_id: a JSON export without them cannot prove them.
func requireWireFields(t *testing.T, recs []wireRecord) {
	t.Helper()
	for _, r := range recs {
		if r.Segments == nil || r.WireBytes == nil || r.VlanID == nil {
			t.Fatalf("record without segments, wire_bytes or vlan_id: %+v", r)
		}
	}
}

// wireTotals sums the records of one direction; match, if not nil, picks
// the records to sum.
type wireTotals struct{ packets, bytes, segments, wireBytes uint64 }

func sumWire(recs []wireRecord, dir string, match func(*wireRecord) bool) wireTotals {
	var s wireTotals
	for i := range recs {
		r := &recs[i]
		if r.Direction != dir || (match != nil && !match(r)) {
			continue
		}
		s.packets += r.Packets
		s.bytes += r.Bytes
		if r.Segments != nil {
			s.segments += *r.Segments
		}
		if r.WireBytes != nil {
			s.wireBytes += *r.WireBytes
		}
	}
	return s
}

// quietPair is a veth pair with no addresses and IPv6 off, brought up after
// the agent attached: the only frames crossing it are the test's.
func quietPair(t *testing.T, mode []string) (*pair, *agent) {
	t.Helper()
	p := newPair(t)
	p.a.Sysctl(t, "net.ipv6.conf."+p.vethA+".disable_ipv6", "1")
	p.b.Sysctl(t, "net.ipv6.conf."+p.vethB+".disable_ipv6", "1")
	a := startAgent(t, p.a, agentOpts{args: mode})
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	p.a.IP(t, "link", "set", p.vethA, "up")
	p.b.IP(t, "link", "set", p.vethB, "up")
	waitOperUp(t, p.a, p.vethA)
	return p, a
}

// waitOperUp waits until the interface reports carrier.
func waitOperUp(t *testing.T, ns *testutil.NS, ifname string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := ns.IP(t, "-br", "link", "show", "dev", ifname)
		if f := strings.Fields(out); len(f) > 1 && f[1] == "UP" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never came up: %s", ifname, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pushVLAN attaches, at the head of ifname's TCX egress chain in ns (so
// before the agent's program in either attach mode: TCX programs run before
// cls_bpf filters), a program that puts an 802.1Q tag with vid into every
// frame's skb metadata, as a VLAN device on top of the interface does when
// the interface offloads tag insertion. Detached when the test ends, or by
// the returned func.
func pushVLAN(t *testing.T, ns *testutil.NS, ifname string, vid uint16) func() {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "test_vlan_push",
		Type: ebpf.SchedCLS,
		Instructions: asm.Instructions{
			// bpf_skb_vlan_push(skb, htons(ETH_P_8021Q), vid); r1 is skb
			asm.Mov.Imm(asm.R2, int32(binary.NativeEndian.Uint16([]byte{0x81, 0x00}))),
			asm.Mov.Imm(asm.R3, int32(vid)),
			asm.FnSkbVlanPush.Call(),
			asm.Mov.Imm(asm.R0, -1), // TCX_NEXT
			asm.Return(),
		},
		License: "GPL",
	})
	if err != nil {
		t.Fatalf("load VLAN push program: %v", err)
	}
	idx := ifindexIn(t, ns, ifname)
	var l link.Link
	if err := ns.Do(func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Interface: idx, Program: prog, Attach: ebpf.AttachTCXEgress, Anchor: link.Head()})
		return err
	}); err != nil {
		prog.Close()
		t.Fatalf("attach VLAN push program to %s: %v", ifname, err)
	}
	detached := false
	detach := func() {
		if !detached {
			detached = true
			l.Close()
			prog.Close()
		}
	}
	t.Cleanup(detach)
	return detach
}
