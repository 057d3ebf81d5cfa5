package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"loupe/internal/export/kafka/flowpb"
	"loupe/internal/flow"
	"loupe/internal/tunnel"
)

// flowKey returns the key of test flow f: IPv4 TCP for even f, IPv6 UDP for
// odd f, an ARP (non-IP) flow for every f divisible by 7, with fields that
// differ between flows in every position.
func flowKey(f int) flow.Key {
	k := flow.Key{
		IfIndex:   uint32(2 + f%3),
		Direction: flow.Direction(f / 2 % 2), // both directions for IPv4 and IPv6
		SrcPort:   uint16(10000 + f),
		DstPort:   uint16(443 + f%5),
	}
	if f%5 == 1 {
		k.VlanID = uint16(100 + f)
	}
	binary.BigEndian.PutUint16(k.SrcMAC[4:], uint16(f))
	k.SrcMAC[0] = 0x02
	k.DstMAC = [6]byte{0x02, 0xaa, 0xbb, 0xcc, byte(f >> 8), byte(f)}
	switch {
	case f%7 == 0:
		k.EtherType, k.SrcPort, k.DstPort = 0x0806, 0, 0
	case f%2 == 0:
		k.EtherType, k.Proto = flow.EtherTypeIPv4, 6
		k.SrcAddr = netip.AddrFrom4([4]byte{10, 1, byte(f >> 8), byte(f)}).As16()
		k.DstAddr = netip.AddrFrom4([4]byte{192, 0, 2, byte(f)}).As16()
	default:
		k.EtherType, k.Proto = flow.EtherTypeIPv6, 17
		k.SrcAddr = netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", f)).As16()
		k.DstAddr = netip.MustParseAddr(fmt.Sprintf("fd00:1:2:3::%x", f+1)).As16()
	}
	return k
}

// testRecords returns flows×perFlow records, the records of one flow
// spread over the batch (record j of every flow, then record j+1). Every
// record has a unique Packets value (its index + 1), so a consumer can
// tell each one apart.
func testRecords(flows, perFlow int) []flow.Record {
	base := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	out := make([]flow.Record, 0, flows*perFlow)
	for j := range perFlow {
		for f := range flows {
			i := len(out)
			first := base.Add(time.Duration(j)*5*time.Second + time.Duration(f)*time.Microsecond)
			r := flow.Record{
				Key:       flowKey(f),
				Iface:     fmt.Sprintf("veth%d", f%3),
				Packets:   uint64(i + 1),
				Bytes:     uint64(i+1)*1500 + uint64(f),
				Segments:  uint64(i+1) * uint64(1+f%4),
				WireBytes: uint64(i+1)*1500 + uint64(f) + uint64(i+1)*uint64(f%4)*66,
				FirstSeen: first,
				LastSeen:  first.Add(time.Duration(i%5000) * time.Millisecond),
				Sampling:  uint32(1 + f%2),
			}
			if r.Proto == 6 {
				r.TCPFlags = uint16(flow.TCPSyn | flow.TCPAck | (f%2)<<8)
				r.DSCP = uint8(f % 64)
			}
			switch f % 7 {
			case 3: // decoded from the sketch's flow set
				r.Accuracy = flow.Decoded
			case 5: // estimated by a count-min sketch of 4 rows
				r.Accuracy, r.MaxErrorPackets, r.MaxErrorBytes = flow.Estimated, uint64(i%9)+1, uint64(i%9)*1500+7
				r.ErrorConfidence = -math.Expm1(-4)
			}
			// Kernel signals, DNS and tunnels on some: their fields go
			// through the broker too, measured zeros included.
			switch f % 11 {
			case 2:
				r.SetRTT(uint64(i)*1000, uint64(i)*3000, uint64(i)*2000)
				r.SetRetransmits(uint64(i % 3))
			case 4:
				r.SetDrops(uint64(i%4), uint64(i%4)*52, flow.DropReasons{"NETFILTER_DROP": uint64(i % 4)})
			case 6:
				r.SetDNS(&flow.DNSExchange{ID: uint16(i), QName: "q" + fmt.Sprint(i) + ".test", HasRcode: i%2 == 0, Rcode: 3, HasLatency: i%2 == 0, LatencyNs: uint64(i) * 1000})
			case 8:
				r.SetTunnel(&tunnel.Info{Type: tunnel.VXLAN, ID: uint32(f), HasID: true, SrcAddr: netip.MustParseAddr("10.88.0.1"),
					DstAddr: netip.MustParseAddr("10.88.0.2"), SrcPort: uint16(40000 + f), DstPort: 4789})
			}
			out = append(out, r)
		}
	}
	return out
}

