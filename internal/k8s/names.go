// Package k8s names the addresses of a Kubernetes node's traffic: which
// pod, workload, service or node an IP address belonged to at the time a
// flow record was counted.
//
// It watches the API server through client-go shared informers (watch.go):
// the pods of this node (a field selector on spec.nodeName), and cluster
// wide the services, their EndpointSlices, the nodes, and the metadata alone
// of the ReplicaSets and Jobs that name a pod's workload. A transform strips
// every object to the few fields used before the informer stores it, so the
// cache stays small (bench/k8s measures it).
//
// Every address a watched object holds goes into a history (history.go):
// the holders of each address with the time range in which each held it.
// Pod IPs are reused within seconds, so a record is resolved by its address
// and its own time, never by the address alone: a record counted before a
// pod was deleted names that pod even when a new pod holds the address by
// the time the record is resolved.
//
// Without a cluster (no kubeconfig given and no in-cluster configuration),
// the resolver is off: every lookup returns the zero Names and the agent
// runs as it does without Kubernetes.
package k8s

import "fmt"

// Kind says what an address was at a time.
type Kind uint8

const (
	// KindNone: nothing is known, because enrichment is off. Records keep
	// their addresses alone.
	KindNone Kind = iota
	// KindPod: a pod's address. Namespace and Pod are set; Workload when
	// the pod runs on this node (its owners are watched) and Service when
	// the pod is an endpoint of a service.
	KindPod
	// KindService: a service's ClusterIP, external IP or load-balancer
	// address. Namespace and Service are set.
	KindService
	// KindNode: an address of a node, including every hostNetwork pod on
	// it. Node is set.
	KindNode
	// KindHost: an address of this machine that no node claims (a CNI
	// bridge's gateway, loopback, a Docker bridge). Node is this node's
	// name when it is known.
	KindHost
	// KindExternal: none of the above. An address some pod held before the
	// record's time, or after it, is external at that time too.
	KindExternal
)

var kindNames = [...]string{"", "pod", "service", "node", "host", "external"}

// String is the kind's name as it appears in outputs: "" for KindNone.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Names are the Kubernetes names of one address at one time. The field
// names follow the record fields they fill (src_namespace, src_pod,
// src_workload, src_workload_kind, src_service, src_node and the same with
// dst_); an unknown name is "".
type Names struct {
	Kind      Kind
	Namespace string
	Pod       string
	// WorkloadKind is the kind of the pod's top owner: Deployment,
	// StatefulSet, DaemonSet, CronJob, Job, ReplicaSet (one no Deployment
	// owns), or the kind of any other controller. Empty for a pod that no
	// controller owns.
	WorkloadKind string
	Workload     string
	// Service is the service whose address this is, or for a pod the
	// service it is an endpoint of (the one whose port matches when
	// resolved with a port, else the first by name).
	Service string
	// Node is the node the pod runs on, or the node whose address this is.
	Node string
}

// Known reports whether n names something: a pod, a service or a node.
func (n Names) Known() bool {
	return n.Kind == KindPod || n.Kind == KindService || n.Kind == KindNode
}
