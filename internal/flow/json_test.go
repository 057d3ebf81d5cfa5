package flow

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"loupe/internal/tunnel"
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

// signalNames are the JSON names of the kernel signals' and tunnels'
// fields, as issues 10 and 11 fix them: a contract, not a choice.
var signalNames = []string{"rtt_min_ns", "rtt_max_ns", "rtt_last_ns", "handshake_rtt_ns", "retransmits", "drop_packets",
	"drop_bytes", "drop_reasons", "dns_id", "dns_qname", "dns_rcode", "dns_latency_ns",
	"tunnel_type", "tunnel_id", "outer_src_addr", "outer_dst_addr", "outer_src_port", "outer_dst_port"}

// TestJSONSignalFieldsPresence: the fields of the kernel signals, DNS and
// tunnels have their contract's names, are absent from the records they
// were not measured for, and present, 0 included, where they were.
func TestJSONSignalFieldsPresence(t *testing.T) {
	for _, n := range signalNames {
		if _, ok := FieldByName(n); !ok {
			t.Errorf("no field %s", n)
		}
	}
	base := Record{Key: Key{SrcAddr: AddrBytes(netip.MustParseAddr("10.0.0.1")), DstAddr: AddrBytes(netip.MustParseAddr("10.0.0.2")),
		EtherType: EtherTypeIPv4, SrcPort: 40000, DstPort: 80, Proto: ProtoTCP, Direction: Egress}, Packets: 3, Bytes: 180, Sampling: 1}
	rtt := base
	rtt.SetRTT(100_000, 300_000, 200_000)
	rtt.SetRetransmits(0)
	drops := base
	drops.SetDrops(3, 156, DropReasons{"NETFILTER_DROP": 2, "NO_SOCKET": 1})
	dns := base
	dns.DNSID, dns.DNSQName, dns.DNSRcode, dns.DNSLatencyNs = 7, "nosuch.test", 3, 0
	dns.Has |= HasDNSID | HasDNSQName | HasDNSRcode | HasDNSLatency
	query := base // a query without its response
	query.DNSID, query.DNSQName = 8, "slow.test"
	query.Has |= HasDNSID | HasDNSQName
	vx := base
	vx.SetTunnel(&tunnel.Info{Type: tunnel.VXLAN, ID: 42, HasID: true, SrcAddr: netip.MustParseAddr("fd88::1"),
		DstAddr: netip.MustParseAddr("fd88::2"), SrcPort: 50000, DstPort: 4789})
	ipip := base
	ipip.SetTunnel(&tunnel.Info{Type: tunnel.IPIP, SrcAddr: netip.MustParseAddr("192.0.2.1"), DstAddr: netip.MustParseAddr("192.0.2.2")})
	for _, c := range []struct {
		name string
		rec  Record
		want map[string]string // the fields of signalNames present, as JSON
	}{
		{"none", base, nil},
		{"rtt, no retransmission", rtt, map[string]string{"rtt_min_ns": "100000", "rtt_max_ns": "300000", "rtt_last_ns": "200000", "retransmits": "0"}},
		{"drops", drops, map[string]string{"drop_packets": "3", "drop_bytes": "156", "drop_reasons": `{"NETFILTER_DROP":2,"NO_SOCKET":1}`}},
		{"dns", dns, map[string]string{"dns_id": "7", "dns_qname": `"nosuch.test"`, "dns_rcode": `"NXDOMAIN"`, "dns_latency_ns": "0"}},
		{"dns query alone", query, map[string]string{"dns_id": "8", "dns_qname": `"slow.test"`}},
		{"vxlan", vx, map[string]string{"tunnel_type": `"vxlan"`, "tunnel_id": "42", "outer_src_addr": `"fd88::1"`,
			"outer_dst_addr": `"fd88::2"`, "outer_src_port": "50000", "outer_dst_port": "4789"}},
		{"ipip", ipip, map[string]string{"tunnel_type": `"ipip"`, "outer_src_addr": `"192.0.2.1"`, "outer_dst_addr": `"192.0.2.2"`}},
	} {
		js := AppendJSON(nil, &c.rec)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatalf("%s: invalid JSON %s: %v", c.name, js, err)
		}
		for _, n := range signalNames {
			got, ok := m[n]
			want, wantOK := c.want[n]
			if ok != wantOK || string(got) != want {
				t.Errorf("%s: %s is %q (present %v), want %q (present %v)", c.name, n, got, ok, want, wantOK)
			}
		}
		var back Record
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if back.Has != c.rec.Has || !reflect.DeepEqual(back, c.rec) {
			t.Errorf("%s: read back %+v, want %+v", c.name, back, c.rec)
		}
	}
	for _, bad := range []string{`{"dns_rcode":"NOSUCH"}`, `{"tunnel_type":"vpn"}`, `{"tunnel_type":""}`, `{"drop_reasons":[1]}`,
		`{"drop_reasons":{"X":-1}}`, `{"outer_src_addr":"fe80::1%eth0"}`, `{"dns_id":65536}`} {
		var r Record
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestJSONKubernetesNames is the contract of the names: the twelve fields
// the issue names, exactly spelled, with src_kind, dst_kind and the
// interface's pod beside them; a name that is unknown is absent, and a
// record without names has none of them.
func TestJSONKubernetesNames(t *testing.T) {
	first := time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)
	r := Record{
		Key: Key{SrcAddr: AddrBytes(netip.MustParseAddr("10.244.1.5")), DstAddr: AddrBytes(netip.MustParseAddr("10.96.0.10")),
			EtherType: EtherTypeIPv4, SrcPort: 40000, DstPort: 53, Proto: 17, IfIndex: 9},
		Iface: "lxc1", Packets: 1, Bytes: 80, FirstSeen: first, LastSeen: first, Sampling: 1,
	}
	plain := AppendJSON(nil, &r)
	r.K8s = &K8s{
		Src:      K8sEnd{Kind: K8sPod, Namespace: "shop", Pod: "web-1", Workload: "web", WorkloadKind: "Deployment", Service: "web-svc", Node: "n1"},
		Dst:      K8sEnd{Kind: K8sService, Namespace: "kube-system", Service: "kube-dns"},
		IfacePod: "web-1", IfaceNamespace: "shop",
	}
	var m map[string]any
	if err := json.Unmarshal(AppendJSON(nil, &r), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"src_kind": "pod", "src_namespace": "shop", "src_pod": "web-1", "src_workload": "web", "src_workload_kind": "Deployment",
		"src_service": "web-svc", "src_node": "n1",
		"dst_kind": "service", "dst_namespace": "kube-system", "dst_service": "kube-dns",
		"iface_pod": "web-1", "iface_namespace": "shop",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %q", k, m[k], v)
		}
	}
	for _, k := range []string{"dst_pod", "dst_workload", "dst_workload_kind", "dst_node"} {
		if v, ok := m[k]; ok {
			t.Errorf("%s = %v: an unknown name must be absent", k, v)
		}
	}
	var back Record
	if err := back.UnmarshalJSON(AppendJSON(nil, &r)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.K8s, r.K8s) {
		t.Errorf("read back %+v, want %+v", back.K8s, r.K8s)
	}
	for _, k := range []string{"src_kind", "src_namespace", "src_pod", "src_workload", "src_workload_kind", "src_service", "src_node",
		"dst_kind", "dst_namespace", "dst_pod", "dst_workload", "dst_workload_kind", "dst_service", "dst_node", "iface_pod", "iface_namespace"} {
		if strings.Contains(string(plain), `"`+k+`"`) {
			t.Errorf("a record without names has %s: %s", k, plain)
		}
	}
}
