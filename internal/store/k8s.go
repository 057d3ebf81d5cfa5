package store

import (
	"cmp"
	"fmt"
	"strings"
	"sync"

	"loupe/internal/flow"
)

// The Kubernetes names in queries: the --namespace and --workload filters,
// and Top's groupings by namespace, workload and service. The names are
// columns of indices plus one into the segment's strings dictionary
// (format.go), so both work on dictionary entries: a filter becomes one
// bool per entry, a group one id per distinct tuple of entries in a
// segment.

// ParseWorkload splits a workload filter, "NAME" or "NS/NAME", into its
// namespace ("" for any) and its name.
func ParseWorkload(s string) (ns, name string, err error) {
	ns, name, found := strings.Cut(s, "/")
	if !found {
		ns, name = "", s
	}
	if name == "" || found && ns == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("workload %q: want NAME or NAMESPACE/NAME", s)
	}
	return ns, name, nil
}

// nameFilter is Query.Namespace and Query.Workload for one segment: per
// entry of its strings dictionary (index plus one, as the columns hold
// them; 0, no name, never matches), whether it is the namespace, the
// workload's name, the workload's namespace.
type nameFilter struct {
	ns, wl, wlNS []bool
}

// nameFilter returns the filter of the names for s, and ok=false if no
// record of s can match (the names are not in its dictionary).
func (c *compiled) nameFilter(s *segment) (f *nameFilter, ok bool, err error) {
	need := []int{bNames, cSrcNamespace, cDstNamespace}
	if c.workload != "" {
		need = append(need, cSrcWorkload, cDstWorkload)
	}
	if err := s.verify(need...); err != nil {
		return nil, false, err
	}
	names, err := s.nameDict()
	if err != nil {
		return nil, false, err
	}
	for _, col := range need[1:] {
		if err := s.checkIndex(col, len(names)+1); err != nil {
			return nil, false, err
		}
	}
	mask := func(want string) ([]bool, bool) {
		m := make([]bool, len(names)+1)
		some := false
		for i, n := range names {
			m[i+1] = n == want
			some = some || m[i+1]
		}
		return m, some
	}
	f = &nameFilter{}
	if c.namespace != "" {
		if f.ns, ok = mask(c.namespace); !ok {
			return nil, false, nil
		}
	}
	if c.workload != "" {
		if f.wl, ok = mask(c.workload); !ok {
			return nil, false, nil
		}
		if c.workloadNS != "" {
			if f.wlNS, ok = mask(c.workloadNS); !ok {
				return nil, false, nil
			}
		}
	}
	return f, true, nil
}

// match tests row i: each filter given holds at one end or the other.
func (f *nameFilter) match(s *segment, i int) bool {
	c := &s.cols
	srcNS, dstNS := sparseU32(c[cSrcNamespace], i), sparseU32(c[cDstNamespace], i)
	if f.ns != nil && !f.ns[srcNS] && !f.ns[dstNS] {
		return false
	}
	if f.wl == nil {
		return true
	}
	end := func(wlCol int, ns uint32) bool {
		return f.wl[sparseU32(c[wlCol], i)] && (f.wlNS == nil || f.wlNS[ns])
	}
	return end(cSrcWorkload, srcNS) || end(cDstWorkload, dstNS)
}

// K8sGroup is one end of a group of Top by names (ByNamespace,
// ByWorkload, ByService). An end with the name grouped by has its
// namespace and that name (Kind zero: a pod and a service of one
// namespace are one namespace); an end without it is grouped by its
// namespace if it has one, and its kind: a bare pod under ByWorkload, a
// pod no service selects under ByService. An end with neither (host,
// external, a node) is grouped by its kind alone, and a record without
// names under the zero K8sGroup.
type K8sGroup struct {
	Kind      flow.K8sKind
	Namespace string
	// Name is the workload's (ByWorkload) or the service's (ByService).
	Name string
	// WorkloadKind is the workload's kind (ByWorkload): two workloads of
	// one name and namespace but different kinds are two groups.
	WorkloadKind string
}

func (g *K8sGroup) compare(o *K8sGroup) int {
	return cmp.Or(cmp.Compare(g.Kind, o.Kind), cmp.Compare(g.Namespace, o.Namespace), cmp.Compare(g.Name, o.Name),
		cmp.Compare(g.WorkloadKind, o.WorkloadKind))
}

// isNames reports whether g groups by Kubernetes names.
func (g GroupBy) isNames() bool { return g >= ByNamespace && g <= ByService }

// endCols are the columns of one end's names that Top reads.
type endCols struct{ kind, ns, workload, workloadKind, service int }

var k8sEnds = [2]endCols{
	{cSrcKind, cSrcNamespace, cSrcWorkload, cSrcWorkloadKind, cSrcService},
	{cDstKind, cDstNamespace, cDstWorkload, cDstWorkloadKind, cDstService},
}

// k8sTopCols are the blocks Top by names reads.
var k8sTopCols = []int{bNames, cSrcKind, cSrcNamespace, cSrcWorkload, cSrcWorkloadKind, cSrcService,
	cDstKind, cDstNamespace, cDstWorkload, cDstWorkloadKind, cDstService}

