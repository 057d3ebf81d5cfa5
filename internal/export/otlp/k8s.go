package otlp

import (
	"google.golang.org/protobuf/encoding/protowire"

	"loupe/internal/flow"
)

// The Kubernetes names of a record's ends go under OpenTelemetry's
// Kubernetes semantic conventions (k8s.namespace.name, k8s.pod.name,
// k8s.deployment.name, ..., k8s.node.name) prefixed with source. or
// destination.: the conventions define them for the one resource a
// telemetry item comes from, and a flow has two ends, so each end's
// names are the conventions' names under the prefix the network
// conventions give its address (source.address, destination.address).
// Stripping the prefix gives the conventions' attribute. A workload's
// name goes in the attribute of its kind (source.k8s.deployment.name);
// a kind the conventions do not name (a custom controller) in
// loupe.source.k8s.workload.name. What the conventions have no attribute
// for is Loupe's: each end's kind (pod, service, node, host, external),
// its workload's kind, and the interface's pod.

// k8sKeyBytes bounds what one name's attribute adds to a record beyond the
// name's bytes: its key (under 48 bytes) and the framing around both.
const k8sKeyBytes = 64

// k8sBound bounds what k's attributes add to a log record.
func k8sBound(k *flow.K8s) int {
	n := 2 * k8sKeyBytes // the kinds
	for _, e := range [...]*flow.K8sEnd{&k.Src, &k.Dst} {
		n += len(e.Namespace) + len(e.Pod) + len(e.Workload) + len(e.WorkloadKind) + len(e.Service) + len(e.Node) + 6*k8sKeyBytes
	}
	return n + len(k.IfacePod) + len(k.IfaceNamespace) + 2*k8sKeyBytes
}

// k8sEndKeys are the pre-encoded keys of one end's attributes.
type k8sEndKeys struct {
	kind, namespace, pod, workloadKind, service, node []byte
	// workload by the workload's kind; other for the kinds the
	// conventions do not name.
	workload      map[string][]byte
	otherWorkload []byte
}

type k8sKeys struct {
	src, dst                k8sEndKeys
	ifacePod, ifaceNamspace []byte
}

func encodeKey(name string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, fKeyValueKey, protowire.BytesType), name)
}

func newK8sKeys() k8sKeys {
	end := func(prefix string) k8sEndKeys {
		k := k8sEndKeys{
			kind:          encodeKey("loupe." + prefix + ".k8s.kind"),
			namespace:     encodeKey(prefix + ".k8s.namespace.name"),
			pod:           encodeKey(prefix + ".k8s.pod.name"),
			workloadKind:  encodeKey("loupe." + prefix + ".k8s.workload.kind"),
			service:       encodeKey(prefix + ".k8s.service.name"),
			node:          encodeKey(prefix + ".k8s.node.name"),
			workload:      map[string][]byte{},
			otherWorkload: encodeKey(flow.WorkloadAttribute(prefix, "")),
		}
		for _, kind := range flow.SemconvWorkloadKinds() {
			k.workload[kind] = encodeKey(flow.WorkloadAttribute(prefix, kind))
		}
		return k
	}
	return k8sKeys{src: end("source"), dst: end("destination"),
		ifacePod: encodeKey("loupe.interface.k8s.pod.name"), ifaceNamspace: encodeKey("loupe.interface.k8s.namespace.name")}
}

// appendK8s appends the attributes of the names r has; an unknown name
// has none.
func (e *logEncoder) appendK8s(b []byte, k *flow.K8s) []byte {
	str := func(b []byte, key []byte, v string) []byte {
		if v == "" {
			return b
		}
		return appendStr(b, key, v)
	}
	for _, end := range [...]struct {
		keys *k8sEndKeys
		n    *flow.K8sEnd
	}{{&e.k8s.src, &k.Src}, {&e.k8s.dst, &k.Dst}} {
		keys, n := end.keys, end.n
		if n.Kind != flow.K8sNone {
			b = appendStr(b, keys.kind, n.Kind.String())
		}
		b = str(b, keys.namespace, n.Namespace)
		b = str(b, keys.pod, n.Pod)
		if n.Workload != "" {
			key, ok := keys.workload[n.WorkloadKind]
			if !ok {
				key = keys.otherWorkload
			}
			b = appendStr(b, key, n.Workload)
		}
		b = str(b, keys.workloadKind, n.WorkloadKind)
		b = str(b, keys.service, n.Service)
		b = str(b, keys.node, n.Node)
	}
	b = str(b, e.k8s.ifacePod, k.IfacePod)
	return str(b, e.k8s.ifaceNamspace, k.IfaceNamespace)
}
