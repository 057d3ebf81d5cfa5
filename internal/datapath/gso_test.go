package datapath

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// skbContext is struct __sk_buff (bpf/include/vmlinux.h) up to gso_size:
// BPF_PROG_TEST_RUN sets the packet's skb_shinfo gso_segs and gso_size from
// it and refuses non-zero values in the fields it does not take (which is
// also what would catch a wrong offset here).
type skbContext struct {
	_       [164]byte // len ... wire_len
	GSOSegs uint32    // offset 164
	_       [8]byte   // sk
	GSOSize uint32    // offset 176
}

func runProgGSO(t *testing.T, dp *Datapath, dir flow.Direction, frame []byte, segs, size uint32) {
	t.Helper()
	prog := dp.Ingress()
	if dir == flow.Egress {
		prog = dp.Egress()
	}
	ctx := skbContext{GSOSegs: segs, GSOSize: size}
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame, Context: ctx})
	if err != nil {
		t.Fatalf("run %s program: %v", dir, err)
	}
	if int32(ret) != -1 {
		t.Fatalf("%s returned %d, want -1 (TCX_NEXT)", dir, int32(ret))
	}
}

// TestGSOSegmentsAndWireBytes: a GSO buffer counts as one packet of its own
// length at the hook, and as gso_segs segments on the wire, each carrying the
// headers up to the transport payload as the parser found them.
func TestGSOSegmentsAndWireBytes(t *testing.T) {
	testutil.RequirePrivileged(t)
	// TCP with the timestamp option, as Linux sends it: a 32-byte header.
	tsOpt := []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
		{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}}
	tcpTS := &layers.TCP{SrcPort: 40000, DstPort: 5201, ACK: true, PSH: true, Window: 1000, Options: tsOpt}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, ACK: true, Window: 1000}
	udp := &layers.UDP{SrcPort: 4000, DstPort: 4433}
	// BPF_PROG_TEST_RUN takes frames up to a page less its headroom: the
	// super-packets here stay under 3 500 bytes.
	data := func(n int) gopacket.Payload { return make(gopacket.Payload, n) }

	cases := []struct {
		name       string
		frame      []byte
		segs, size uint32
		headers    uint64 // what every further segment repeats
		wantSegs   uint64
	}{
		{
			name:  "ipv4 tcp with options",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP), tcpTS, data(2*1448+700)),
			segs:  3, size: 1448, headers: 14 + 20 + 32, wantSegs: 3,
		},
		{
			name:  "ipv6 tcp",
			frame: frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolTCP), tcp, data(4*800)),
			segs:  4, size: 800, headers: 14 + 40 + 20, wantSegs: 4,
		},
		{
			name: "ipv6 hop-by-hop then tcp",
			frame: frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolIPv6HopByHop),
				ext(layers.IPProtocolTCP, 8, false), tcp, data(2*1200)),
			segs: 2, size: 1200, headers: 14 + 40 + 8 + 20, wantSegs: 2,
		},
		{
			name: "qinq udp (UDP GSO)",
			frame: frame(t, eth(layers.EthernetTypeQinQ), &layers.Dot1Q{VLANIdentifier: 100, Type: layers.EthernetTypeDot1Q},
				&layers.Dot1Q{VLANIdentifier: 42, Type: layers.EthernetTypeIPv4}, ip4(layers.IPProtocolUDP), udp, data(5*600)),
			segs: 5, size: 600, headers: 14 + 8 + 20 + 8, wantSegs: 5,
		},
		{
			// SKB_GSO_DODGY (a tap device's vnet header): gso_segs is
			// not filled in yet, gso_size is; 2 500 bytes of payload
			// make three 1 000-byte segments.
			name:  "gso_segs not yet set",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP), tcp, data(2500)),
			segs:  0, size: 1000, headers: 14 + 20 + 20, wantSegs: 3,
		},
		{
			name:  "one segment",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP), tcp, data(500)),
			segs:  1, size: 1448, headers: 14 + 20 + 20, wantSegs: 1,
		},
		{
			// A transport the parser does not know: its headers end
			// at the IP header as far as it can tell.
			name:  "unknown transport",
			frame: frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolGRE), data(3*500)),
			segs:  3, size: 500, headers: 14 + 20, wantSegs: 3,
		},
	}

	for _, tables := range []TableKind{PerCPU, Shared} {
		dp := loadForTest(t, Options{FlowBudget: 64, Tables: tables, RingBufSize: 1 << 16})
		for _, tc := range cases {
			t.Run(tables.String()+"/"+tc.name, func(t *testing.T) {
				before := counterMap(t, dp)
				// Twice per direction: the second packet adds to the
				// flow the first created.
				for _, dir := range []flow.Direction{flow.Ingress, flow.Egress} {
					runProgGSO(t, dp, dir, tc.frame, tc.segs, tc.size)
					runProgGSO(t, dp, dir, tc.frame, tc.segs, tc.size)
				}
				recs := drainAll(t, dp)
				if len(recs) != 2 {
					t.Fatalf("got %d flows, want one per direction: %+v", len(recs), recs)
				}
				n := uint64(len(tc.frame))
				wantWire := n + (tc.wantSegs-1)*tc.headers
				for _, r := range recs {
					s := r.stats
					if s.Packets != 2 || s.Bytes != 2*n {
						t.Errorf("%s: %d packets %d bytes, want 2 buffers of %d", r.key.Direction, s.Packets, s.Bytes, n)
					}
					if s.Segments != 2*tc.wantSegs || s.WireBytes != 2*wantWire {
						t.Errorf("%s: %d segments %d wire bytes, want 2 x %d segments of %d bytes (%d + %d x %d header bytes)",
							r.key.Direction, s.Segments, s.WireBytes, tc.wantSegs, wantWire, n, tc.wantSegs-1, tc.headers)
					}
				}
				after := counterMap(t, dp)
				for name, v := range after {
					if v != before[name] {
						t.Errorf("counter %s moved by %d", name, v-before[name])
					}
				}
			})
		}
	}
}

