package flow

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"loupe/internal/tunnel"
)

// evictWith runs one eviction of the flows put in table, joining x onto
// its records, and returns them.
func evictWith(t *testing.T, table *fakeTable, x Extras) []Record {
	t.Helper()
	clock := newFakeClock()
	out := &collector{}
	calls := 0
	ev := NewEvictor(EvictorConfig{Table: table, Out: out, Interval: time.Hour, Clock: clock, BatchSize: 2,
		IfaceName: func(i uint32) string { return "if" + string(rune('0'+i)) },
		Extras: func(d Drain, running bool) Extras {
			calls++
			if !running {
				t.Errorf("extras of a table of the running set asked for as a leftover's")
			}
			return x
		}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one eviction: the final one
	if err := ev.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("extras asked for %d times in one eviction", calls)
	}
	recs, _ := out.snapshot()
	return recs
}

func tuple(src, dst string, sport, dport uint16, proto uint8) FiveTuple {
	return FiveTuple{SrcAddr: netip.MustParseAddr(src).As16(), DstAddr: netip.MustParseAddr(dst).As16(), SrcPort: sport, DstPort: dport, Proto: proto}
}

func keyOf(ft FiveTuple, ifindex uint32, dir Direction) Key {
	k := ft.key(dir)
	k.IfIndex = ifindex
	k.SrcMAC = [6]byte{2, 0, 0, 0, 0, byte(ifindex)}
	return k
}

// findRecords returns the records of ft in dir.
func findRecords(recs []Record, ft FiveTuple, dir Direction) []Record {
	var out []Record
	for _, r := range recs {
		if r.FiveTuple() == ft && r.Direction == dir {
			out = append(out, r)
		}
	}
	return out
}

// TestJoinSocketSignals: a socket's RTT and retransmissions go on the
// egress record of its 5-tuple that came through no tunnel (even when a
// tunnelled one has a lower ifindex), on that record alone, and so sum to
// what the kernel counted; a 5-tuple without an egress record gets a
// record of its own, on no interface, with no packets.
func TestJoinSocketSignals(t *testing.T) {
	sock := tuple("10.0.0.1", "10.0.0.2", 40000, 80, ProtoTCP)
	lone := tuple("2001:db8::1", "2001:db8::2", 40001, 443, ProtoTCP) // no record at all
	rev := tuple("10.0.0.2", "10.0.0.1", 80, 40000, ProtoTCP)
	table := &fakeTable{}
	st := Stats{Packets: 10, Bytes: 1000, FirstSeen: 2e9, LastSeen: 2e9}
	under := keyOf(sock, 2, Egress) // the underlay, tunnelled: lower ifindex
	table.put(under, st)
	table.put(keyOf(sock, 5, Egress), st)
	table.put(keyOf(sock, 7, Egress), st)
	table.put(keyOf(sock, 5, Ingress), st) // not an egress record
	table.put(keyOf(rev, 5, Ingress), st)
	agg := keyOf(sock, 5, Egress)
	agg.SrcPort, agg.DstPort, agg.SrcMAC, agg.AggPrefix = 0, 0, [6]byte{}, 24
	table.put(agg, st)
	recs := evictWith(t, table, Extras{
		Sockets: map[FiveTuple]SocketSignals{
			sock: {HasRTT: true, RTTMinNs: 100, RTTMaxNs: 300, RTTLastNs: 200, HasRetransmits: true, Retransmits: 4},
			lone: {HasRTT: true, RTTMinNs: 5, RTTMaxNs: 6, RTTLastNs: 6, HasRetransmits: true},
		},
		Tunnels: map[Key]tunnel.Info{under: {Type: tunnel.VXLAN, ID: 42, HasID: true,
			SrcAddr: netip.MustParseAddr("10.88.0.1"), DstAddr: netip.MustParseAddr("10.88.0.2"), SrcPort: 5000, DstPort: 4789}},
	})
	if len(recs) != 7 {
		t.Fatalf("%d records, want the table's 6 and one for the lone socket: %+v", len(recs), recs)
	}
	var retrans uint64
	carriers := 0
	for _, r := range recs {
		retrans += r.Retransmits
		if r.Has.Any(HasRTT | HasRetransmits) {
			carriers++
		}
		if r.Has.Any(HasDrops) {
			t.Errorf("drops on %+v, with no drop measured", r)
		}
	}
	if retrans != 4 || carriers != 2 {
		t.Errorf("retransmits sum to %d over %d records, want 4 over 2 (the socket's record and the lone socket's)", retrans, carriers)
	}
	for _, r := range findRecords(recs, sock, Egress) {
		switch {
		case r.AggPrefix != 0:
			t.Errorf("an aggregate took signals: %+v", r)
		case r.IfIndex == 5:
			if r.Has&(HasRTT|HasRetransmits) != HasRTT|HasRetransmits || r.RTTMinNs != 100 || r.RTTMaxNs != 300 || r.RTTLastNs != 200 ||
				r.Retransmits != 4 || r.Packets != 10 || r.Iface != "if5" {
				t.Errorf("the socket's egress record: %+v", r)
			}
		case r.IfIndex == 2:
			if r.Has.Any(HasRTT) || r.TunnelType != tunnel.VXLAN || r.TunnelID != 42 || r.OuterDstPort != 4789 ||
				r.OuterSrcAddr != netip.MustParseAddr("10.88.0.1") {
				t.Errorf("the tunnelled record: %+v (want its tunnel and no signal)", r)
			}
		default:
			if r.Has != 0 {
				t.Errorf("a second egress record took signals: %+v", r)
			}
		}
	}
	l := findRecords(recs, lone, Egress)
	if len(l) != 1 {
		t.Fatalf("lone socket: %d records", len(l))
	}
	if r := l[0]; r.IfIndex != 0 || r.Iface != "" || r.Packets != 0 || r.EtherType != EtherTypeIPv6 || r.Sampling != 1 ||
		r.RTTLastNs != 6 || !r.Has.Any(HasRetransmits) || r.Retransmits != 0 || r.FirstSeen.IsZero() || r.LastSeen.Before(r.FirstSeen) {
		t.Errorf("lone socket's record: %+v", r)
	}
}

// TestJoinDrops: a 5-tuple's drops go on its ingress record before its
// egress one, on one record only; without a record, and for the drops
// whose headers could not be read (the zero 5-tuple), on a record of their
// own; a 5-tuple with socket signals and drops but no record gets one
// record for both.
func TestJoinDrops(t *testing.T) {
	both := tuple("10.0.0.1", "10.0.0.2", 5000, 9301, ProtoUDP)
	egressOnly := tuple("10.0.0.1", "10.0.0.3", 5001, 9302, ProtoUDP)
	none := tuple("10.0.0.9", "10.0.0.1", 5002, 9303, ProtoUDP)
	sockAndDrops := tuple("10.0.0.1", "10.0.0.4", 40000, 80, ProtoTCP)
	table := &fakeTable{}
	st := Stats{Packets: 3, Bytes: 300, FirstSeen: 2e9, LastSeen: 2e9}
	table.put(keyOf(both, 2, Egress), st)
	table.put(keyOf(both, 9, Ingress), st)
	table.put(keyOf(both, 8, Ingress), st)
	table.put(keyOf(egressOnly, 2, Egress), st)
	recs := evictWith(t, table, Extras{
		Sockets: map[FiveTuple]SocketSignals{sockAndDrops: {HasRetransmits: true, Retransmits: 2}},
		Drops: map[FiveTuple]Drops{
			both:         {Packets: 3, Bytes: 84, Reasons: DropReasons{"NETFILTER_DROP": 3}},
			egressOnly:   {Packets: 1, Bytes: 28, Reasons: DropReasons{"TC_EGRESS": 1}},
			none:         {Packets: 2, Bytes: 56, Reasons: DropReasons{"NO_SOCKET": 2}},
			{}:           {Packets: 5, Bytes: 500, Reasons: DropReasons{"OTHER": 5}},
			sockAndDrops: {Packets: 1, Bytes: 40, Reasons: DropReasons{"TCP_CSUM": 1}},
		},
	})
	if len(recs) != 4+3 {
		t.Fatalf("%d records, want the table's 4, and 3 on no interface: %+v", len(recs), recs)
	}
	var dropped uint64
	for _, r := range recs {
		dropped += r.DropPackets
	}
	if dropped != 3+1+2+5+1 {
		t.Errorf("drops sum to %d over the records, want 12", dropped)
	}
	check := func(name string, ft FiveTuple, dir Direction, ifindex uint32, packets uint64, reason string) {
		t.Helper()
		for _, r := range findRecords(recs, ft, dir) {
			if r.IfIndex != ifindex {
				if r.Has.Any(HasDrops) {
					t.Errorf("%s: drops also on %+v", name, r)
				}
				continue
			}
			if r.Has&HasDrops != HasDrops || r.DropPackets != packets || r.DropReasons[reason] != packets {
				t.Errorf("%s: %+v, want %d drops for %s", name, r, packets, reason)
			}
			return
		}
		t.Errorf("%s: no record on ifindex %d", name, ifindex)
	}
	check("ingress first, lowest ifindex", both, Ingress, 8, 3, "NETFILTER_DROP")
	check("else egress", egressOnly, Egress, 2, 1, "TC_EGRESS")
	check("no record", none, Ingress, 0, 2, "NO_SOCKET")
	check("unreadable headers", FiveTuple{}, Ingress, 0, 5, "OTHER")
	if r := findRecords(recs, FiveTuple{}, Ingress)[0]; r.EtherType != 0 || r.IsIP() {
		t.Errorf("drops with unreadable headers: %+v, want no IP flow", r)
	}
	s := findRecords(recs, sockAndDrops, Egress)
	if len(s) != 1 || s[0].Retransmits != 2 || s[0].DropPackets != 1 || s[0].IfIndex != 0 || len(findRecords(recs, sockAndDrops, Ingress)) != 0 {
		t.Errorf("socket with drops and no record: %+v, want one record on no interface with both", s)
	}
}

// TestJoinOnlyWhereAsked: without extras the evictor holds nothing back,
// and the records are what they were.
func TestJoinOnlyWhereAsked(t *testing.T) {
	table := &fakeTable{}
	k := keyOf(tuple("10.0.0.1", "10.0.0.2", 1, 2, ProtoUDP), 3, Egress)
	table.put(k, Stats{Packets: 1, Bytes: 100, FirstSeen: 2e9, LastSeen: 2e9})
	recs := evictWith(t, table, Extras{})
	if len(recs) != 1 || recs[0].Has != 0 || recs[0].Packets != 1 {
		t.Fatalf("records %+v", recs)
	}
}

// TestJoinByKey: DNS exchanges and handshake RTTs go on the record of
// their flow key (interface and direction included), and one whose flow
// has no record in the interval gets a record of that key with no
// packets, named as the others.
func TestJoinByKey(t *testing.T) {
	q := tuple("10.0.0.1", "10.0.0.53", 33000, 53, ProtoUDP)
	lost := tuple("10.0.0.1", "10.0.0.53", 33001, 53, ProtoUDP)
	c := tuple("10.0.0.1", "10.0.0.2", 40000, 80, ProtoTCP)
	table := &fakeTable{}
	st := Stats{Packets: 1, Bytes: 80, FirstSeen: 2e9, LastSeen: 2e9}
	table.put(keyOf(q, 3, Egress), st)
	table.put(keyOf(q, 4, Egress), st)
	table.put(keyOf(c, 3, Egress), st)
	recs := evictWith(t, table, Extras{
		DNS: map[Key]DNSExchange{
			keyOf(q, 4, Egress):    {ID: 7, QName: "a.test", HasRcode: true, Rcode: 3, HasLatency: true, LatencyNs: 900},
			keyOf(lost, 3, Egress): {ID: 8, QName: "slow.test"}, // timed out, its query in an earlier interval
		},
		Handshakes: map[Key]uint64{keyOf(c, 3, Egress): 250_000},
	})
	if len(recs) != 4 {
		t.Fatalf("%d records, want the table's 3 and the timed-out query's: %+v", len(recs), recs)
	}
	for _, r := range recs {
		switch {
		case r.FiveTuple() == q && r.IfIndex == 4:
			if r.Has != HasDNSID|HasDNSQName|HasDNSRcode|HasDNSLatency || r.DNSID != 7 || r.DNSQName != "a.test" || r.DNSRcode != 3 || r.DNSLatencyNs != 900 {
				t.Errorf("DNS record %+v", r)
			}
		case r.FiveTuple() == lost:
			if r.Has != HasDNSID|HasDNSQName || r.DNSID != 8 || r.Packets != 0 || r.IfIndex != 3 || r.Iface != "if3" {
				t.Errorf("timed-out query's record %+v", r)
			}
		case r.FiveTuple() == c:
			if r.Has != HasHandshakeRTT || r.HandshakeRTTNs != 250_000 {
				t.Errorf("handshake record %+v", r)
			}
		default:
			if r.Has != 0 {
				t.Errorf("record %+v took what is another key's", r)
			}
		}
	}
}
