package promflow

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"loupe/internal/flow"
)

func rec(iface string, dir flow.Direction, packets, bytes uint64) flow.Record {
	return flow.Record{Iface: iface, Key: flow.Key{Direction: dir}, Packets: packets, Bytes: bytes}
}

func TestTotalsAndSeriesCap(t *testing.T) {
	now := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	s := New(Options{MaxSeries: 3, IdleTTL: time.Minute, Now: func() time.Time { return now }})
	ctx := context.Background()
	s.Write(ctx, []flow.Record{
		rec("eth0", flow.Ingress, 2, 200), rec("eth0", flow.Ingress, 1, 50), rec("eth0", flow.Egress, 4, 400),
		rec("veth1", flow.Egress, 1, 10),                                    // third series: the cap
		rec("veth2", flow.Egress, 5, 500), rec("veth3", flow.Ingress, 1, 1), // folded
	})
	want := `
# HELP loupe_traffic_bytes_total Bytes (L2 length at the hook) seen at the TC hooks, by interface and direction.
# TYPE loupe_traffic_bytes_total counter
loupe_traffic_bytes_total{direction="egress",iface="_other"} 500
loupe_traffic_bytes_total{direction="egress",iface="eth0"} 400
loupe_traffic_bytes_total{direction="egress",iface="veth1"} 10
loupe_traffic_bytes_total{direction="ingress",iface="_other"} 1
loupe_traffic_bytes_total{direction="ingress",iface="eth0"} 250
# HELP loupe_traffic_series_folded_total Records counted under iface="_other" because the series cap was reached.
# TYPE loupe_traffic_series_folded_total counter
loupe_traffic_series_folded_total 2
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "loupe_traffic_bytes_total", "loupe_traffic_series_folded_total"); err != nil {
		t.Fatal(err)
	}

	// Series idle past the TTL are dropped at the next flush.
	now = now.Add(2 * time.Minute)
	s.Write(ctx, []flow.Record{rec("eth0", flow.Egress, 1, 1)})
	s.Flush(ctx)
	if n := testutil.CollectAndCount(s, "loupe_traffic_packets_total"); n != 1 {
		t.Fatalf("%d packet series after expiry, want 1", n)
	}
}
