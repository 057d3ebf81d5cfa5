package e2e

import (
	"testing"

	"loupe/internal/testutil"
)

// TestWhatTheHookCannotSee pins down, to the frame, the three ways a TC hook
// and the interface's counters part, so that the README's account of them
// stays true:
//
//   - frames the stack drops before TC ingress (here: a VLAN header cut
//     short, which skb_vlan_untag frees): the interface counted them as
//     received, no hook saw them, and the kernel counts no drop;
//   - frames sent with PACKET_QDISC_BYPASS: they skip the qdisc layer and
//     with it the TC egress hook, but the interface sends and counts them;
//   - frames dropped after the egress hook (here: sent to a veth whose peer
//     is down): the hook counted them, the interface did not send them and
//     counts them in tx_dropped.
func TestWhatTheHookCannotSee(t *testing.T) {
	for _, mode := range hookModes {
		t.Run(mode.name, func(t *testing.T) { checkHookBlindSpots(t, mode.args) })
	}
}

func checkHookBlindSpots(t *testing.T, mode []string) {
	p, a := quietPair(t, mode)
	macA, macB := macOf(t, p.a, p.vethA), macOf(t, p.b, p.vethB)
	repeat := func(f []byte, n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = f
		}
		return out
	}
	const (
		cut, bypassed, normal, undelivered = 30, 20, 25, 15
		size                               = 100
	)
	// An 802.1Q ethertype followed by 2 bytes: the TCI but no inner type.
	short := append(append(append([]byte{}, macA...), macB...), 0x81, 0x00, 0x00, 0x2a)
	p.b.SendFrames(t, p.vethB, repeat(short, cut), testutil.SendOptions{})
	p.a.SendFrames(t, p.vethA, repeat(testutil.UDPFrame(macA, macB, nil, 5100, size), bypassed), testutil.SendOptions{Bypass: true})
	p.a.SendFrames(t, p.vethA, repeat(testutil.UDPFrame(macA, macB, nil, 5200, size), normal), testutil.SendOptions{})
	p.b.IP(t, "link", "set", p.vethB, "down")
	// The stack tells the sender (ENOBUFS), after the hook.
	if n := p.a.SendFrames(t, p.vethA, repeat(testutil.UDPFrame(macA, macB, nil, 5300, size), undelivered),
		testutil.SendOptions{AcceptDrops: true}); n != undelivered {
		t.Errorf("%d frames to the peer that was down refused, want %d", n, undelivered)
	}

	p.a.IP(t, "link", "set", p.vethA, "down")
	kernel := p.a.Stats(t, p.vethA)
	a.stop()

	recs := a.wireRecords(p.vethA)
	in, out := sumWire(recs, "ingress", nil), sumWire(recs, "egress", nil)
	port := func(n uint16) uint64 {
		return sumWire(recs, "egress", func(r *wireRecord) bool { return r.SrcPort == n }).packets
	}
	t.Logf("kernel: %+v", kernel)
	t.Logf("records: in %+v, out %+v", in, out)

	if in.packets != 0 || kernel.RxPackets != cut || kernel.RxBytes != cut*uint64(len(short)) || kernel.RxDropped != 0 {
		t.Errorf("cut VLAN headers: the hook saw %d frames; the interface received %d frames %d bytes and dropped %d; want 0, %d, %d, 0",
			in.packets, kernel.RxPackets, kernel.RxBytes, kernel.RxDropped, cut, cut*len(short))
	}
	if got := port(5100); got != 0 {
		t.Errorf("the egress hook saw %d frames sent with PACKET_QDISC_BYPASS, want 0", got)
	}
	if got, want := port(5200), uint64(normal); got != want {
		t.Errorf("the egress hook saw %d ordinary frames, want %d", got, want)
	}
	if got := port(5300); got != undelivered {
		t.Errorf("the egress hook saw %d frames to the peer that was down, want %d", got, undelivered)
	}
	if kernel.TxPackets != out.packets+bypassed-undelivered || kernel.TxBytes != out.bytes+(bypassed-undelivered)*size {
		t.Errorf("egress: the interface sent %d frames %d bytes; the records %d frames %d bytes, + %d bypassed - %d undelivered frames of %d bytes",
			kernel.TxPackets, kernel.TxBytes, out.packets, out.bytes, bypassed, undelivered, size)
	}
	if kernel.TxDropped != undelivered {
		t.Errorf("the interface counted %d frames dropped, want the %d sent to the peer that was down", kernel.TxDropped, undelivered)
	}
}
