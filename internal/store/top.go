package store

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"loupe/internal/flow"
)

// GroupBy is what Top groups records by.
type GroupBy int

const (
	// BySrc groups by source address.
	BySrc GroupBy = iota
	// ByDst groups by destination address.
	ByDst
	// ByPair groups by (source, destination) address pair.
	ByPair
	// ByPort groups by (service port, protocol): the port of the side
	// that accepted the connection, whichever direction a record has
	// (service.go).
	ByPort
	// BySrcPort groups by (source port, protocol).
	BySrcPort
	// ByDstPort groups by (destination port, protocol).
	ByDstPort
	// ByNamespace groups by the Kubernetes namespaces of the source and
	// the destination (K8sGroup says what an end without one groups
	// under): a pair, as a record belongs to both ends, so that every
	// record counts in one group and the groups say who talks to whom.
	ByNamespace
	// ByWorkload groups by the workloads of the source and the
	// destination (namespace, kind and name), as ByNamespace.
	ByWorkload
	// ByService groups by the services of the source and the
	// destination (namespace and name), as ByNamespace.
	ByService
	numGroupBy
)

var groupNames = [numGroupBy]string{"src", "dst", "pair", "port", "src-port", "dst-port", "namespace", "workload", "service"}

func (g GroupBy) String() string {
	if g >= 0 && g < numGroupBy {
		return groupNames[g]
	}
	return fmt.Sprintf("groupby(%d)", int(g))
}

// ParseGroupBy is the inverse of GroupBy.String.
func ParseGroupBy(s string) (GroupBy, error) {
	for g := range numGroupBy {
		if g.String() == s {
			return g, nil
		}
	}
	return 0, fmt.Errorf("unknown grouping %q (want %s)", s, strings.Join(groupNames[:], ", "))
}

// byPort reports whether g groups by a port and protocol.
func (g GroupBy) byPort() bool { return g >= ByPort && g <= ByDstPort }

// TopEntry is one group of a Top answer. Only the fields of the grouping
// are set: Src for BySrc, Dst for ByDst, both for ByPair, Port and Proto
// for the port groupings, SrcK8s and DstK8s for the name groupings. Non-IP flows group under the zero netip.Addr;
// flows without ports (non-IP, ICMP, other protocols) under port 0 in
// ByPort, and under their port fields (ICMP type and code) in BySrcPort
// and ByDstPort.
type TopEntry struct {
	Src, Dst netip.Addr
	Port     uint16
	Proto    uint8
	// SrcK8s and DstK8s are the ends of a group by names.
	SrcK8s, DstK8s K8sGroup
	Packets        uint64
	Bytes          uint64
	// Flows counts distinct flows: distinct flow.Keys among the group's
	// records. A flow exported over several eviction intervals, as
	// several records, counts once.
	Flows uint64
	// Error says how exact Packets and Bytes are: exact, unless a record
	// of the group is decoded (still exact counts) or estimated; then
	// they are an estimate, never below the truth, over it by at most
	// the sums of the estimates' bounds, with probability at least
	// Error.Confidence() (flow.ErrorSum).
	Error flow.ErrorSum
	// Signals are what the group's records said of the kernel signals
	// and DNS (signals.go).
	Signals SignalSums
}

// topLess orders entries for Top: bytes, packets and flows descending, then
// the group key ascending, so equal totals come out in a fixed order.
func topLess(a, b *TopEntry) bool {
	if c := cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(b.Packets, a.Packets), cmp.Compare(b.Flows, a.Flows),
		a.Src.Compare(b.Src), a.Dst.Compare(b.Dst), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port),
		a.SrcK8s.compare(&b.SrcK8s), a.DstK8s.compare(&b.DstK8s)); c != 0 {
		return c < 0
	}
	return false
}

// Top reads the segments in two passes. The first sums bytes, packets and
// records per group, from the segments' dictionary ids, without building
// a flow key, and keeps the candidates: the groups whose (bytes, packets)
// is at least the n-th best. topLess orders by bytes and packets before
// flows and the group key, so these are all the groups that can be among
// the first n, ties at the n-th place included. The second pass counts
// the distinct flows of the candidates alone (distinct.go); a record of
// any other group costs a lookup by dictionary id or group key. ByPair
// sums its pairs in a pass of their own, after the first has summed each
// address (pairs.go); ByPort reads the SYNs first, to sum each record
// under its service port (service.go).

