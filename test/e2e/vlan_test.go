package e2e

import (
	"net"
	"testing"

	"loupe/internal/testutil"
)

// Source ports that tell the frames of each case apart in the records.
const (
	portTagged    = 4200 // 802.1Q, VID 42, in the frame
	portQinQ      = 4300 // 802.1ad VID 100 outside 802.1Q VID 42
	portTaggedOut = 4400 // 802.1Q, VID 7, in the frame, sent by A
	portMetaOut   = 4500 // untagged; a VLAN device (here a program) puts VID 99 in metadata at A's egress
	portMetaIn    = 4600 // untagged; VID 77 put in metadata at B's egress: it reaches A in metadata
	portTxVLANOff = 4700 // as portMetaOut with VID 98, but A inserts tags in software (txvlan off)
)

// TestVLANTagsMatchInterfaceCounters sends tagged frames from AF_PACKET
// sockets across a veth pair and compares the records of A with A's counters.
//
// A tag in the frame that the stack moves into the skb's metadata before TC
// ingress is added back: bytes equal the interface's. Egress: a tag still in
// the frame is counted as part of it; a tag left in metadata for the device
// to insert is not counted by a veth with transmit VLAN offload (the
// default), so not by the agent either. Two cases then differ by the
// tag, 4 bytes a frame, and the test asserts exactly that: a frame that
// reaches A's ingress with its tag already in metadata (its sender left it
// there: the interface counts it without, the hook cannot tell it from a
// stripped one and counts it with), and a tag in metadata at the egress of
// a device that inserts tags in software (txvlan off: counted by the
// interface, not at the hook, which runs before the insertion).
func TestVLANTagsMatchInterfaceCounters(t *testing.T) {
	for _, mode := range hookModes {
		t.Run(mode.name, func(t *testing.T) { checkVLAN(t, mode.args) })
	}
}