// TestDivertedGSOPacketKeepsItsSegments: a super-packet the full table
// refuses reaches userspace through the ring buffer with its segments and
// wire bytes, not as one wire packet.
func TestDivertedGSOPacketKeepsItsSegments(t *testing.T) {
	testutil.RequirePrivileged(t)
	onOneCPU(t) // a per-CPU table's budget is each CPU's
	for _, tables := range []TableKind{PerCPU, Shared} {
		t.Run(tables.String(), func(t *testing.T) {
			dp := loadForTest(t, Options{FlowBudget: 1, Tables: tables, RingBufSize: 1 << 16})
			ev, err := dp.OpenEvents(0)
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Close()
			tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, ACK: true, Window: 1000}
			first := frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP), tcp, make(gopacket.Payload, 100))
			tcp2 := *tcp
			tcp2.SrcPort = 40001
			super := frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP), &tcp2, make(gopacket.Payload, 4*700))
			runProgGSO(t, dp, flow.Ingress, first, 0, 0)
			runProgGSO(t, dp, flow.Ingress, super, 4, 700) // the table is full
			drainAll(t, dp)
			events := readEvents(t, ev)
			if len(events) != 1 {
				t.Fatalf("%d events, want the one super-packet", len(events))
			}
			s := events[0].Stats
			n := uint64(len(super))
			if s.Packets != 1 || s.Bytes != n || s.Segments != 4 || s.WireBytes != n+3*(14+20+20) {
				t.Fatalf("event counted %d packets %d bytes %d segments %d wire bytes; want 1, %d, 4, %d",
					s.Packets, s.Bytes, s.Segments, s.WireBytes, n, n+3*(14+20+20))
			}
		})
	}
}
