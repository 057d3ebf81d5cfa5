package nfacctd

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"loupe/internal/export/ipfix"
	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// TestStopPrintsEverything checks the harness itself, in the test's
// namespace and in a fresh one: records sent just before Stop are printed
// (SIGINT makes the print plugin purge its cache), none is lost, and
// records that differ only in their timestamps stay apart; and the custom
// primitives print Loupe's own elements.
func TestStopPrintsEverything(t *testing.T) {
	for _, tc := range []struct {
		name string
		ns   bool
	}{{"here", false}, {"netns", true}} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Listen: "127.0.0.1:0", Aggregate: LoupeAggregate, Primitives: LoupePrimitives}
			if tc.ns {
				o.NS = testutil.NewNS(t)
			}
			c := Start(t, o)
			t0 := time.Now().Truncate(time.Millisecond)
			const n = 300
			recs := make([]flow.Record, n)
			for i := range recs {
				r := &recs[i]
				r.EtherType, r.Proto, r.IfIndex = flow.EtherTypeIPv4, 6, 3
				r.TCPFlags, r.DSCP, r.Sampling = uint16(i)&0x1ff, uint8(i%64), uint32(1+i%4)
				r.SrcAddr = flow.AddrBytes(netip.MustParseAddr("10.1.2.3"))
				r.DstAddr = flow.AddrBytes(netip.MustParseAddr("10.4.5.6"))
				r.SrcPort, r.DstPort = 1000, 2000
				r.Packets, r.Bytes = uint64(i+1), uint64(64*(i+1))
				// Same flow, one record per millisecond.
				r.FirstSeen = t0.Add(time.Duration(i) * time.Millisecond)
				r.LastSeen = r.FirstSeen
			}
			// ns.Do runs send on a goroutine of its own: no t.Fatal there.
			send := func() error {
				cl, err := ipfix.New(c.Target(), ipfix.Options{})
				if err != nil {
					return err
				}
				defer cl.Close()
				failed, err := cl.Send(context.Background(), recs)
				if err == nil && len(failed) > 0 {
					err = fmt.Errorf("%d records failed", len(failed))
				}
				return err
			}
			var err error
			if o.NS != nil {
				err = o.NS.Do(send)
			} else {
				err = send()
			}
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			// Stop right away: Stop, not the test, waits for the records.
			got := c.Stop(t)
			if len(got) != n {
				t.Fatalf("nfacctd printed %d objects, want %d:\n%s", len(got), n, c.Log())
			}
			seen := map[uint64]bool{}
			for _, g := range got {
				p, _ := g.Uint("packets")
				b, _ := g.Uint("bytes")
				if p < 1 || p > n {
					t.Fatalf("object %v: no record has that many packets", g)
				}
				r := &recs[p-1]
				want := fmt.Sprintf("tcp_bits=%d dscp=%d loupe_sampling_rate=%d flow_direction=0 ip_src=10.1.2.3 port_dst=2000 iface_in=3",
					r.TCPFlags, r.DSCP, r.Sampling)
				if seen[p] || b != 64*p ||
					g.Key("tcp_bits", "dscp", "loupe_sampling_rate", "flow_direction", "ip_src", "port_dst", "iface_in") != want {
					t.Fatalf("object %v, want %s", g, want)
				}
				seen[p] = true
			}
			if lost := c.Lost(); len(lost) > 0 {
				t.Errorf("nfacctd reports losses: %q", lost)
			}
		})
	}
}
