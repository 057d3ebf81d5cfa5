package query

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
)

// TestFlowsTableVLAN: a VLAN column only when a row has a VLAN ID.
func TestFlowsTableVLAN(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	now := time.Now()
	r := flow.Record{
		Key:   flow.Key{SrcAddr: a.As16(), DstAddr: b.As16(), SrcPort: 1000, DstPort: 80, Proto: 6, EtherType: flow.EtherTypeIPv4, Direction: flow.Egress, IfIndex: 2},
		Iface: "eth0", Packets: 5, Bytes: 500, FirstSeen: now.Add(-time.Minute), LastSeen: now, Sampling: 1,
	}
	tagged := r
	tagged.VlanID = 100
	for _, c := range []struct {
		recs []flow.Record
		want []string
	}{
		{[]flow.Record{r, r}, nil},
		{[]flow.Record{r, tagged}, []string{"", "100"}},
	} {
		var b strings.Builder
		ft := newFlowTable(&b, format{}, false, false)
		for i := range c.recs {
			ft.add(&c.recs[i])
		}
		if err := ft.flush(); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(b.String(), "\n")
		has := strings.Contains(lines[0], "VLAN")
		if has != (c.want != nil) {
			t.Fatalf("VLAN column %v:\n%s", has, b.String())
		}
		if has {
			at := strings.Index(lines[0], "VLAN") + len("VLAN") // right-aligned
			for i, w := range c.want {
				if cell := strings.TrimSpace(lines[1+i][at-4 : at]); cell != w {
					t.Errorf("row %d VLAN %q, want %q:\n%s", i, cell, w, b.String())
				}
			}
		}
	}
}

// TestFlowsTableAggregate: an aggregate's endpoints are its prefixes, not
// addresses with port 0.
func TestFlowsTableAggregate(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		src, dst string
		prefix   uint8
		want     string
	}{
		{"10.1.2.0", "192.0.2.0", 24, "10.1.2.0/24 "},
		{"10.1.2.3", "192.0.2.9", 64, "10.1.2.3/32 "}, // IPv4 at most /32
		{"2001:db8::", "2001:db8:1::", 48, "2001:db8::/48 "},
	} {
		a, b := netip.MustParseAddr(c.src), netip.MustParseAddr(c.dst)
		et := uint16(flow.EtherTypeIPv4)
		if a.Is6() {
			et = flow.EtherTypeIPv6
		}
		r := flow.Record{
			Key:   flow.Key{SrcAddr: a.As16(), DstAddr: b.As16(), Proto: 6, EtherType: et, AggPrefix: c.prefix},
			Iface: "eth0", Packets: 5, Bytes: 500, FirstSeen: now.Add(-time.Minute), LastSeen: now, Sampling: 1,
		}
		var sb strings.Builder
		ft := newFlowTable(&sb, format{}, false, false)
		ft.add(&r)
		if err := ft.flush(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(sb.String(), c.want) || strings.Contains(sb.String(), ":0 ") {
			t.Errorf("aggregate /%d of %s: want %q in\n%s", c.prefix, c.src, c.want, sb.String())
		}
	}
}

// TestFlowsTableAccuracy: an ACCURACY column only when a row is not exact
// (always when following), an estimate's counts marked with ~.
func TestFlowsTableAccuracy(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	now := time.Now()
	r := flow.Record{
		Key:   flow.Key{SrcAddr: a.As16(), DstAddr: b.As16(), SrcPort: 1000, DstPort: 80, Proto: 6, EtherType: flow.EtherTypeIPv4, Direction: flow.Egress, IfIndex: 2},
		Iface: "eth0", Packets: 5, Bytes: 500, FirstSeen: now.Add(-time.Minute), LastSeen: now, Sampling: 1,
	}
	est := r
	est.Accuracy, est.MaxErrorPackets, est.MaxErrorBytes, est.ErrorConfidence = flow.Estimated, 2, 2048, 0.99
	for _, c := range []struct {
		recs   []flow.Record
		follow bool
		column bool
		want   []string // in the table's output
	}{
		{[]flow.Record{r, r}, false, false, []string{" 5  500 B"}},
		{[]flow.Record{r, est}, false, true, []string{"~5  ~500 B", "over by <=2 pkts, <=2.0 KiB (99.0%)"}},
		{[]flow.Record{r}, true, true, []string{"  500 B"}},
	} {
		var sb strings.Builder
		ft := newFlowTable(&sb, format{}, false, c.follow)
		for i := range c.recs {
			ft.add(&c.recs[i])
		}
		if err := ft.flush(); err != nil {
			t.Fatal(err)
		}
		out := sb.String()
		if strings.Contains(out, "ACCURACY") != c.column {
			t.Errorf("follow %v: ACCURACY column %v, want %v:\n%s", c.follow, !c.column, c.column, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("follow %v: no %q in\n%s", c.follow, w, out)
			}
		}
		if est := slices.ContainsFunc(c.recs, func(r flow.Record) bool { return r.Estimated() }); strings.Contains(out, "~") != est {
			t.Errorf("follow %v: counts marked ~ %v, want %v:\n%s", c.follow, !est, est, out)
		}
	}
}
