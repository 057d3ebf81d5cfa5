package k8s

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// strip is the informers' transform: it replaces each object by a copy with
// the fields this package reads and nothing else, before the informer
// stores it. A pod as the API serves it is several kilobytes (managed
// fields, the containers' specs and statuses, annotations); what is kept is
// a few hundred bytes. Each copy is a fresh allocation, so nothing of the
// decoded object stays reachable. It is idempotent, as client-go asks: a
// stripped object strips to an equal one.
//
// Objects of other types (a tombstone of a deleted object, which carries
// the object as last stored, thus already stripped) pass through.
func strip(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return stripPod(o), nil
	case *corev1.Service:
		return stripService(o), nil
	case *corev1.Node:
		return stripNode(o), nil
	case *discoveryv1.EndpointSlice:
		return stripEndpointSlice(o), nil
	case *metav1.PartialObjectMetadata:
		return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: stripMeta(o.ObjectMeta)}, nil
	}
	return obj, nil
}

// stripMeta keeps an object's identity, its creation and deletion times,
// and its controller reference alone among its owners.
func stripMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
	}
	if ref := metav1.GetControllerOfNoCopy(&m); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: ref.APIVersion,
			Kind:       ref.Kind,
			Name:       ref.Name,
			UID:        ref.UID,
			Controller: ref.Controller,
		}}
	}
	return out
}

func stripPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: stripMeta(p.ObjectMeta),
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{
			Phase:     p.Status.Phase,
			PodIP:     p.Status.PodIP,
			PodIPs:    p.Status.PodIPs,
			StartTime: p.Status.StartTime,
		},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
			break
		}
	}
	return out
}

func stripService(s *corev1.Service) *corev1.Service {
	out := &corev1.Service{
		ObjectMeta: stripMeta(s.ObjectMeta),
		Spec: corev1.ServiceSpec{
			Type:        s.Spec.Type,
			ClusterIP:   s.Spec.ClusterIP,
			ClusterIPs:  s.Spec.ClusterIPs,
			ExternalIPs: s.Spec.ExternalIPs,
		},
	}
	for _, p := range s.Spec.Ports {
		if p.NodePort != 0 {
			out.Spec.Ports = append(out.Spec.Ports, corev1.ServicePort{Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort})
		}
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: in.IP})
		}
	}
	return out
}

func stripNode(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{ObjectMeta: stripMeta(n.ObjectMeta)}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			out.Status.Addresses = append(out.Status.Addresses, a)
		}
	}
	return out
}

func stripEndpointSlice(e *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  stripMeta(e.ObjectMeta),
		AddressType: e.AddressType,
		Ports:       make([]discoveryv1.EndpointPort, 0, len(e.Ports)),
		Endpoints:   make([]discoveryv1.Endpoint, 0, len(e.Endpoints)),
	}
	if svc := e.Labels[discoveryv1.LabelServiceName]; svc != "" {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	}
	for _, p := range e.Ports {
		out.Ports = append(out.Ports, discoveryv1.EndpointPort{Port: p.Port, Protocol: p.Protocol})
	}
	for _, ep := range e.Endpoints {
		s := discoveryv1.Endpoint{Addresses: ep.Addresses, NodeName: ep.NodeName}
		if r := ep.TargetRef; r != nil {
			s.TargetRef = &corev1.ObjectReference{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
		}
		out.Endpoints = append(out.Endpoints, s)
	}
	return out
}
