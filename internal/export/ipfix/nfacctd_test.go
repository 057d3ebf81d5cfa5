package ipfix

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/testutil/nfacctd"
)

func TestNfacctdDecodesUDP(t *testing.T) {
	for _, tc := range []struct{ name, listen string }{{"ipv4", "127.0.0.1:0"}, {"ipv6", "[::1]:0"}} {
		t.Run(tc.name, func(t *testing.T) {
			n := nfacctd.Start(t, nfacctd.Options{Listen: tc.listen, Aggregate: nfacctdAggregate, Primitives: nfacctdPrimitives})
			c := newClient(t, n.Target(), Options{})
			recs := peerRecords(500)
			ctx := context.Background()
			failed, err := c.Send(ctx, recs)
			if err != nil || len(failed) > 0 {
				t.Fatalf("Send: %v", err)
			}
			// nfacctd accounts IP flows only: the non-IP template's
			// records (ARP here) are received but not printed.
			var ipRecs []flow.Record
			for _, r := range recs {
				if r.EtherType == flow.EtherTypeIPv4 || r.EtherType == flow.EtherTypeIPv6 {
					ipRecs = append(ipRecs, r)
				}
			}
			got := n.WaitCount(t, len(ipRecs))
			assertNfacctd(t, got, ipRecs)
		})
	}
}

// nfacctdAggregate is nfacctd's default list plus the VLAN (its own
// primitives vlan, in_vlan and out_vlan) and Loupe's segment, wire-byte,
// accuracy and error-bound elements, which nfacctd only knows as custom
// primitives.
var nfacctdAggregate = append(append([]string(nil), nfacctd.DefaultAggregate...),
	"vlan", "loupe_segments", "loupe_wire_bytes", "loupe_accuracy", "loupe_max_error_packets", "loupe_max_error_bytes")

var nfacctdPrimitives = []nfacctd.Primitive{
	{Name: "loupe_segments", PEN: testPEN, FieldType: 6, Len: 8, Semantics: "u_int"},
	{Name: "loupe_wire_bytes", PEN: testPEN, FieldType: 7, Len: 8, Semantics: "u_int"},
	{Name: "loupe_accuracy", PEN: testPEN, FieldType: 9, Len: 1, Semantics: "u_int"},
	{Name: "loupe_max_error_packets", PEN: testPEN, FieldType: 10, Len: 8, Semantics: "u_int"},
	{Name: "loupe_max_error_bytes", PEN: testPEN, FieldType: 11, Len: 8, Semantics: "u_int"},
}

// assertNfacctd matches nfacctd's objects to records by packet count (the
// records' identity) and compares every field nfacctd prints.
func assertNfacctd(t *testing.T, got []nfacctd.Flow, recs []flow.Record) {
	t.Helper()
	byID := map[int]nfacctd.Flow{}
	for _, g := range got {
		id, _ := g.Uint("packets")
		if _, dup := byID[int(id)]; dup {
			t.Fatalf("two objects with packets=%v", id)
		}
		byID[int(id)] = g
	}
	if len(got) != len(recs) {
		t.Errorf("nfacctd printed %d flows, %d sent", len(got), len(recs))
	}
	for i := range recs {
		r := &recs[i]
		g, ok := byID[int(r.Packets)]
		if !ok {
			t.Errorf("record %d missing", r.Packets)
			continue
		}
		for k, w := range nfacctdExpect(r) {
			if v := g.Field(k); v != w {
				t.Errorf("record %d: %s = %s, want %s (%v)", r.Packets, k, v, w, g)
				break
			}
		}
	}
}

func nfacctdExpect(r *flow.Record) map[string]string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	ip := r.EtherType == flow.EtherTypeIPv4 || r.EtherType == flow.EtherTypeIPv6
	src, dst := "0.0.0.0", "0.0.0.0"
	if ip {
		src, dst = r.SrcIP().String(), r.DstIP().String()
	}
	sp, dp := u(uint64(r.SrcPort)), u(uint64(r.DstPort))
	if r.Proto == 1 || r.Proto == 58 || !ip {
		sp, dp = "0", "0"
	}
	in, out := r.IfIndex, uint32(0)
	if r.Direction == flow.Egress {
		in, out = 0, r.IfIndex
	}
	ms := func(t time.Time) string { return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000) }
	// Not compared, because pmacct 1.7.7 does not decode them as sent:
	// tcp_flags (it prints 0 for every record with the 2-byte RFC 7125
	// element, whatever the flags),
	// tos (it reads ipClassOfService 5, not ipDiffServCodePoint 195),
	// sampling_rate (from its own sampling elements, not loupeSamplingRate),
	// loupeErrorConfidence (a float64, which custom primitives cannot
	// print). tshark checks those fields. A record of a template without
	// the error bounds (every record but an estimate) prints them as 0.
	return map[string]string{
		"ip_proto": u(uint64(r.Proto)), "sampling_direction": map[flow.Direction]string{flow.Ingress: "i", flow.Egress: "e"}[r.Direction],
		"ip_src": src, "ip_dst": dst, "port_src": sp, "port_dst": dp,
		"bytes": u(r.Bytes), "packets": u(r.Packets),
		"iface_in": u(uint64(in)), "iface_out": u(uint64(out)),
		"mac_src": net.HardwareAddr(r.SrcMAC[:]).String(), "mac_dst": net.HardwareAddr(r.DstMAC[:]).String(),
		"etype":           strings.ToLower(strconv.FormatUint(uint64(r.EtherType), 16)),
		"timestamp_start": ms(r.FirstSeen), "timestamp_end": ms(r.LastSeen),
		"vlan":           u(uint64(r.VlanID)),
		"loupe_segments": u(r.Segments), "loupe_wire_bytes": u(r.WireBytes),
		"loupe_accuracy": u(uint64(r.Accuracy)), "loupe_max_error_packets": u(r.MaxErrorPackets), "loupe_max_error_bytes": u(r.MaxErrorBytes),
	}
}