// topState is what the passes of one Top share.
type topState struct {
	cq    *compiled
	by    GroupBy
	sort  Sort
	need  []int      // the blocks check verifies
	vlan  int        // the VLAN column, or -1 if this format has none
	in    *interner  // canonical addresses: the groups of BySrc, ByDst, ByPair
	flows *flowIDs   // the records' flow ids (distinct.go)
	table *partTable // the first pass's groups for ByPair and the port groupings
	svc   *services  // ByPort
	ports *portCols  // ByPort, if the flow pass counts flows: each record's group, for it
	// counting, if not nil, is the bits of the flows the summing of the
	// records counts as it goes (countWhileSumming): agg.flows is then
	// the group's flows, and there is no flow pass.
	counting flowBits
	names    *nameGroups
	segs     *querySegs // the segments every pass reads, mapped once
	first    bool
	// addrs asks ByPair's first pass for the sums of BySrc and ByDst too.
	addrs bool
}

func newTopState(cq *compiled, by GroupBy, sort Sort, in *interner, segs *querySegs) *topState {
	st := &topState{cq: cq, by: by, sort: sort, vlan: -1, in: in, table: &partTable{}, svc: &services{},
		first: true, names: &nameGroups{}, segs: segs}
	st.need = []int{cBytes, cPackets, cSrcAddr, cDstAddr, bAddrDict, bAddrFam, cSrcMAC, cDstMAC, bMACDict,
		cIfIndex, cEthType, cSrcPort, cDstPort, cProto, cDirection}
	// What errSums reads: nothing to check in a segment of exact records,
	// which has none of these columns.
	st.need = append(st.need, accuracyCols[:]...)
	st.need = append(st.need, sigCols[:]...) // what sigSums reads: nothing in a segment without signals
	if c, ok := fieldCol("vlan_id"); ok {
		st.vlan = c
		st.need = append(st.need, c)
	}
	if by == ByPort {
		st.need = append(st.need, cTCPFlags, cFirst, cLast)
	}
	if by.isNames() {
		st.need = append(st.need, k8sTopCols...)
	}
	return st
}

// Top returns the n groups with the most bytes among the records matching
// q (all groups if n <= 0), ordered by bytes, packets and flows descending,
// ties broken by the group key ascending. Segments are read in parallel,
// one goroutine per CPU. Flows are counted exactly, for the groups that
// may be among the first n only; memory grows with the number of groups
// and with the distinct flows of those.
func (r *Reader) Top(ctx context.Context, q Query, by GroupBy, n int) ([]TopEntry, error) {
	return r.top(ctx, q, by, SortBytes, n, topLimits{bitsBudget: flowBitsBudget}, true, nil)
}

// TopBy is Top ranking its groups by sort: by bytes, as Top, or by one of
// the kernel signals or DNS (Sort), among the groups whose records
// measured it; ties are broken as Top breaks them.
func (r *Reader) TopBy(ctx context.Context, q Query, by GroupBy, sort Sort, n int) ([]TopEntry, error) {
	return r.top(ctx, q, by, sort, n, topLimits{bitsBudget: flowBitsBudget}, true, nil)
}

// TopUncounted is Top without the flows counted: every entry's Flows is
// 0, and entries with the same bytes and packets are ordered by their
// group key alone. It reads the segments only to sum them, which is most
// of Top's time saved where most records are flows of their own: for views
// that show no flow count (the UI's topology).
func (r *Reader) TopUncounted(ctx context.Context, q Query, by GroupBy, n int) ([]TopEntry, error) {
	return r.top(ctx, q, by, SortBytes, n, topLimits{}, false, nil)
}

// TopUncountedMany is TopUncounted for each of bys over one query, the
// answers in the order of bys. Where bys holds ByPair, whose first pass
// sums every address as a source and as a destination, BySrc and ByDst
// are taken from those sums rather than read again: what a view that
// shows the top talkers of every kind at once asks for.
func (r *Reader) TopUncountedMany(ctx context.Context, q Query, bys []GroupBy, n int) ([][]TopEntry, error) {
	answers := map[GroupBy][]TopEntry{}
	var fromPair map[GroupBy][]TopEntry
	order := slices.Clone(bys)
	if slices.Contains(bys, ByPair) && (slices.Contains(bys, BySrc) || slices.Contains(bys, ByDst)) {
		fromPair = answers
		// ByPair first, which answers the others.
		order = append([]GroupBy{ByPair}, order...)
	}
	for _, by := range order {
		if _, ok := answers[by]; ok {
			continue
		}
		es, err := r.top(ctx, q, by, SortBytes, n, topLimits{}, false, fromPair)
		if err != nil {
			return nil, err
		}
		answers[by] = es
	}
	out := make([][]TopEntry, len(bys))
	for i, by := range bys {
		out[i] = answers[by]
	}
	return out, nil
}