func checkVLAN(t *testing.T, mode []string) {
	p, a := quietPair(t, mode)
	macA, macB := macOf(t, p.a, p.vethA), macOf(t, p.b, p.vethB)
	q := func(vid uint16) testutil.VLANTag { return testutil.VLANTag{TPID: 0x8100, VID: vid} }
	ad := func(vid uint16) testutil.VLANTag { return testutil.VLANTag{TPID: 0x88a8, VID: vid} }
	frames := func(src, dst net.HardwareAddr, tags []testutil.VLANTag, port uint16, n int) [][]byte {
		var out [][]byte
		for i := range n {
			out = append(out, testutil.UDPFrame(src, dst, tags, port, 64+i*29))
		}
		return out
	}

	// B -> A, tags in the frame: A's stack strips the outer one.
	p.b.SendFrames(t, p.vethB, frames(macB, macA, []testutil.VLANTag{q(42)}, portTagged, 40), testutil.SendOptions{})
	p.b.SendFrames(t, p.vethB, frames(macB, macA, []testutil.VLANTag{ad(100), q(42)}, portQinQ, 20), testutil.SendOptions{})
	// Three tags: one in metadata and two in the frame at A's ingress are
	// one more than the parser walks, as three in the frame would be.
	p.b.SendFrames(t, p.vethB, frames(macB, macA, []testutil.VLANTag{ad(300), q(301), q(302)}, 4800, 10), testutil.SendOptions{})
	// A -> B, a tag in the frame.
	p.a.SendFrames(t, p.vethA, frames(macA, macB, []testutil.VLANTag{q(7)}, portTaggedOut, 30), testutil.SendOptions{})
	// A -> B, the tag in metadata at A's egress.
	detach := pushVLAN(t, p.a, p.vethA, 99)
	p.a.SendFrames(t, p.vethA, frames(macA, macB, nil, portMetaOut, 25), testutil.SendOptions{})
	detach()
	// B -> A, the tag in metadata from B's egress on.
	detach = pushVLAN(t, p.b, p.vethB, 77)
	p.b.SendFrames(t, p.vethB, frames(macB, macA, nil, portMetaIn, 15), testutil.SendOptions{})
	detach()
	// A -> B, the tag in metadata at the hook, inserted in software after it.
	p.a.SetOffload(t, p.vethA, testutil.TxVLAN, false)
	detach = pushVLAN(t, p.a, p.vethA, 98)
	p.a.SendFrames(t, p.vethA, frames(macA, macB, nil, portTxVLANOff, 12), testutil.SendOptions{})
	detach()

	m := a.metrics()
	p.down(t)
	kernel := p.a.Stats(t, p.vethA)
	a.stop()

	recs := a.wireRecords(p.vethA)
	in, out := sumWire(recs, "ingress", nil), sumWire(recs, "egress", nil)
	port := func(n uint16) func(*wireRecord) bool { return func(r *wireRecord) bool { return r.SrcPort == n } }
	metaIn := sumWire(recs, "ingress", port(portMetaIn))
	softOut := sumWire(recs, "egress", port(portTxVLANOff))
	t.Logf("kernel: rx %d packets %d bytes, tx %d packets %d bytes", kernel.RxPackets, kernel.RxBytes, kernel.TxPackets, kernel.TxBytes)
	t.Logf("records: in %+v, out %+v", in, out)

	if metaIn.packets != 15 || softOut.packets != 12 {
		t.Fatalf("tag-in-metadata frames: %d received, %d sent; want 15 and 12", metaIn.packets, softOut.packets)
	}
	if in.packets != kernel.RxPackets || in.bytes-4*metaIn.packets != kernel.RxBytes {
		t.Errorf("ingress: %d packets, %d bytes - 4 x %d frames tagged before they reached A = %d; the interface received %d packets %d bytes",
			in.packets, in.bytes, metaIn.packets, in.bytes-4*metaIn.packets, kernel.RxPackets, kernel.RxBytes)
	}
	if out.packets != kernel.TxPackets || out.bytes+4*softOut.packets != kernel.TxBytes {
		t.Errorf("egress: %d packets, %d bytes + 4 x %d tags inserted after the hook = %d; the interface sent %d packets %d bytes",
			out.packets, out.bytes, softOut.packets, out.bytes+4*softOut.packets, kernel.TxPackets, kernel.TxBytes)
	}
	if in.packets != 40+20+10+15 || out.packets != 30+25+12 {
		t.Errorf("%d frames in, %d out; the test sent 85 and 67", in.packets, out.packets)
	}
	if got := m[`loupe_datapath_events_total{event="vlan_depth"}`]; got != 10 {
		t.Errorf("vlan_depth counted %v, want the 10 frames with three tags", got)
	}
	// The parser stops before the IP header: no ports.
	if deep := sumWire(recs, "ingress", func(r *wireRecord) bool { return r.EtherType == 0x8100 && r.SrcPort == 0 }); deep.packets != 10 {
		t.Errorf("%d frames with three tags keyed as VLAN frames, want 10", deep.packets)
	}

	requireWireFields(t, recs)
	wantVID := map[string]map[uint16]uint16{
		"ingress": {portTagged: 42, portQinQ: 100, portMetaIn: 77, 0: 300},
		"egress":  {portTaggedOut: 7, portMetaOut: 99, portTxVLANOff: 98},
	}
	for _, r := range recs {
		want, ok := wantVID[r.Direction][r.SrcPort]
		if !ok {
			t.Errorf("unexpected record %+v", r)
			continue
		}
		if *r.VlanID != want {
			t.Errorf("%s frames from port %d: vlan_id %d, want %d", r.Direction, r.SrcPort, *r.VlanID, want)
		}
		if *r.Segments != r.Packets || *r.WireBytes != r.Bytes {
			t.Errorf("%s frames from port %d: %d segments %d wire bytes for %d packets %d bytes",
				r.Direction, r.SrcPort, *r.Segments, *r.WireBytes, r.Packets, r.Bytes)
		}
	}
}

func macOf(t *testing.T, ns *testutil.NS, ifname string) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err == nil {
			mac = ifi.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}