// fromProto converts a decoded message back into a record, checking the
// lengths the schema promises.
func fromProto(m *flowpb.FlowRecord) (flow.Record, error) {
	var r flow.Record
	r.Iface = m.GetIface()
	r.IfIndex = m.GetIfindex()
	switch m.GetDirection() {
	case flowpb.Direction_DIRECTION_INGRESS:
		r.Direction = flow.Ingress
	case flowpb.Direction_DIRECTION_EGRESS:
		r.Direction = flow.Egress
	default:
		return r, fmt.Errorf("direction %v", m.GetDirection())
	}
	r.EtherType = uint16(m.GetEthType())
	if len(m.GetSrcMac()) != 6 || len(m.GetDstMac()) != 6 {
		return r, fmt.Errorf("mac lengths %d %d", len(m.GetSrcMac()), len(m.GetDstMac()))
	}
	copy(r.SrcMAC[:], m.GetSrcMac())
	copy(r.DstMAC[:], m.GetDstMac())
	r.Proto = uint8(m.GetProto())
	for _, a := range []struct {
		b   []byte
		dst *[16]byte
	}{{m.GetSrcAddr(), &r.SrcAddr}, {m.GetDstAddr(), &r.DstAddr}} {
		switch len(a.b) {
		case 0:
		case 4:
			*a.dst = netip.AddrFrom4([4]byte(a.b)).As16()
		case 16:
			*a.dst = [16]byte(a.b)
		default:
			return r, fmt.Errorf("address of %d bytes", len(a.b))
		}
	}
	r.SrcPort, r.DstPort = uint16(m.GetSrcPort()), uint16(m.GetDstPort())
	r.Packets, r.Bytes = m.GetPackets(), m.GetBytes()
	r.FirstSeen = time.Unix(0, int64(m.GetFirstSeenUnixNano())).UTC()
	r.LastSeen = time.Unix(0, int64(m.GetLastSeenUnixNano())).UTC()
	r.TCPFlags, r.DSCP, r.Sampling = uint16(m.GetTcpFlags()), uint8(m.GetDscp()), m.GetSampling()
	r.Segments, r.WireBytes = m.GetSegments(), m.GetWireBytes()
	if m.GetVlanId() > 0xfff {
		return r, fmt.Errorf("vlan_id %d", m.GetVlanId())
	}
	r.VlanID = uint16(m.GetVlanId())
	if m.GetAggregatePrefix() > 128 {
		return r, fmt.Errorf("aggregate_prefix %d", m.GetAggregatePrefix())
	}
	r.AggPrefix = uint8(m.GetAggregatePrefix())
	switch m.GetAccuracy() {
	case flowpb.Accuracy_ACCURACY_EXACT:
		r.Accuracy = flow.Exact
	case flowpb.Accuracy_ACCURACY_DECODED:
		r.Accuracy = flow.Decoded
	case flowpb.Accuracy_ACCURACY_ESTIMATED:
		r.Accuracy = flow.Estimated
	default:
		return r, fmt.Errorf("accuracy %v", m.GetAccuracy())
	}
	r.MaxErrorPackets, r.MaxErrorBytes, r.ErrorConfidence = m.GetMaxErrorPackets(), m.GetMaxErrorBytes(), m.GetErrorConfidence()
	// The fields present only where measured: a field set, 0 included, is
	// present.
	opt := func(set bool, bit flow.Presence, dst *uint64, v uint64) {
		if set {
			*dst, r.Has = v, r.Has|bit
		}
	}
	opt(m.DropPackets != nil, flow.HasDropPackets, &r.DropPackets, m.GetDropPackets())
	opt(m.DropBytes != nil, flow.HasDropBytes, &r.DropBytes, m.GetDropBytes())
	if len(m.GetDropReasons()) > 0 {
		r.DropReasons, r.Has = flow.DropReasons(m.GetDropReasons()), r.Has|flow.HasDropReasons
	}
	opt(m.Retransmits != nil, flow.HasRetransmits, &r.Retransmits, m.GetRetransmits())
	opt(m.RttMinNs != nil, flow.HasRTTMin, &r.RTTMinNs, m.GetRttMinNs())
	opt(m.RttMaxNs != nil, flow.HasRTTMax, &r.RTTMaxNs, m.GetRttMaxNs())
	opt(m.RttLastNs != nil, flow.HasRTTLast, &r.RTTLastNs, m.GetRttLastNs())
	opt(m.HandshakeRttNs != nil, flow.HasHandshakeRTT, &r.HandshakeRTTNs, m.GetHandshakeRttNs())
	opt(m.DnsLatencyNs != nil, flow.HasDNSLatency, &r.DNSLatencyNs, m.GetDnsLatencyNs())
	if m.DnsId != nil {
		if m.GetDnsId() > 0xffff {
			return r, fmt.Errorf("dns_id %d", m.GetDnsId())
		}
		r.DNSID, r.Has = uint16(m.GetDnsId()), r.Has|flow.HasDNSID
	}
	if m.DnsQname != nil {
		r.DNSQName, r.Has = m.GetDnsQname(), r.Has|flow.HasDNSQName
	}
	if m.DnsRcode != nil {
		if m.GetDnsRcode() > flow.MaxRcode {
			return r, fmt.Errorf("dns_rcode %d", m.GetDnsRcode())
		}
		r.DNSRcode, r.Has = uint16(m.GetDnsRcode()), r.Has|flow.HasDNSRcode
	}
	if t := m.GetTunnelType(); t != flowpb.TunnelType_TUNNEL_TYPE_UNSPECIFIED {
		if t > flowpb.TunnelType_TUNNEL_TYPE_IPIP {
			return r, fmt.Errorf("tunnel_type %v", t)
		}
		r.TunnelType, r.Has = tunnel.Type(t), r.Has|flow.HasTunnelType
	}
	if m.TunnelId != nil {
		r.TunnelID, r.Has = m.GetTunnelId(), r.Has|flow.HasTunnelID
	}
	for _, a := range []struct {
		b   []byte
		dst *netip.Addr
		bit flow.Presence
	}{{m.GetOuterSrcAddr(), &r.OuterSrcAddr, flow.HasOuterSrcAddr}, {m.GetOuterDstAddr(), &r.OuterDstAddr, flow.HasOuterDstAddr}} {
		if len(a.b) == 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.b)
		if !ok {
			return r, fmt.Errorf("outer address of %d bytes", len(a.b))
		}
		*a.dst, r.Has = ip, r.Has|a.bit
	}
	for _, p := range []struct {
		v   *uint32
		dst *uint16
		bit flow.Presence
	}{{m.OuterSrcPort, &r.OuterSrcPort, flow.HasOuterSrcPort}, {m.OuterDstPort, &r.OuterDstPort, flow.HasOuterDstPort}} {
		if p.v == nil {
			continue
		}
		if *p.v > 0xffff {
			return r, fmt.Errorf("outer port %d", *p.v)
		}
		*p.dst, r.Has = uint16(*p.v), r.Has|p.bit
	}
	return r, nil
}

