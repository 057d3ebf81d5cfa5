package flow

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestJSONRoundTrip(t *testing.T) {
	first := time.Date(2026, 11, 21, 9, 30, 0, 123456789, time.UTC)
	recs := []Record{
		{
			Key: Key{SrcAddr: AddrBytes(netip.MustParseAddr("10.0.0.1")), DstAddr: AddrBytes(netip.MustParseAddr("10.0.0.2")),
				SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, IfIndex: 7, EtherType: EtherTypeIPv4,
				SrcPort: 40000, DstPort: 443, Proto: 6, Direction: Egress},
			Iface: `eth"0`, Packets: 10, Bytes: 15000, FirstSeen: first, LastSeen: first.Add(time.Second),
			Sampling: 1, TCPFlags: TCPSyn | TCPAck, DSCP: 46,
		},
		{
			Key: Key{SrcAddr: AddrBytes(netip.MustParseAddr("2001:db8::1")), DstAddr: AddrBytes(netip.MustParseAddr("ff02::1")),
				EtherType: EtherTypeIPv6, SrcPort: 135, Proto: 58},
			Iface: "veth1", Packets: 1, Bytes: 86, FirstSeen: first, LastSeen: first, Sampling: 1,
		},
		{Key: Key{EtherType: 0x0806, IfIndex: 2}, Iface: "eth0", Packets: 2, Bytes: 84, FirstSeen: first, LastSeen: first, Sampling: 1},
	}
	for _, r := range recs {
		b := AppendJSON(nil, &r)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("invalid JSON %s: %v", b, err)
		}
		for _, f := range []string{"iface", "direction", "proto", "src_addr", "dst_addr", "src_port", "dst_port", "packets", "bytes", "tcp_flags", "first_seen", "last_seen"} {
			if _, ok := m[f]; !ok {
				t.Errorf("field %s missing from %s", f, b)
			}
		}
		if !strings.Contains(string(b), `"first_seen":"2026-11-21T09:30:00.123456789Z"`) {
			t.Errorf("first_seen not RFC 3339 with ns: %s", b)
		}
		var back Record
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if back.Key != r.Key || back.Iface != r.Iface || back.Packets != r.Packets || back.Bytes != r.Bytes ||
			!back.FirstSeen.Equal(r.FirstSeen) || !back.LastSeen.Equal(r.LastSeen) || back.TCPFlags != r.TCPFlags ||
			back.DSCP != r.DSCP || back.Sampling != r.Sampling {
			t.Errorf("round trip\n got %+v\nwant %+v", back, r)
		}
	}
	if got := recs[2].SrcIP(); got.IsValid() {
		t.Errorf("ARP flow has source address %v", got)
	}
}

func TestMergePerCPU(t *testing.T) {
	per := []Stats{
		{},
		{Packets: 1, Bytes: 10, FirstSeen: 100, LastSeen: 150, DSCP: 1, TCPFlags: 1},
		{Packets: 2, Bytes: 20, FirstSeen: 90, LastSeen: 200, DSCP: 2, TCPFlags: 4},
		{Packets: 5, Bytes: 50, FirstSeen: 10, LastSeen: 60}, // before the cutoff
	}
	got, stale := MergePerCPU(per, 80)
	want := Stats{Packets: 3, Bytes: 30, FirstSeen: 90, LastSeen: 200, DSCP: 2, TCPFlags: 5}
	if got != want || stale != 1 {
		t.Fatalf("merged %+v stale %d, want %+v and 1", got, stale, want)
	}
}
