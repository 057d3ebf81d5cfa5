package main

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/tunnel"
)

// TestFlowsAndTopShowSignals: loupe flows shows a column for each kernel
// signal, DNS and tunnel field only when a record of the answer has it,
// --json carries the record's fields under their names; loupe top --sort
// ranks the groups by a signal, among those that measured it, and shows
// their sums.
func TestFlowsAndTopShowSignals(t *testing.T) {
	plain := rec("10.0.0.1", "10.0.1.1", 40000, 443, 6, 90000, time.Minute)
	slow := rec("10.0.0.2", "10.0.1.1", 40001, 443, 6, 3000, time.Minute)
	slow.SetRTT(2_000_000, 9_000_000, 4_500_000)
	slow.SetRetransmits(7)
	fast := rec("10.0.0.3", "10.0.1.1", 40002, 443, 6, 5000, time.Minute)
	fast.SetRTT(100_000, 300_000, 200_000)
	fast.SetRetransmits(0)
	dropped := rec("10.0.0.4", "10.0.1.2", 5000, 9301, 17, 1000, time.Minute)
	dropped.Direction = flow.Ingress
	dropped.SetDrops(3, 84, flow.DropReasons{"NETFILTER_DROP": 3})
	dns := rec("10.0.0.4", "10.0.0.53", 33000, 53, 17, 200, time.Minute)
	dns.SetDNS(&flow.DNSExchange{ID: 7, QName: "nosuch.test", HasRcode: true, Rcode: 3, HasLatency: true, LatencyNs: 1_250_000})
	vx := rec("10.99.0.1", "10.99.0.2", 40003, 40004, 17, 600, time.Minute)
	vx.SetTunnel(&tunnel.Info{Type: tunnel.VXLAN, ID: 42, HasID: true, SrcAddr: netip.MustParseAddr("10.88.0.1"),
		DstAddr: netip.MustParseAddr("10.88.0.2"), SrcPort: 50000, DstPort: 4789})
	dir := writeRecords(t, 3, []flow.Record{plain, slow, fast, dropped, dns, vx})

	optional := []string{"RTT LAST (MIN-MAX)", "HANDSHAKE", "RETRANS", "DROPS", "DNS", "TUNNEL"}
	code, out, errOut := run(t, "flows", "--store", dir, "--src", "10.0.0.1/32")
	head, _ := tableRows(t, out)
	if code != 0 || slices.ContainsFunc(head, func(h string) bool { return slices.Contains(optional, h) }) {
		t.Fatalf("flows of a record without signals: exit %d, columns %v (want none of %v): %s", code, head, optional, errOut)
	}
	code, out, errOut = run(t, "flows", "--store", dir, "--sort", "bytes")
	if code != 0 {
		t.Fatalf("flows: exit %d: %s", code, errOut)
	}
	head, rows := tableRows(t, out)
	for _, h := range []string{"RTT LAST (MIN-MAX)", "RETRANS", "DROPS", "DNS", "TUNNEL"} {
		if !slices.Contains(head, h) {
			t.Errorf("flows: no %s column in %v:\n%s", h, head, out)
		}
	}
	if slices.Contains(head, "HANDSHAKE") {
		t.Errorf("flows: a HANDSHAKE column, which no record has:\n%s", out)
	}
	// By bytes: plain, fast, slow, dropped, vx, dns.
	for name, want := range map[string][]string{
		"RTT LAST (MIN-MAX)": {"", "200µs (100µs-300µs)", "4.5ms (2ms-9ms)", "", "", ""},
		"RETRANS":            {"", "0", "7", "", "", ""},
		"DROPS":              {"", "", "", "3 NETFILTER_DROP=3", "", ""},
		"DNS":                {"", "", "", "", "", "nosuch.test NXDOMAIN 1.25ms id 7"},
		"TUNNEL":             {"", "", "", "", "vxlan 42 10.88.0.1:50000 > 10.88.0.2:4789", ""},
	} {
		if got := column(t, head, rows, name); !slices.Equal(got, want) {
			t.Errorf("flows: %s %q, want %q:\n%s", name, got, want, out)
		}
	}
	_, out, _ = run(t, "flows", "--store", dir, "--sort", "bytes", "--raw")
	head, rows = tableRows(t, out)
	if got := column(t, head, rows, "RTT LAST (MIN-MAX)"); got[2] != "4500000 (2000000-9000000)" {
		t.Errorf("flows --raw: RTT %q, want nanoseconds:\n%s", got[2], out)
	}

	_, out, _ = run(t, "flows", "--store", dir, "--sort", "bytes", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("flows --json: %d lines:\n%s", len(lines), out)
	}
	for i, want := range [][]string{
		{},
		{`"rtt_min_ns":100000,"rtt_max_ns":300000,"rtt_last_ns":200000`, `"retransmits":0`},
		{`"rtt_last_ns":4500000`, `"retransmits":7`},
		{`"drop_packets":3,"drop_bytes":84,"drop_reasons":{"NETFILTER_DROP":3}`},
		{`"tunnel_type":"vxlan","tunnel_id":42,"outer_src_addr":"10.88.0.1","outer_dst_addr":"10.88.0.2","outer_src_port":50000,"outer_dst_port":4789`},
		{`"dns_id":7,"dns_qname":"nosuch.test","dns_rcode":"NXDOMAIN","dns_latency_ns":1250000`},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("flows --json line %d: no %s in\n%s", i, w, lines[i])
			}
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range []string{"rtt_min_ns", "rtt_max_ns", "rtt_last_ns", "handshake_rtt_ns", "retransmits", "drop_packets", "drop_bytes",
			"drop_reasons", "dns_id", "dns_qname", "dns_rcode", "dns_latency_ns", "tunnel_type", "tunnel_id", "outer_src_addr",
			"outer_dst_addr", "outer_src_port", "outer_dst_port"} {
			if _, ok := m[k]; ok {
				n++
			}
		}
		if want := []int{0, 4, 4, 3, 6, 4}[i]; n != want {
			t.Errorf("flows --json line %d has %d signal fields, want %d:\n%s", i, n, want, lines[i])
		}
	}

	// Ranked by RTT: the slow group first, the plain one not at all.
	code, out, errOut = run(t, "top", "--store", dir, "--sort", "rtt", "--raw")
	head, rows = tableRows(t, out)
	if code != 0 || !slices.Equal(head, []string{"SOURCE", "BYTES", "PACKETS", "FLOWS", "RTT (MIN-MAX)", "RETRANS"}) || len(rows) != 2 {
		t.Fatalf("top --sort rtt: exit %d %s:\n%s", code, errOut, out)
	}
	if !slices.Equal(rows[0], []string{"10.0.0.2", "3000", "30", "1", "2000000-9000000", "7"}) ||
		!slices.Equal(rows[1], []string{"10.0.0.3", "5000", "50", "1", "100000-300000", "0"}) {
		t.Errorf("top --sort rtt: rows %q:\n%s", rows, out)
	}
	_, out, _ = run(t, "top", "--store", dir, "--sort", "drops", "--by", "dst-port", "--json")
	if strings.TrimSpace(out) != `{"dst_port":9301,"proto":17,"bytes":1000,"packets":10,"flows":1,"accuracy":"exact","drop_packets":3,"drop_bytes":84}` {
		t.Errorf("top --sort drops --json:\n%s", out)
	}
	_, out, _ = run(t, "top", "--store", dir, "--sort", "retransmits", "-n", "1")
	if _, rows = tableRows(t, out); len(rows) != 1 || rows[0][0] != "10.0.0.2" {
		t.Errorf("top --sort retransmits -n 1:\n%s", out)
	}
	_, out, _ = run(t, "top", "--store", dir, "--sort", "dns_latency", "--by", "dst")
	if head, rows = tableRows(t, out); len(rows) != 1 || rows[0][0] != "10.0.0.53" || column(t, head, rows, "DNS LATENCY (MAX)")[0] != "1.25ms" {
		t.Errorf("top --sort dns_latency:\n%s", out)
	}
	// By bytes, the columns of what the groups measured come along.
	_, out, _ = run(t, "top", "--store", dir)
	if head, _ = tableRows(t, out); !slices.Contains(head, "DROPS") || !slices.Contains(head, "RTT (MIN-MAX)") {
		t.Errorf("top: no signal columns:\n%s", out)
	}
	if code, _, errOut = run(t, "top", "--store", dir, "--sort", "latency"); code == 0 || !strings.Contains(errOut, "--sort") {
		t.Errorf("top --sort latency: exit %d: %s", code, errOut)
	}
	if code, out, errOut = run(t, "top", "--store", dir, "--sort", "drops", "--src", "10.0.0.1/32"); code != 0 || out != "" ||
		!strings.Contains(errOut, "measured drops") {
		t.Errorf("top --sort drops of a group without drops: exit %d %q %q", code, out, errOut)
	}
}
