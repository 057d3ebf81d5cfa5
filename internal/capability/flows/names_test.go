package flows

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"loupe/internal/export"
	"loupe/internal/flow"
	"loupe/internal/k8s"
)

// reusedAddr is a namer whose 10.1.0.5 was pod old's until cut and pod
// new's from then on (an IP handed to a pod of another workload); every
// other address is external, and interface 7 is old's veth.
type reusedAddr struct {
	cut    time.Time
	ifaces int // IfaceOwner calls
}

func (n *reusedAddr) ResolveEndpoint(a netip.Addr, port uint16, proto uint8, t time.Time) k8s.Names {
	if a != netip.MustParseAddr("10.1.0.5") {
		return k8s.Names{Kind: k8s.KindExternal}
	}
	if t.Before(n.cut) {
		return k8s.Names{Kind: k8s.KindPod, Namespace: "jobs", Pod: "old", Workload: "batch", WorkloadKind: "CronJob", Node: "n1"}
	}
	s := ""
	if port == 8080 && proto == flow.ProtoTCP {
		s = "web"
	}
	return k8s.Names{Kind: k8s.KindPod, Namespace: "shop", Pod: "new", Workload: "web", WorkloadKind: "Deployment", Service: s, Node: "n1"}
}

func (n *reusedAddr) IfaceOwner(ifindex int) k8s.Names {
	n.ifaces++
	if ifindex == 7 {
		return k8s.Names{Kind: k8s.KindPod, Namespace: "shop", Pod: "new"}
	}
	return k8s.Names{}
}

type memSink struct{ got []flow.Record }

func (m *memSink) Name() string { return "mem" }
func (m *memSink) Write(_ context.Context, b []flow.Record) error {
	m.got = append(m.got, b...)
	return nil
}
func (m *memSink) Flush(context.Context) error { return nil }
func (m *memSink) Close() error                { return nil }

// TestNamingOutput: each record is named as its addresses were at its
// own last packet, not when it is written: a record of the address's
// old pod, evicted after the address went to a new pod, names the old
// one. The port picks the service; the interface's pod is asked once a
// batch; a non-IP record on no interface gets no names.
func TestNamingOutput(t *testing.T) {
	cut := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	n := &reusedAddr{cut: cut}
	sink := &memSink{}
	out := newNamingOutput(export.NewFanout(slog.New(slog.DiscardHandler), sink), n)
	rec := func(last time.Time, iface uint32) flow.Record {
		return flow.Record{Key: flow.Key{EtherType: flow.EtherTypeIPv4, Proto: flow.ProtoTCP, SrcPort: 40000, DstPort: 8080, IfIndex: iface,
			SrcAddr: netip.MustParseAddr("192.0.2.1").As16(), DstAddr: netip.MustParseAddr("10.1.0.5").As16()},
			Packets: 1, FirstSeen: last.Add(-time.Second), LastSeen: last}
	}
	batch := []flow.Record{rec(cut.Add(-time.Millisecond), 7), rec(cut, 7), rec(cut.Add(time.Second), 3),
		{Key: flow.Key{EtherType: 0x0806}, Packets: 1}}
	if err := out.Write(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	if len(sink.got) != 4 {
		t.Fatalf("%d records", len(sink.got))
	}
	ext := flow.K8sEnd{Kind: flow.K8sExternal}
	old := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "jobs", Pod: "old", Workload: "batch", WorkloadKind: "CronJob", Node: "n1"}
	cur := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "shop", Pod: "new", Workload: "web", WorkloadKind: "Deployment", Service: "web", Node: "n1"}
	for i, want := range []*flow.K8s{
		{Src: ext, Dst: old, IfacePod: "new", IfaceNamespace: "shop"},
		{Src: ext, Dst: cur, IfacePod: "new", IfaceNamespace: "shop"},
		{Src: ext, Dst: cur},
		nil,
	} {
		got := sink.got[i].K8s
		switch {
		case want == nil && got != nil:
			t.Errorf("record %d: names %+v, want none", i, *got)
		case want != nil && (got == nil || *got != *want):
			t.Errorf("record %d: names %+v, want %+v", i, got, *want)
		}
	}
	if n.ifaces != 2 {
		t.Errorf("%d interface lookups for 2 interfaces", n.ifaces)
	}
}