// checkNames checks the name columns' indices of s against its strings
// dictionary.
func checkNames(s *segment) error {
	names, err := s.nameDict()
	if err != nil {
		return err
	}
	for _, col := range k8sTopCols[1:] {
		if isOptDictCol(col) {
			if err := s.checkIndex(col, len(names)+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// nameGroups gives every distinct K8sGroup of a query one id, shared by
// the workers; a group of Top is the pair of its ends' ids.
type nameGroups struct {
	mu   sync.Mutex
	ids  map[K8sGroup]uint32
	list []K8sGroup
}

func (g *nameGroups) id(k K8sGroup) uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ids == nil {
		g.ids = map[K8sGroup]uint32{}
	}
	id, ok := g.ids[k]
	if !ok {
		id = uint32(len(g.list))
		g.ids[k] = id
		g.list = append(g.list, k)
	}
	return id
}

func (g *nameGroups) get(id uint32) K8sGroup {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.list[id]
}

// nameCache maps one segment's ends, as its columns hold them (the kind
// and dictionary indices), to query-wide ids: the shared table is
// consulted once per distinct end per segment, not per record. Its own
// table is open addressing on the four indices, which a record looks up
// twice (each end) in every pass: a Go map hashed them as bytes, which
// took half the time of a name grouping.
type nameCache struct {
	names []string
	slots []endSlot
	shift uint
	used  int
	// bare: the segment holds none of the names the grouping reads, at
	// either end (a host without Kubernetes): every record's group is
	// group, found once.
	bare  bool
	group uint64
}

type endSlot struct {
	k  [4]uint32
	id uint32 // id+1; 0 marks an empty slot
}

// reset readies the cache for s, whose names check verified, for st's
// grouping.
func (nc *nameCache) reset(s *segment, st *topState) {
	nc.names, _ = s.nameDict()
	if nc.slots == nil {
		nc.slots, nc.shift = make([]endSlot, 1<<8), 64-8
	} else {
		clear(nc.slots)
	}
	nc.used, nc.bare = 0, false
	c := &s.cols
	for _, e := range k8sEnds {
		cols := []int{e.kind, e.ns}
		switch st.by {
		case ByWorkload:
			cols = append(cols, e.workload, e.workloadKind)
		case ByService:
			cols = append(cols, e.service)
		}
		for _, col := range cols {
			if len(c[col]) > 0 {
				return
			}
		}
	}
	// Every column read is absent, which reads as zeros in every row.
	nc.group = st.nameGroup(s, 0, nc)
	nc.bare = true
}

func endHash(k *[4]uint32) uint64 {
	return (uint64(k[0])|uint64(k[1])<<32)*hashMul ^ (uint64(k[2])|uint64(k[3])<<32)*partMul
}

// find returns the slot of k: its own, or the empty one it would take.
func (nc *nameCache) find(k *[4]uint32) *endSlot {
	mask := uint64(len(nc.slots) - 1)
	for h := endHash(k) >> nc.shift; ; h = (h + 1) & mask {
		if sl := &nc.slots[h]; sl.id == 0 || sl.k == *k {
			return sl
		}
	}
}

// put adds k, not in the cache, as id.
func (nc *nameCache) put(k *[4]uint32, id uint32) {
	if 4*(nc.used+1) > 3*len(nc.slots) {
		old := nc.slots
		nc.slots, nc.shift = make([]endSlot, 2*len(old)), nc.shift-1
		for _, sl := range old {
			if sl.id != 0 {
				*nc.find(&sl.k) = sl
			}
		}
	}
	*nc.find(k) = endSlot{*k, id + 1}
	nc.used++
}

// name is the string of an index plus one ("" for 0).
func (nc *nameCache) name(x uint32) string {
	if x == 0 || int(x) > len(nc.names) {
		return ""
	}
	return nc.names[x-1]
}

// nameGroup returns the group key of row i of s: its source's end id,
// then its destination's.
func (st *topState) nameGroup(s *segment, i int, nc *nameCache) uint64 {
	if nc.bare {
		return nc.group
	}
	return uint64(st.endID(s, i, nc, &k8sEnds[0]))<<32 | uint64(st.endID(s, i, nc, &k8sEnds[1]))
}

func (st *topState) endID(s *segment, i int, nc *nameCache, e *endCols) uint32 {
	c := &s.cols
	k := [4]uint32{uint32(sparseU8(c[e.kind], i)), sparseU32(c[e.ns], i)}
	if st.by == ByWorkload {
		k[2], k[3] = sparseU32(c[e.workload], i), sparseU32(c[e.workloadKind], i)
	} else if st.by == ByService {
		k[2] = sparseU32(c[e.service], i)
	}
	if sl := nc.find(&k); sl.id != 0 {
		return sl.id - 1
	}
	g := K8sGroup{Kind: flow.K8sKind(k[0]), Namespace: nc.name(k[1])}
	if name := nc.name(k[2]); name != "" {
		g = K8sGroup{Namespace: g.Namespace, Name: name, WorkloadKind: nc.name(k[3])}
	} else if st.by == ByNamespace && g.Namespace != "" {
		g.Kind = 0
	}
	id := st.names.id(g)
	nc.put(&k, id)
	return id
}
