package kafka

import (
	"bytes"
	"encoding/hex"
	"math"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"loupe/internal/export/kafka/flowpb"
	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
	"loupe/internal/tunnel"
)

// edgeRecords are records whose fields sit at their limits.
func edgeRecords() []flow.Record {
	maxed := flow.Record{
		Key: flow.Key{
			SrcAddr: [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			DstAddr: netip.IPv6Unspecified().As16(), SrcMAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			IfIndex: math.MaxUint32, EtherType: flow.EtherTypeIPv6, SrcPort: math.MaxUint16, DstPort: math.MaxUint16,
			Proto: math.MaxUint8, Direction: flow.Egress, VlanID: 4095,
		},
		Iface:   "a-fifteen-chars",
		Packets: math.MaxUint64, Bytes: math.MaxUint64, Segments: math.MaxUint64, WireBytes: math.MaxUint64,
		FirstSeen: time.Unix(0, 1).UTC(), LastSeen: time.Date(2262, 4, 11, 23, 47, 16, 854775807, time.UTC),
		Sampling: math.MaxUint32, TCPFlags: 0x1ff, DSCP: 63,
	}
	// An IPv4 header cut short before the addresses: no address fields.
	cut := flow.Record{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: 6, SrcAddr: [16]byte{1, 2, 3}}, Packets: 1}
	// An estimate whose bounds are as large as they get, held for sure.
	est := maxed
	est.Accuracy, est.MaxErrorPackets, est.MaxErrorBytes, est.ErrorConfidence = flow.Estimated, math.MaxUint64, math.MaxUint64, 1
	// An aggregate, decoded from the sketch.
	agg := flow.Record{Key: flow.Key{EtherType: flow.EtherTypeIPv6, Proto: 17, SrcAddr: netip.MustParseAddr("2001:db8::").As16(), AggPrefix: 128},
		Packets: 2, Accuracy: flow.Decoded}
	// The kernel signals, DNS and tunnels: every base that has them, and
	// fields measured as zero.
	out := []flow.Record{{}, maxed, cut, est, agg}
	for _, b := range flowtest.Bases() {
		if b.Rec.Has != 0 {
			out = append(out, b.Rec)
		}
	}
	zeros := maxed
	zeros.SetRTT(0, 0, 0)
	zeros.SetRetransmits(0)
	zeros.SetDrops(0, 0, flow.DropReasons{"NO_SOCKET": 0, "A": math.MaxUint64})
	zeros.SetDNS(&flow.DNSExchange{HasRcode: true, HasLatency: true})
	zeros.SetHandshakeRTT(0)
	zeros.Has |= flow.HasDNSQName
	zeros.SetTunnel(&tunnel.Info{Type: tunnel.VXLAN, HasID: true, SrcAddr: netip.MustParseAddr("::ffff:10.0.0.1"), DstAddr: netip.IPv6Unspecified()})
	return append(out, zeros)
}

// TestProtoEncodingMatchesGenerated proves the hand-written encoder writes
// exactly what proto.Marshal writes for the generated type, and that the
// generated type decodes it back into the same record.
func TestProtoEncodingMatchesGenerated(t *testing.T) {
	recs := append(testRecords(50, 3), edgeRecords()...)
	var buf []byte
	for i := range recs {
		r := &recs[i]
		buf = AppendProto(buf[:0], r)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(toProto(r))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("record %d: AppendProto\n%x\nproto.Marshal\n%x", i, buf, want)
		}
		var m flowpb.FlowRecord
		if err := proto.Unmarshal(buf, &m); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		got, err := fromProto(&m)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		exp := *r
		if exp.EtherType == flow.EtherTypeIPv4 && !r.Key.SrcIP().IsValid() {
			exp.SrcAddr, exp.DstAddr = [16]byte{}, [16]byte{} // not exported, as in JSON
		}
		if exp.FirstSeen.IsZero() {
			exp.FirstSeen, exp.LastSeen = time.Unix(0, 0).UTC(), time.Unix(0, 0).UTC()
		}
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("record %d decoded\n%+v\nwant\n%+v", i, got, exp)
		}
	}
	// One IPv4 record byte for byte, so that a change of the schema's
	// field numbers or types cannot pass unnoticed.
	r := testRecords(1, 1)[0]
	r.Key = flowKey(2)
	r.Iface, r.TCPFlags, r.DSCP = "eth0", flow.TCPSyn|flow.TCPAck, 46
	r.Segments, r.WireBytes, r.VlanID = 2, 1566, 100
	got := hex.EncodeToString(AppendProto(nil, &r))
	const golden = "0a0465746830" + // 1 iface "eth0"
		"1004" + "1802" + "208010" + // 2 ifindex 4, 3 direction egress, 4 eth_type 2048
		"2a06020000000002" + "320602aabbcc0002" + // 5, 6 macs
		"3806" + "42040a010002" + "4a04c0000202" + // 7 proto 6, 8, 9 addresses
		"50924e" + "58bd03" + "6001" + "68dc0b" + // 10 port 10002, 11 port 445, 12 packets 1, 13 bytes 1500
		"71150d88c41707ea18" + "79150d88c41707ea18" + // 14, 15 times (fixed64 little-endian)
		"800112" + "88012e" + "900101" + // 16 tcp_flags 0x12, 17 dscp 46, 18 sampling 1
		"900302" + "98039e0c" + "a00364" // 50 segments 2, 51 wire_bytes 1566, 52 vlan_id 100
	if got != golden {
		t.Errorf("IPv4 record encodes as\n%s\nwant\n%s", got, golden)
	}
}