// toProto builds the generated message field by field, independently of
// AppendProto, to check AppendProto against proto.Marshal.
func toProto(r *flow.Record) *flowpb.FlowRecord {
	m := &flowpb.FlowRecord{
		Iface:     r.Iface,
		Ifindex:   r.IfIndex,
		Direction: flowpb.Direction_DIRECTION_INGRESS,
		EthType:   uint32(r.EtherType),
		SrcMac:    r.SrcMAC[:],
		DstMac:    r.DstMAC[:],
		Proto:     uint32(r.Proto),
		SrcPort:   uint32(r.SrcPort),
		DstPort:   uint32(r.DstPort),
		Packets:   r.Packets,
		Bytes:     r.Bytes,
		TcpFlags:  uint32(r.TCPFlags),
		Dscp:      uint32(r.DSCP),
		Sampling:  r.Sampling,
		Segments:  r.Segments,
		WireBytes: r.WireBytes,
		VlanId:    uint32(r.VlanID),

		AggregatePrefix: uint32(r.AggPrefix),
		Accuracy:        flowpb.Accuracy(r.Accuracy),
		MaxErrorPackets: r.MaxErrorPackets,
		MaxErrorBytes:   r.MaxErrorBytes,
		ErrorConfidence: r.ErrorConfidence,
	}
	if !r.FirstSeen.IsZero() {
		m.FirstSeenUnixNano = uint64(r.FirstSeen.UnixNano())
	}
	if !r.LastSeen.IsZero() {
		m.LastSeenUnixNano = uint64(r.LastSeen.UnixNano())
	}
	if r.Direction == flow.Egress {
		m.Direction = flowpb.Direction_DIRECTION_EGRESS
	}
	if a := r.SrcIP(); a.IsValid() {
		m.SrcAddr = a.AsSlice()
	}
	if a := r.DstIP(); a.IsValid() {
		m.DstAddr = a.AsSlice()
	}
	opt := func(bit flow.Presence, v uint64) *uint64 {
		if r.Has&bit == 0 {
			return nil
		}
		return &v
	}
	opt32 := func(bit flow.Presence, v uint32) *uint32 {
		if r.Has&bit == 0 {
			return nil
		}
		return &v
	}
	m.DropPackets, m.DropBytes, m.Retransmits = opt(flow.HasDropPackets, r.DropPackets), opt(flow.HasDropBytes, r.DropBytes), opt(flow.HasRetransmits, r.Retransmits)
	if len(r.DropReasons) > 0 {
		m.DropReasons = r.DropReasons
	}
	m.RttMinNs, m.RttMaxNs, m.RttLastNs = opt(flow.HasRTTMin, r.RTTMinNs), opt(flow.HasRTTMax, r.RTTMaxNs), opt(flow.HasRTTLast, r.RTTLastNs)
	m.HandshakeRttNs, m.DnsLatencyNs = opt(flow.HasHandshakeRTT, r.HandshakeRTTNs), opt(flow.HasDNSLatency, r.DNSLatencyNs)
	m.DnsId, m.DnsRcode = opt32(flow.HasDNSID, uint32(r.DNSID)), opt32(flow.HasDNSRcode, uint32(r.DNSRcode))
	if r.Has&flow.HasDNSQName != 0 {
		m.DnsQname = &r.DNSQName
	}
	if r.Has&flow.HasTunnelType != 0 {
		m.TunnelType = flowpb.TunnelType(r.TunnelType)
	}
	m.TunnelId = opt32(flow.HasTunnelID, r.TunnelID)
	if r.Has&flow.HasOuterSrcAddr != 0 && r.OuterSrcAddr.IsValid() {
		m.OuterSrcAddr = r.OuterSrcAddr.AsSlice()
	}
	if r.Has&flow.HasOuterDstAddr != 0 && r.OuterDstAddr.IsValid() {
		m.OuterDstAddr = r.OuterDstAddr.AsSlice()
	}
	m.OuterSrcPort, m.OuterDstPort = opt32(flow.HasOuterSrcPort, uint32(r.OuterSrcPort)), opt32(flow.HasOuterDstPort, uint32(r.OuterDstPort))
	return m
}

// consume reads exactly want records from topic (from the start), failing
// if they do not all arrive within a minute, then reads for one more
// second to catch records beyond want.
func consume(t *testing.T, opts []kgo.Opt, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	poll := func(d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		for ctx.Err() == nil && len(got) < want {
			fs := cl.PollFetches(ctx)
			for _, e := range fs.Errors() {
				if ctx.Err() == nil {
					t.Fatalf("consume %s partition %d: %v", e.Topic, e.Partition, e.Err)
				}
			}
			got = append(got, fs.Records()...)
		}
	}
	poll(time.Minute)
	if len(got) < want {
		t.Fatalf("consumed %d records of %d within a minute", len(got), want)
	}
	want = len(got) + 1 // anything more is an extra record
	poll(time.Second)
	return got
}

// topicRecords returns how many records topic holds: the sum of its
// partitions' end offsets (the topic is new, written without transactions).
func topicRecords(t *testing.T, opts []kgo.Opt, topic string) int {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	n := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", topic, o.Partition, o.Err)
		}
		n += int(o.Offset)
	})
	return n
}

// testLogger writes the client's log lines into the test's log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
