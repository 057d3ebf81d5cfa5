package flows

import (
	"net/netip"
	"testing"

	"loupe/internal/datapath"
	"loupe/internal/flow"
)

// TestSignalExtras: a socket's entry carries RTT and retransmissions
// (retransmissions present only while their signal is on, 0 included), a
// drop's its packets and bytes summed over the reasons and its packets by
// reason; an entry of drops alone is no socket.
func TestSignalExtras(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1").As16()
	b := netip.MustParseAddr("10.0.0.2").As16()
	sock := datapath.SignalKey{SrcAddr: a, DstAddr: b, SrcPort: 40000, DstPort: 80, Proto: 6}
	quiet := datapath.SignalKey{SrcAddr: a, DstAddr: b, SrcPort: 40001, DstPort: 80, Proto: 6}
	dropped := datapath.SignalKey{SrcAddr: b, DstAddr: a, SrcPort: 9, DstPort: 9301, Proto: 17}
	m := map[datapath.SignalKey]datapath.SignalValues{
		sock:    {RTT: &datapath.RTT{MinNs: 1000, MaxNs: 3000, LastNs: 2000, Samples: 9}, Retransmits: 5},
		quiet:   {RTT: &datapath.RTT{MinNs: 10, MaxNs: 10, LastNs: 10, Samples: 1}},
		dropped: {Drops: map[string]datapath.DropCount{"NETFILTER_DROP": {Packets: 3, Bytes: 84}, "NO_SOCKET": {Packets: 1, Bytes: 28}}},
	}
	ft := func(k datapath.SignalKey) flow.FiveTuple {
		return flow.FiveTuple{SrcAddr: k.SrcAddr, DstAddr: k.DstAddr, SrcPort: k.SrcPort, DstPort: k.DstPort, Proto: k.Proto}
	}
	sockets, drops := signalExtras(m, true)
	if len(sockets) != 2 || len(drops) != 1 {
		t.Fatalf("%d sockets, %d drops; want 2 and 1", len(sockets), len(drops))
	}
	if s := sockets[ft(sock)]; s != (flow.SocketSignals{HasRTT: true, RTTMinNs: 1000, RTTMaxNs: 3000, RTTLastNs: 2000, HasRetransmits: true, Retransmits: 5}) {
		t.Errorf("socket %+v", s)
	}
	if s := sockets[ft(quiet)]; !s.HasRetransmits || s.Retransmits != 0 || !s.HasRTT {
		t.Errorf("a socket that retransmitted nothing: %+v, want retransmits present at 0", s)
	}
	if d := drops[ft(dropped)]; d.Packets != 4 || d.Bytes != 112 || d.Reasons["NETFILTER_DROP"] != 3 || d.Reasons["NO_SOCKET"] != 1 || len(d.Reasons) != 2 {
		t.Errorf("drops %+v", d)
	}
	sockets, _ = signalExtras(m, false)
	if s := sockets[ft(quiet)]; s.HasRetransmits {
		t.Errorf("retransmits off, yet present: %+v", s)
	}
}