func TestKeyLayout(t *testing.T) {
	k4 := flowKey(2)
	got := hex.EncodeToString(AppendKey(nil, &k4))
	// ifindex 4 | dir 1 | eth 0800 | proto 6 | sport 10002 | dport 445 |
	// src mac | dst mac | 10.1.0.2 | 192.0.2.2
	const want4 = "00000004" + "01" + "0800" + "06" + "2712" + "01bd" +
		"020000000002" + "02aabbcc0002" + "0a010002" + "c0000202"
	if got != want4 {
		t.Errorf("IPv4 key\n%s\nwant\n%s", got, want4)
	}
	// Flow 1: IPv6, tagged; 2: IPv4 untagged; 3: IPv6 untagged; 7: ARP;
	// 6: IPv4 tagged.
	for f, wantLen := range map[int]int{1: keyLenMax - 1, 2: keyLenIPv4, 3: keyLenMax - 3, 6: keyLenIPv4 + 2, 7: keyLenMax - 3} {
		k := flowKey(f)
		if n := len(AppendKey(nil, &k)); n != wantLen {
			t.Errorf("flow %d (ethertype %#x): key of %d bytes, want %d", f, k.EtherType, n, wantLen)
		}
	}
	// An aggregate ends with the VLAN ID, tagged or not, and its prefix.
	agg := flowKey(2)
	agg.AggPrefix = 24
	if got := hex.EncodeToString(AppendKey(nil, &agg)); got != want4+"0000"+"18" {
		t.Errorf("IPv4 aggregate key\n%s\nwant\n%s", got, want4+"000018")
	}
	agg = flowKey(1)
	agg.AggPrefix = 64
	if n := len(AppendKey(nil, &agg)); n != keyLenMax {
		t.Errorf("IPv6 aggregate: key of %d bytes, want %d", n, keyLenMax)
	}
	// Distinct flows, distinct keys; and each field changes the key.
	seen := map[string]int{}
	for f := range 2000 {
		k := flowKey(f)
		s := string(AppendKey(nil, &k))
		if g, dup := seen[s]; dup {
			t.Fatalf("flows %d and %d share a key", g, f)
		}
		seen[s] = f
	}
	base := flowKey(2)
	for name, mut := range map[string]func(*flow.Key){
		"ifindex": func(k *flow.Key) { k.IfIndex++ }, "direction": func(k *flow.Key) { k.Direction ^= 1 },
		"ethertype": func(k *flow.Key) { k.EtherType++ }, "proto": func(k *flow.Key) { k.Proto++ },
		"sport": func(k *flow.Key) { k.SrcPort++ }, "dport": func(k *flow.Key) { k.DstPort++ },
		"smac": func(k *flow.Key) { k.SrcMAC[5]++ }, "dmac": func(k *flow.Key) { k.DstMAC[0]++ },
		"saddr": func(k *flow.Key) { k.SrcAddr[15]++ }, "daddr": func(k *flow.Key) { k.DstAddr[15]++ },
		"vlan": func(k *flow.Key) { k.VlanID = 7 },
	} {
		k := base
		mut(&k)
		if bytes.Equal(AppendKey(nil, &k), AppendKey(nil, &base)) {
			t.Errorf("changing %s does not change the key", name)
		}
	}
}

func TestEncodeAllocatesNothing(t *testing.T) {
	recs := testRecords(16, 1)
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		b := buf[:0]
		for i := range recs {
			b = AppendKey(b, &recs[i].Key)
			b = AppendProto(b, &recs[i])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch of 16, want 0", allocs)
	}
}

func BenchmarkAppendProto(b *testing.B) {
	recs := testRecords(64, 16)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = AppendProto(buf[:0], &recs[i%len(recs)])
	}
}

// BenchmarkProtoMarshal is the alternative AppendProto was chosen over:
// the generated type, one message reused, MarshalAppend into a reused
// buffer.
func BenchmarkProtoMarshal(b *testing.B) {
	recs := testRecords(64, 16)
	buf := make([]byte, 0, 256)
	var m flowpb.FlowRecord
	var src, dst [16]byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := &recs[i%len(recs)]
		m.Iface, m.Ifindex, m.EthType, m.Proto = r.Iface, r.IfIndex, uint32(r.EtherType), uint32(r.Proto)
		m.Direction = flowpb.Direction(r.Direction + 1)
		m.SrcMac, m.DstMac = r.SrcMAC[:], r.DstMAC[:]
		src, dst = r.SrcAddr, r.DstAddr
		m.SrcAddr, m.DstAddr = src[:], dst[:]
		m.SrcPort, m.DstPort, m.Packets, m.Bytes = uint32(r.SrcPort), uint32(r.DstPort), r.Packets, r.Bytes
		m.FirstSeenUnixNano, m.LastSeenUnixNano = uint64(r.FirstSeen.UnixNano()), uint64(r.LastSeen.UnixNano())
		m.TcpFlags, m.Dscp, m.Sampling = uint32(r.TCPFlags), uint32(r.DSCP), r.Sampling
		m.Segments, m.WireBytes, m.VlanId = r.Segments, r.WireBytes, uint32(r.VlanID)
		var err error
		if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	recs := testRecords(64, 16)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = flow.AppendJSON(buf[:0], &recs[i%len(recs)])
	}
}
