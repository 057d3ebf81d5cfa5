package output

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"loupe/internal/flow"
	"loupe/internal/hop"
	"loupe/internal/store"
)

// Stamps in, and out: a record in the store's latency log, an observation
// per hop, the counters registered without conflict.
func TestPipelineStoresAndObserves(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	cfg := hop.DefaultConfig()
	cfg.MatchWindow = 20 * time.Millisecond
	cfg.NodeName = "node-a"
	names := map[uint32]hop.Iface{1: {Name: "vethA", Kind: "veth"}, 2: {Name: "eth0", Kind: "device"}}
	p, err := Open(Options{
		Config: cfg, StoreDir: dir, OTLPTargets: OTLPTargets([]string{"json:-", "otlp://127.0.0.1:1"}),
		Resolver: hop.ResolverFunc(func(i uint32) hop.Iface { return names[i] }),
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p.Collectors()...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()

	k := flow.Key{EtherType: flow.EtherTypeIPv4, Proto: 6, SrcPort: 40000, DstPort: 80,
		SrcAddr: netip.MustParseAddr("10.1.0.2").As16(), DstAddr: netip.MustParseAddr("10.2.0.2").As16()}
	now := hop.MonotonicNow()
	in, out := k, k
	in.IfIndex, in.Direction = 1, flow.Ingress
	out.IfIndex, out.Direction = 2, flow.Egress
	p.Stamp(hop.Stamp{TimeNs: now, Key: in, Seq: 77, Len: 100, Kind: hop.KindRequest})
	p.Stamp(hop.Stamp{TimeNs: now + 4500, Key: out, Seq: 77, Len: 100, Kind: hop.KindRequest})
	p.Context(hop.Context{Key: in, Seq: 77, TraceID: [16]byte{0xab}, SpanID: [8]byte{0xcd}, Source: hop.SourceTraceparent})

	// The window passes while running: stored before the end.
	var got []*hop.Request
	deadline := time.Now().Add(5 * time.Second)
	for len(got) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		got = got[:0]
		if _, err := store.ReadHops(dir, time.Time{}, func(r *hop.Request) error { got = append(got, r); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d stored records, want 1", len(got))
	}
	r := got[0]
	if r.Node != "node-a" || r.TraceID != "ab000000000000000000000000000000" || len(r.Hops) != 1 ||
		r.Hops[0] != (hop.Hop{FromIface: "vethA", ToIface: "eth0", Direction: "out", LatencyNs: 4500}) || r.BootID == "" {
		t.Errorf("stored %+v", r)
	}
	if n := testutil.CollectAndCount(reg, "loupe_hop_latency_seconds"); n != 1 {
		t.Errorf("%d histograms, want 1", n)
	}
	if n := testutil.CollectAndCount(reg, "loupe_hop_span_requests_total"); n != 4 {
		t.Errorf("%d span outcome counters, want 4", n)
	}
}
