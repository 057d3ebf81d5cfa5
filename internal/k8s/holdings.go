package k8s

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// holding is what one API object holds now: addresses, and for a service
// its node ports, each with what it names.
type holding struct {
	addrs map[netip.Addr]*owner
	ports map[portProto]*owner
}

// Identities of holders (owner.who): a pod is the same holder whether its
// own object or an EndpointSlice names it.
func podWho(ns, name string) string     { return "p/" + ns + "/" + name }
func serviceWho(ns, name string) string { return "s/" + ns + "/" + name }
func nodeWho(name string) string        { return "n/" + name }

// workloadFunc names a pod's workload from its controller reference.
type workloadFunc func(ns string, ref *metav1.OwnerReference) (kind, name string)

// podHolding is what a pod of this node holds: its IPs, while it runs. A
// hostNetwork pod holds nothing (its address is its node's, and names the
// node), nor does a pod that has finished: a completed Job's pod stays in
// the API with its IP in its status long after the IP went to another pod.
func podHolding(p *corev1.Pod, workload workloadFunc) holding {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return holding{}
	}
	ips := p.Status.PodIPs
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: p.Status.PodIP}}
	}
	if len(ips) == 0 {
		return holding{}
	}
	o := &owner{
		names: Names{Kind: KindPod, Namespace: p.Namespace, Pod: p.Name, Node: p.Spec.NodeName},
		who:   podWho(p.Namespace, p.Name),
	}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		o.names.WorkloadKind, o.names.Workload = workload(p.Namespace, ref)
	}
	h := holding{addrs: map[netip.Addr]*owner{}}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			h.addrs[a.Unmap()] = o
		}
	}
	return h
}

// podClaim is what a pod says of when it took its IPs: the moment its
// sandbox's network was ready (the PodReadyToStartContainers condition,
// which the kubelet sets once the CNI plugin has given the pod its
// address), and its creation, before which it held nothing.
func podClaim(p *corev1.Pod, seen int64) claim {
	c := claim{seen: seen, notBefore: unixNano(p.CreationTimestamp)}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReadyToStartContainers && cond.Status == corev1.ConditionTrue {
			c.claimed = unixNano(cond.LastTransitionTime)
		}
	}
	if c.claimed == 0 && p.Status.StartTime != nil {
		c.notBefore = max(c.notBefore, unixNano(*p.Status.StartTime))
	}
	return c
}

// serviceHolding is what a service holds: its cluster IPs, external IPs
// and load-balancer addresses, and its node ports on every node.
func serviceHolding(s *corev1.Service) holding {
	o := &owner{
		names: Names{Kind: KindService, Namespace: s.Namespace, Service: s.Name},
		who:   serviceWho(s.Namespace, s.Name),
	}
	h := holding{addrs: map[netip.Addr]*owner{}}
	add := func(ip string) {
		if a, err := netip.ParseAddr(ip); err == nil {
			h.addrs[a.Unmap()] = o
		}
	}
	ips := s.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{s.Spec.ClusterIP} // "None" for a headless service: not an address
	}
	for _, ip := range ips {
		add(ip)
	}
	for _, ip := range s.Spec.ExternalIPs {
		add(ip)
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		add(in.IP)
	}
	for _, p := range s.Spec.Ports {
		if p.NodePort > 0 && p.NodePort < 1<<16 {
			if h.ports == nil {
				h.ports = map[portProto]*owner{}
			}
			h.ports[portProto{port: uint16(p.NodePort), proto: protoNumber(p.Protocol)}] = o
		}
	}
	return h
}

// nodeHolding is what a node holds: its internal and external addresses.
func nodeHolding(n *corev1.Node) holding {
	o := &owner{names: Names{Kind: KindNode, Node: n.Name}, who: nodeWho(n.Name)}
	h := holding{addrs: map[netip.Addr]*owner{}}
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			h.addrs[ip.Unmap()] = o
		}
	}
	return h
}

// endpointSliceHolding is what an EndpointSlice says: each endpoint's
// addresses are its pod's (and that pod is an endpoint of the slice's
// service, on the slice's ports). This is how pods of other nodes, whose
// objects are not watched, get their names and node.
//
// An endpoint that is no pod (a selector-less service's manual endpoint:
// a database outside the cluster) names the service alone, as external.
func endpointSliceHolding(e *discoveryv1.EndpointSlice) holding {
	svc := e.Labels[discoveryv1.LabelServiceName]
	if svc == "" || e.AddressType == discoveryv1.AddressTypeFQDN {
		return holding{}
	}
	ports := make([]portProto, 0, len(e.Ports))
	for _, p := range e.Ports {
		if p.Port != nil && *p.Port > 0 && *p.Port < 1<<16 {
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			ports = append(ports, portProto{port: uint16(*p.Port), proto: protoNumber(proto)})
		}
	}
	h := holding{addrs: map[netip.Addr]*owner{}}
	for _, ep := range e.Endpoints {
		o := &owner{ports: ports}
		if r := ep.TargetRef; r != nil && r.Kind == "Pod" {
			ns := r.Namespace
			if ns == "" {
				ns = e.Namespace
			}
			o.names = Names{Kind: KindPod, Namespace: ns, Pod: r.Name, Service: svc}
			if ep.NodeName != nil {
				o.names.Node = *ep.NodeName
			}
			o.who = podWho(ns, r.Name)
		} else {
			o.names = Names{Kind: KindExternal, Namespace: e.Namespace, Service: svc}
			o.who = "e/" + e.Namespace + "/" + svc
		}
		for _, ip := range ep.Addresses {
			if a, err := netip.ParseAddr(ip); err == nil {
				h.addrs[a.Unmap()] = o
			}
		}
	}
	return h
}

// protoNumber is the IP protocol number of a Kubernetes protocol name.
func protoNumber(p corev1.Protocol) uint8 {
	switch strings.ToUpper(string(p)) {
	case "UDP":
		return 17
	case "SCTP":
		return 132
	}
	return 6
}

func unixNano(t metav1.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
