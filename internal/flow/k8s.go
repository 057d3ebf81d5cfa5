package flow

import "fmt"

// The Kubernetes names of a record: what its source and destination
// addresses were in the cluster at the record's time (a pod, a service, a
// node, this host, or outside the cluster), and the pod on the other end
// of its interface when that is a pod's host-side veth. The agent's
// resolver fills them at eviction (internal/k8s, through the flows unit);
// this package knows nothing of Kubernetes beyond the names.

// K8sKind says what an address was at the record's time.
type K8sKind uint8

// The kinds, numbered as internal/k8s numbers them.
const (
	// K8sNone: no names (the agent watches no cluster).
	K8sNone K8sKind = iota
	// K8sPod: a pod's address.
	K8sPod
	// K8sService: a service's cluster IP, external IP or load-balancer
	// address.
	K8sService
	// K8sNode: an address of a node (hostNetwork pods included).
	K8sNode
	// K8sHost: an address of this machine that no node claims.
	K8sHost
	// K8sExternal: none of the above.
	K8sExternal
	numK8sKinds
)

var k8sKindNames = [numK8sKinds]string{"", "pod", "service", "node", "host", "external"}

func (k K8sKind) String() string {
	if k < numK8sKinds {
		return k8sKindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseK8sKind is the inverse of K8sKind.String.
func ParseK8sKind(s string) (K8sKind, error) {
	for k := K8sPod; k < numK8sKinds; k++ {
		if k8sKindNames[k] == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown kubernetes kind %q (want pod, service, node, host or external)", s)
}

// K8sEnd are the names of one end of a flow; an unknown name is "".
type K8sEnd struct {
	Kind      K8sKind
	Namespace string
	Pod       string
	// Workload is the pod's top controller, WorkloadKind its kind
	// (Deployment, StatefulSet, DaemonSet, CronJob, Job, ReplicaSet or
	// another controller's kind).
	Workload, WorkloadKind string
	// Service is the service of a service's address, or the service a pod
	// is an endpoint of (of the flow's port where several are).
	Service string
	// Node is the pod's node, or the node whose address this is.
	Node string
}

// K8s are a record's Kubernetes names. A record's K8s is never changed
// once the record is made: copies of a record share it, as they share
// DropReasons (the setters of its fields copy it first).
type K8s struct {
	Src, Dst K8sEnd
	// IfacePod and IfaceNamespace name the pod on the other end of the
	// record's interface when it is a pod's host-side veth.
	IfacePod, IfaceNamespace string
}

// k8sCopy gives r names of its own to change: a copy of those it shares.
func (r *Record) k8sCopy() *K8s {
	k := &K8s{}
	if r.K8s != nil {
		*k = *r.K8s
	}
	r.K8s = k
	return k
}

// k8sString makes the accessors of one name: Str (a name's pointer, into
// a fresh empty string when r has no names, for reading), SetStr, and
// Applies (the name is known).
func k8sString(get func(k *K8s) *string) (str func(*Record) *string, set func(*Record, string), applies func(*Record) bool) {
	str = func(r *Record) *string {
		if r.K8s == nil {
			return new(string)
		}
		return get(r.K8s)
	}
	set = func(r *Record, s string) { *get(r.k8sCopy()) = s }
	applies = func(r *Record) bool { return r.K8s != nil && *get(r.K8s) != "" }
	return str, set, applies
}

// k8sKindField makes the accessors of an end's kind, as k8sString.
func k8sKindField(get func(k *K8s) *K8sKind) (u func(*Record) uint64, set func(*Record, uint64), applies func(*Record) bool) {
	u = func(r *Record) uint64 {
		if r.K8s == nil {
			return 0
		}
		return uint64(*get(r.K8s))
	}
	set = func(r *Record, v uint64) { *get(r.k8sCopy()) = K8sKind(v) }
	applies = func(r *Record) bool { return r.K8s != nil && *get(r.K8s) != K8sNone }
	return u, set, applies
}

// k8sKinds are the values of src_kind and dst_kind.
var k8sKinds = &Enum{
	Name: func(v uint64) string { return K8sKind(v).String() },
	Parse: func(s string) (uint64, error) {
		k, err := ParseK8sKind(s)
		return uint64(k), err
	},
	Valid: func(v uint64) bool { return v > uint64(K8sNone) && v < uint64(numK8sKinds) },
}

// k8sFields are the rows of the names in the fields table, after the
// tunnel's: one end's kind and names, the other's, then the interface's
// pod. Wire identifiers: protobuf 64-79, store kinds 46-61, Loupe's IPFIX
// elements 31-46.
func k8sFields() []Field {
	type end struct {
		prefix, otlp, ipfixName string
		get                     func(k *K8s) *K8sEnd
		proto, store, ie        int
	}
	ends := []end{
		{"src", "source", "Source", func(k *K8s) *K8sEnd { return &k.Src }, 64, 46, 31},
		{"dst", "destination", "Destination", func(k *K8s) *K8sEnd { return &k.Dst }, 71, 53, 38},
	}
	var out []Field
	for _, e := range ends {
		u, setU, appliesKind := k8sKindField(func(k *K8s) *K8sKind { return &e.get(k).Kind })
		out = append(out, Field{
			Name: e.prefix + "_kind", Type: TypeEnum, Bits: 8, Enum: k8sKinds, Applies: appliesKind, Optional: true,
			Doc: "Kubernetes: what the " + e.otlp + " address was at the record's time: `\"pod\"`, `\"service\"`, `\"node\"` " +
				"(a hostNetwork pod's is its node's), `\"host\"` (an address of this machine no node claims) or `\"external\"`; " +
				"absent when the agent watches no cluster",
			Uint: u, SetUint: setU,
			Wire: Wire{Proto: e.proto, Store: uint32(e.store), OTLP: []string{"loupe." + e.otlp + ".k8s.kind"},
				IPFIX: []IE{{ID: uint16(e.ie), Name: "loupe" + e.ipfixName + "K8sKind", Enterprise: true}}},
		})
		names := []struct {
			field, doc, otlp, ipfix string
			get                     func(n *K8sEnd) *string
		}{
			{"namespace", "its pod's or service's namespace", "k8s.namespace.name", "Namespace", func(n *K8sEnd) *string { return &n.Namespace }},
			{"pod", "its pod", "k8s.pod.name", "PodName", func(n *K8sEnd) *string { return &n.Pod }},
			{"workload", "its pod's workload, the pod's top controller (a Deployment, not its ReplicaSet; a CronJob, not its Job)",
				"", "WorkloadName", func(n *K8sEnd) *string { return &n.Workload }},
			{"workload_kind", "that workload's kind: `Deployment`, `StatefulSet`, `DaemonSet`, `CronJob`, `Job`, `ReplicaSet` " +
				"(one no Deployment owns) or another controller's kind",
				"", "WorkloadKind", func(n *K8sEnd) *string { return &n.WorkloadKind }},
			{"service", "its service: a service's address, the service its pod is an endpoint of (the one of the flow's port), or a node port's service",
				"", "ServiceName", func(n *K8sEnd) *string { return &n.Service }},
			{"node", "its pod's node, or the node whose address it is (this node's name for `host`)", "k8s.node.name", "NodeName", func(n *K8sEnd) *string { return &n.Node }},
		}
		for i, n := range names {
			str, set, applies := k8sString(func(k *K8s) *string { return n.get(e.get(k)) })
			var otlp []string
			switch n.field {
			case "workload":
				otlp = WorkloadAttributes(e.otlp)
			case "workload_kind":
				otlp = []string{"loupe." + e.otlp + ".k8s.workload.kind"}
			case "service":
				otlp = []string{e.otlp + ".k8s.service.name"}
			default:
				otlp = []string{e.otlp + "." + n.otlp}
			}
			out = append(out, Field{
				Name: e.prefix + "_" + n.field, Type: TypeString, Applies: applies, Optional: true,
				Doc: "Kubernetes, the " + e.otlp + " address at the record's time: " + n.doc + "; absent when it has none or the agent watches no cluster",
				Str: str, SetStr: set,
				Wire: Wire{Proto: e.proto + 1 + i, Store: uint32(e.store + 1 + i), OTLP: otlp,
					IPFIX: []IE{{ID: uint16(e.ie + 1 + i), Name: "loupe" + e.ipfixName + "K8s" + n.ipfix, Enterprise: true}}},
			})
		}
	}
	ifaces := []struct {
		name, doc, otlp, ipfix string
		get                    func(k *K8s) *string
	}{
		{"iface_pod", "the pod on the other end of the interface, when it is a pod's host-side veth", "loupe.interface.k8s.pod.name",
			"loupeInterfaceK8sPodName", func(k *K8s) *string { return &k.IfacePod }},
		{"iface_namespace", "that pod's namespace", "loupe.interface.k8s.namespace.name",
			"loupeInterfaceK8sNamespace", func(k *K8s) *string { return &k.IfaceNamespace }},
	}
	for i, f := range ifaces {
		str, set, applies := k8sString(f.get)
		out = append(out, Field{
			Name: f.name, Type: TypeString, Applies: applies, Optional: true,
			Doc: "Kubernetes: " + f.doc + " (as it is at eviction: an interface index is only ever the current interface's)",
			Str: str, SetStr: set,
			Wire: Wire{Proto: 78 + i, Store: uint32(60 + i), OTLP: []string{f.otlp},
				IPFIX: []IE{{ID: uint16(45 + i), Name: f.ipfix, Enterprise: true}}},
		})
	}
	return out
}

// workloadKinds are the workload kinds OpenTelemetry's semantic
// conventions name an attribute after (k8s.deployment.name, ...), in the
// attribute's spelling.
var workloadKinds = [...]struct{ kind, attr string }{
	{"Deployment", "deployment"}, {"StatefulSet", "statefulset"}, {"DaemonSet", "daemonset"},
	{"Job", "job"}, {"CronJob", "cronjob"}, {"ReplicaSet", "replicaset"},
}

// WorkloadAttribute is the OTLP attribute that carries a workload's name
// at one end (prefix "source" or "destination"): the semantic
// conventions' k8s.<kind>.name under the prefix for the kinds they name,
// else loupe.<prefix>.k8s.workload.name.
func WorkloadAttribute(prefix, kind string) string {
	for _, w := range workloadKinds {
		if w.kind == kind {
			return prefix + ".k8s." + w.attr + ".name"
		}
	}
	return "loupe." + prefix + ".k8s.workload.name"
}

// SemconvWorkloadKinds are the workload kinds the semantic conventions
// name an attribute after.
func SemconvWorkloadKinds() []string {
	out := make([]string, len(workloadKinds))
	for i, w := range workloadKinds {
		out[i] = w.kind
	}
	return out
}

// WorkloadAttributes lists every attribute WorkloadAttribute gives for a
// prefix.
func WorkloadAttributes(prefix string) []string {
	var out []string
	for _, w := range workloadKinds {
		out = append(out, WorkloadAttribute(prefix, w.kind))
	}
	return append(out, WorkloadAttribute(prefix, ""))
}

// k8sElements are the IPFIX enterprise elements of the names, 31 to 46:
// each name a string of variable length, each kind an unsigned8 (the
// numbering of K8sKind).
func k8sElements() []EnterpriseElement {
	var out []EnterpriseElement
	for _, f := range k8sFields() {
		ie := f.Wire.IPFIX[0]
		e := EnterpriseElement{ID: ie.ID, Name: ie.Name, Type: "string", Length: VariableLength, Status: Sent,
			Doc: "Kubernetes: the record's `" + f.Name + "`; absent when unknown"}
		if f.Type == TypeEnum {
			e.Type, e.Length = "unsigned8", 1
			e.Doc = "Kubernetes: the record's `" + f.Name + "`: 1 pod, 2 service, 3 node, 4 host (an address of this machine no node claims), 5 external"
		}
		out = append(out, e)
	}
	return out
}

// K8sFieldNames are the names of the Kubernetes fields, in table order.
func K8sFieldNames() []string {
	var out []string
	for _, f := range k8sFields() {
		out = append(out, f.Name)
	}
	return out
}