// top is TopBy, with flows counted if counted is set, within lim. If
// addrs is not nil, by is ByPair and flows are not counted, addrs is
// given the answers of BySrc and ByDst from ByPair's first pass.
func (r *Reader) top(ctx context.Context, q Query, by GroupBy, sort Sort, n int, lim topLimits, counted bool, addrs map[GroupBy][]TopEntry) ([]TopEntry, error) {
	if by < 0 || by >= numGroupBy {
		return nil, fmt.Errorf("store: top: unknown grouping %d", by)
	}
	if sort < 0 || sort >= numSorts {
		return nil, fmt.Errorf("store: top: unknown ranking %d", sort)
	}
	// The passes that prune the groups by bytes (the biggest records,
	// ByPair's floor) prune nothing when the ranking is by a signal.
	pruneN := n
	if sort != SortBytes {
		pruneN = 0
	}
	cq, err := q.compile()
	if err != nil {
		return nil, err
	}
	rep := q.report()
	sn, err := r.snapshot(ctx, cq.since, cq.until, rep)
	if err != nil {
		return nil, err
	}
	defer sn.close()
	// Biggest first, as parallel orders them, so the last to finish is
	// small.
	files := slices.Clone(sn.files)
	slices.SortFunc(files, func(a, b snapFile) int { return cmp.Compare(b.e.size, a.e.size) })
	segs, err := r.acquireAll(sn, files, rep)
	if err != nil {
		return nil, err
	}
	defer segs.release()
	in, ids := r.cache.interners()
	st := newTopState(&cq, by, sort, in, segs)
	st.flows = ids
	st.addrs = addrs != nil && by == ByPair && !counted
	// Where the summing can count the flows, it does, and there is no
	// flow pass (countWhileSumming).
	countSumming := counted && sort == SortBytes && (by == ByPort || by == ByPair)
	if by == ByPort {
		// The services first, so that the records are summed once,
		// each under its service port.
		var syns *synScan
		if files, syns, err = r.synPass(ctx, st, files, rep); err != nil {
			return nil, err
		}
		if st.svc, err = r.resolveServices(ctx, st, syns); err != nil {
			return nil, err
		}
		switch {
		case countSumming:
			if err := r.countWhileSumming(ctx, st, files); err != nil {
				return nil, err
			}
		case counted:
			st.ports = &portCols{}
		}
	}
	if counted && sort == SortBytes && (by == BySrcPort || by == ByDstPort) {
		countSumming = st.warmCounting(files)
	}
	sums, err := r.sumPass(ctx, st, files, rep, pruneN)
	if err != nil {
		return nil, err
	}
	if by == ByPair && countSumming {
		if err := r.countWhileSumming(ctx, st, sums.files); err != nil {
			return nil, err
		}
	}
	if st.addrs {
		for end, g := range [2]GroupBy{BySrc, ByDst} {
			as := *st
			as.by = g
			w := &sumWorker{st: &as, direct: sums.direct}
			if g == ByDst {
				w.direct = sums.dstDirect
			}
			addrs[g] = as.entries(w.candidates(n), nil, sums.addrEst[end], sums.addrSig[end], n)
		}
	}
	est, sig := sums.est, sums.sig
	if by == ByPair {
		if est, sig, err = r.pairPass(ctx, st, sums, pruneN, lim); err != nil {
			return nil, err
		}
	}
	rep.Matched = sums.matched
	var cands []topCand
	if sort == SortBytes {
		cands = sums.candidates(n)
	} else {
		cands = sums.signalCandidates(n, sig, sort)
	}
	var flows []uint64
	switch {
	case st.counting != nil:
		flows = make([]uint64, len(cands))
		for i := range cands {
			flows[i] = cands[i].flows
		}
	case counted:
		if flows, err = r.flowPass(ctx, st, sums.files, cands, lim); err != nil {
			return nil, err
		}
	}
	return st.entries(cands, flows, est, sig, n), nil
}

