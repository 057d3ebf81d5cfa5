package flows

import (
	"context"
	"net/netip"
	"time"

	"loupe/internal/export"
	"loupe/internal/flow"
	"loupe/internal/k8s"
)

// Namer names addresses by (address, time) and host-side interfaces by
// the pod behind them: the Kubernetes resolver (k8s.Resolver).
type Namer interface {
	ResolveEndpoint(addr netip.Addr, port uint16, proto uint8, t time.Time) k8s.Names
	IfaceOwner(ifindex int) k8s.Names
}

// SetNamer makes the unit put the Kubernetes names of n on every record
// it evicts, before any sink sees it. Call it before Open, and only with a
// resolver that watches a cluster: without one, records go to the sinks
// untouched.
func (u *Unit) SetNamer(n Namer) { u.namer = n }

// namingOutput is the evictor's output when the unit has a namer: it
// names each batch's records, then hands them to the sinks. Naming here,
// at eviction, resolves each record by its own time while the history
// still holds it.
type namingOutput struct {
	*export.Fanout
	namer Namer
	// ifaces are the pods of the interfaces named in this batch: one
	// lookup per interface, not per record.
	ifaces map[uint32]k8s.Names
}

func newNamingOutput(f *export.Fanout, n Namer) *namingOutput {
	return &namingOutput{Fanout: f, namer: n, ifaces: map[uint32]k8s.Names{}}
}

// Write names the records of batch, then writes them to the sinks.
func (o *namingOutput) Write(ctx context.Context, batch []flow.Record) error {
	clear(o.ifaces)
	for i := range batch {
		o.name(&batch[i])
	}
	return o.Fanout.Write(ctx, batch)
}

// name gives r its names: each end's as its address was at r's last
// packet (the record's time: a pod deleted since, its address given to
// another, still names r), with the port for a service or node port of
// TCP, UDP and SCTP; and the pod behind its interface, as it is now.
func (o *namingOutput) name(r *flow.Record) {
	if !r.IsIP() && r.IfIndex == 0 {
		return
	}
	k := &flow.K8s{}
	if r.IsIP() {
		var sp, dp uint16
		if r.PortKind() == flow.TransportPorts {
			sp, dp = r.SrcPort, r.DstPort
		}
		k.Src = end(o.namer.ResolveEndpoint(r.SrcIP(), sp, r.Proto, r.LastSeen))
		k.Dst = end(o.namer.ResolveEndpoint(r.DstIP(), dp, r.Proto, r.LastSeen))
	}
	if r.IfIndex != 0 {
		p, ok := o.ifaces[r.IfIndex]
		if !ok {
			p = o.namer.IfaceOwner(int(r.IfIndex))
			o.ifaces[r.IfIndex] = p
		}
		k.IfacePod, k.IfaceNamespace = p.Pod, p.Namespace
	}
	if *k != (flow.K8s{}) {
		r.K8s = k
	}
}

// end converts the resolver's names into a record's: the kinds are
// numbered alike.
func end(n k8s.Names) flow.K8sEnd {
	return flow.K8sEnd{Kind: flow.K8sKind(n.Kind), Namespace: n.Namespace, Pod: n.Pod, Workload: n.Workload,
		WorkloadKind: n.WorkloadKind, Service: n.Service, Node: n.Node}
}
