package query

import (
	"net/netip"
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
