package promflow

import (
	"log/slog"
	"net/netip"
	"testing"

	"loupe/internal/flow"
)

// TestNamespaceWorkloadLabels: the traffic through a pod's veth is that
// pod's, whichever way it goes; a record on another interface is its
// source pod's, else its destination pod's; a record of no pod is
// "none"; and the labels fold into the cap as every label set does.
func TestNamespaceWorkloadLabels(t *testing.T) {
	web := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "shop", Pod: "web-1", Workload: "web", WorkloadKind: "Deployment"}
	db := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "data", Pod: "pg-0", Workload: "pg", WorkloadKind: "StatefulSet"}
	ext := flow.K8sEnd{Kind: flow.K8sExternal}
	rec := func(iface string, bytes uint64, k *flow.K8s) flow.Record {
		return flow.Record{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: flow.ProtoTCP, SrcPort: 1, DstPort: 2,
			SrcAddr: netip.MustParseAddr("10.0.0.1").As16(), DstAddr: netip.MustParseAddr("10.0.0.2").As16()},
			Iface: iface, Packets: 1, Bytes: bytes, Segments: 1, WireBytes: bytes, K8s: k}
	}
	s := New(Options{Keys: []Key{KeyNamespace, KeyWorkload}, Logger: slog.New(slog.DiscardHandler)})
	batch := []flow.Record{
		rec("lxc-web", 100, &flow.K8s{Src: web, Dst: db, IfacePod: "web-1", IfaceNamespace: "shop"}),
		rec("lxc-web", 10, &flow.K8s{Src: db, Dst: web, IfacePod: "web-1", IfaceNamespace: "shop"}), // the reply: still web's
		rec("eth0", 1000, &flow.K8s{Src: ext, Dst: db}),
		rec("eth0", 7, &flow.K8s{Src: ext, Dst: ext}),
		rec("eth0", 3, nil),
	}
	if err := s.Write(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	got := gather(t, s)
	for series, want := range map[string]float64{
		`loupe_traffic_bytes_total{direction="ingress",iface="lxc-web",namespace="shop",proto="tcp",workload="web"}`: 110,
		`loupe_traffic_bytes_total{direction="ingress",iface="eth0",namespace="data",proto="tcp",workload="pg"}`:     1000,
		`loupe_traffic_bytes_total{direction="ingress",iface="eth0",namespace="none",proto="tcp",workload="none"}`:   10,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	if n := got["loupe_traffic_series{}"]; n != 3 {
		t.Errorf("%v series, want 3", n)
	}

	// Past the cap, new workloads fold: 2 series and the 2 fold series.
	capped := New(Options{MaxSeries: 4, Keys: []Key{KeyWorkload}, Logger: slog.New(slog.DiscardHandler)})
	for i := range 10 {
		w := web
		w.Workload = string(rune('a' + i))
		if err := capped.Write(t.Context(), []flow.Record{rec("lxc", 1, &flow.K8s{Src: w})}); err != nil {
			t.Fatal(err)
		}
	}
	got = gather(t, capped)
	if n := got["loupe_traffic_series{}"]; n > 4 {
		t.Errorf("%v series past a cap of 4", n)
	}
	if f := got["loupe_traffic_series_folded_total{}"]; f != 8 {
		t.Errorf("%v records folded, want 8", f)
	}
}
