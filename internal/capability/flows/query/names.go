package query

import (
	"strconv"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// How the tables print Kubernetes names. A pod, the end a reader looks
// for most, is namespace/pod as kubectl writes it; anything else carries
// its kind in parentheses, so that a service, a node or an address outside
// the cluster is never taken for a pod of that name: "shop/web
// (service)", "node-1 (node)", "(host)", "(external)". The address stays
// in its own column beside the name: the port, and which of a pod's
// addresses, are only there.

// endName is the name cell of one end of a record: "" without names.
func endName(e *flow.K8sEnd) string {
	switch e.Kind {
	case flow.K8sNone:
		return ""
	case flow.K8sPod:
		if e.Pod != "" {
			return e.Namespace + "/" + e.Pod
		}
	case flow.K8sService:
		if e.Service != "" {
			return e.Namespace + "/" + e.Service + " (service)"
		}
	case flow.K8sNode:
		if e.Node != "" {
			return e.Node + " (node)"
		}
	}
	return "(" + e.Kind.String() + ")"
}

// groupName is the cell of one end of a `top` group by names: the
// namespace (--by namespace), namespace/workload with the workload's kind
// (--by workload), namespace/service (--by service); an end without that
// name its namespace and kind ("shop (pod)": a bare pod, a pod no service
// selects), or its kind alone ("(host)", "(external)", "(node)"); a record
// without names "-".
func groupName(g *store.K8sGroup) string {
	switch {
	case g.Name != "" && g.WorkloadKind != "":
		return g.Namespace + "/" + g.Name + " (" + g.WorkloadKind + ")"
	case g.Name != "":
		return g.Namespace + "/" + g.Name
	case g.Namespace != "" && g.Kind != flow.K8sNone:
		return g.Namespace + " (" + g.Kind.String() + ")"
	case g.Namespace != "":
		return g.Namespace
	case g.Kind != flow.K8sNone:
		return "(" + g.Kind.String() + ")"
	}
	return "-"
}

// appendGroupJSON appends the fields of one end of a group by names, as a
// record names them (prefix "src" or "dst"): kind when the end is grouped
// by it, namespace, and the workload (name and kind) or service; a field
// the group has no value for is left out, as a record leaves it out.
func appendGroupJSON(b []byte, prefix string, by store.GroupBy, g *store.K8sGroup) []byte {
	str := func(b []byte, name, v string) []byte {
		if v == "" {
			return b
		}
		b = append(b, '"')
		b = append(b, prefix...)
		b = append(b, '_')
		b = append(b, name...)
		b = append(b, `":`...)
		b = strconv.AppendQuote(b, v) // as a record's JSON writes its strings
		return append(b, ',')
	}
	if g.Kind != flow.K8sNone {
		b = str(b, "kind", g.Kind.String())
	}
	b = str(b, "namespace", g.Namespace)
	switch by {
	case store.ByWorkload:
		b = str(b, "workload", g.Name)
		b = str(b, "workload_kind", g.WorkloadKind)
	case store.ByService:
		b = str(b, "service", g.Name)
	}
	return b
}
