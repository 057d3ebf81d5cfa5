package hop

import (
	"slices"
	"time"

	"loupe/internal/flow"
)

// Iface is what the matcher needs to know of an interface.
type Iface struct {
	Name string
	// Kind is the link kind as netlink names it: "veth", "vxlan",
	// "device" (a physical NIC), "bridge", ...
	Kind string
	// Pod is the pod behind a host-side veth, "namespace/name", where
	// the agent knows it (Kubernetes names on); "" otherwise.
	Pod string
}

// Resolver names interfaces by index. The agent's resolver asks netlink
// (NetlinkResolver); tests give a map.
type Resolver interface {
	Iface(ifindex uint32) Iface
}

// TimedResolver is a Resolver that can be handed the time instead of
// reading the clock, for a cache: the matcher names every hook of a
// record with one reading, which it takes for the record anyway (the
// clock is read through the vDSO, yet each reading took a few percent of
// the agent's CPU under load).
type TimedResolver interface {
	Resolver
	IfaceAt(ifindex uint32, now time.Time) Iface
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ifindex uint32) Iface

func (f ResolverFunc) Iface(ifindex uint32) Iface { return f(ifindex) }

// PathDirection says which way a path went, from the hooks it crossed, in
// time order:
//
//   - it starts at a veth's ingress, seen unencapsulated: "out". The host
//     side of a pod's veth receives what the pod sends, so the segment
//     left a pod.
//   - else it ends at a veth's egress, seen unencapsulated: "in". The host
//     side transmits into the pod.
//   - else (no pod veth on the path: a node's own traffic, or hooks only
//     on the overlay and the NIC) it is "out" when the first hook is an
//     egress (the host sends) and "in" when it is an ingress (it
//     receives).
//
// Edges: a segment from one pod to another pod of the same node starts at
// a veth's ingress and is "out" (it left a pod first). An encapsulated
// sight (Tunneled) is never a pod's veth: on a node whose underlay is a
// veth (test setups, some nested clusters) the underlay's ingress would
// otherwise look like a pod sending. A node whose uplink is a veth with no
// overlay at all cannot be told from a pod's veth by its kind; its paths
// follow the same rules, so traffic arriving there reads "out".
func PathDirection(path []Point) string {
	if len(path) == 0 {
		return Out
	}
	first, last := path[0], path[len(path)-1]
	podVeth := func(p Point, hook flow.Direction) bool {
		return p.Kind == "veth" && !p.Tunneled && p.Hook == hook.String()
	}
	switch {
	case podVeth(first, flow.Ingress):
		return Out
	case podVeth(last, flow.Egress):
		return In
	case first.Hook == flow.Egress.String():
		return Out
	}
	return In
}

// Hops are the consecutive pairs of path, each with the path's direction.
func Hops(path []Point) []Hop {
	if len(path) < 2 {
		return nil
	}
	return appendHops(make([]Hop, 0, len(path)-1), path)
}

// appendHops appends the hops of a path of at least two points to hops.
func appendHops(hops []Hop, path []Point) []Hop {
	dir := PathDirection(path)
	at := len(hops)
	hops = slices.Grow(hops, len(path)-1)[:at+len(path)-1]
	for i := 1; i < len(path); i++ {
		// Field by field in place: see Matcher.record.
		h, from, to := &hops[at+i-1], &path[i-1], &path[i]
		*h = Hop{}
		h.FromIface, h.ToIface, h.Direction = from.Iface, to.Iface, dir
		h.LatencyNs = int64(to.TimeNs - from.TimeNs)
		h.FromPod, h.ToPod = from.Pod, to.Pod
	}
	return hops
}