// entries returns the first n of the candidates (all if n <= 0) in the
// order of st.sort, with their flows (none counted if flows is nil),
// errors and signals.
func (st *topState) entries(cands []topCand, flows []uint64, est errSums, sig sigSums, n int) []TopEntry {
	out := make([]TopEntry, len(cands))
	for i := range cands {
		cands[i].flows = 0
		if flows != nil {
			cands[i].flows = flows[i]
		}
		out[i] = st.entryOf(cands[i].g, &cands[i].agg)
		out[i].Error = est[cands[i].g]
		out[i].Signals = sig[cands[i].g]
	}
	less := topLess
	if sort := st.sort; sort != SortBytes {
		less = func(a, b *TopEntry) bool { return signalLess(a, b, sort) }
	}
	slices.SortFunc(out, func(a, b TopEntry) int {
		if less(&a, &b) {
			return -1
		}
		if less(&b, &a) {
			return 1
		}
		return 0
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// pass runs fn on each of files, in parallel. The query's first pass
// checks every segment (check: the blocks any pass reads, and the
// dictionary indices) and reports to rep what it read and skipped; later
// passes read only segments an earlier one kept, the same mappings,
// checked. They report nothing. fn says whether the
// next pass needs the segment; pass returns those.
func (r *Reader) pass(ctx context.Context, st *topState, files []snapFile, rep *Report,
	fn func(w int, s *segment, f *segFilter, ok bool) (keep bool, err error)) ([]snapFile, error) {
	first := st.first
	if !first {
		rep = &Report{}
	}
	var mu sync.Mutex
	kept := make(map[uint64]bool, len(files))
	err := r.parallelSegs(ctx, st.segs, files, rep, func(w int, s *segment) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var f *segFilter
		var ok bool
		var err error
		if first {
			f, ok, err = st.check(s)
		} else {
			f, ok, err = st.cq.forSegment(s)
		}
		if err != nil {
			return err
		}
		keep, err := fn(w, s, f, ok)
		if keep && err == nil {
			mu.Lock()
			kept[s.id] = true
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	st.first = false
	return keepOnly(files, kept), nil
}

// keepOnly returns the files whose segment ids are in ids, in order.
func keepOnly(files []snapFile, ids map[uint64]bool) []snapFile {
	out := make([]snapFile, 0, len(ids))
	for _, sf := range files {
		if ids[sf.e.id] {
			out = append(out, sf)
		}
	}
	return out
}

// check verifies what Top reads of a segment: the filter's blocks, the
// whole flow key and the counters (and for ByPort what the service pass
// reads), and the dictionary indices. ok is false if no record can match
// q (the segment may still hold SYNs of the window).
func (st *topState) check(s *segment) (f *segFilter, ok bool, err error) {
	f, ok, err = st.cq.forSegment(s)
	if err != nil {
		return nil, false, err
	}
	if err := s.verify(st.need...); err != nil {
		return nil, false, err
	}
	for _, c := range [...]struct{ col, limit int }{{cSrcAddr, s.nAddr}, {cDstAddr, s.nAddr}, {cSrcMAC, s.nMAC}, {cDstMAC, s.nMAC}} {
		if err := s.checkIndex(c.col, c.limit); err != nil {
			return nil, false, err
		}
	}
	if st.by.isNames() {
		if err := checkNames(s); err != nil {
			return nil, false, err
		}
	}
	return f, ok, nil
}

// hasPorts reports whether a record of this EtherType and protocol carries
// transport ports (flow.Key.PortKind, per record without building a Key).
func hasPorts(ethType uint16, proto uint8) bool {
	return (ethType == flow.EtherTypeIPv4 || ethType == flow.EtherTypeIPv6) && flow.HasPorts(proto)
}

// entryOf builds the TopEntry of one group key.
func (st *topState) entryOf(k uint64, a *agg) TopEntry {
	keys := st.in.keysNow()
	e := TopEntry{Packets: a.packets, Bytes: a.bytes, Flows: a.flows}
	switch by := st.by; {
	case by == BySrc:
		e.Src = addrOf(keys[k])
	case by == ByDst:
		e.Dst = addrOf(keys[k])
	case by == ByPair:
		e.Src, e.Dst = addrOf(keys[k>>32]), addrOf(keys[uint32(k)])
	case by.byPort():
		e.Proto, e.Port = uint8(k>>16), uint16(k)
	case by.isNames():
		e.SrcK8s, e.DstK8s = st.names.get(uint32(k>>32)), st.names.get(uint32(k))
	}
	return e
}
