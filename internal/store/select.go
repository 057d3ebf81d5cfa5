package store

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"loupe/internal/flow"
)

// Select is `loupe flows`: the records matching a query, sorted, the first
// N of them. It reads only the columns the filters and the sort key need,
// keeps the N best (segment, row) pairs in a heap per worker (bounded
// memory, whatever the store holds), and decodes only the records it
// returns. With no limit it keeps one 24-byte candidate per matching
// record.

// Order is a sort order of Select.
type Order struct {
	name string
	kind orderKind
	col  int        // orderCol: the column
	time bool       // orderCol: a time column (signed)
	desc bool       // largest (newest) first
	src  bool       // orderAddr: source, else destination
	fld  flow.Field // orderDecoded
	// pres is an orderCol field's presence bit, for a field present only
	// where measured: records without it sort last.
	pres flow.Presence
}

type orderKind int

const (
	orderCol     orderKind = iota // a fixed-width column
	orderAddr                     // an address, in netip.Addr order
	orderService                  // the service port one record says (recordServicePort)
	orderIface                    // the interface's name, in string order
	orderDecoded                  // a field this format has no column for: read from decoded records
)

// orders lists the sort keys, in the order the CLI names them: counters,
// times and the kernel signals sort descending (largest, newest first),
// the others ascending. The signals are Top's rankings of the same names
// (rtt is the largest smoothed RTT, drops the packets dropped), and a
// record that did not measure one sorts after those that did.
var orders = [...]struct {
	name, field string
	kind        orderKind
	desc        bool
}{
	{"last_seen", "last_seen", orderCol, true},
	{"first_seen", "first_seen", orderCol, true},
	{"bytes", "bytes", orderCol, true},
	{"packets", "packets", orderCol, true},
	{"segments", "segments", orderCol, true},
	{"wire_bytes", "wire_bytes", orderCol, true},
	{"src", "src_addr", orderAddr, false},
	{"dst", "dst_addr", orderAddr, false},
	{"port", "", orderService, false},
	{"src_port", "src_port", orderCol, false},
	{"dst_port", "dst_port", orderCol, false},
	{"proto", "proto", orderCol, false},
	{"vlan_id", "vlan_id", orderCol, false},
	{"iface", "iface", orderIface, false},
	{"direction", "direction", orderCol, false},
	{"rtt", "rtt_max_ns", orderCol, true},
	{"handshake_rtt", "handshake_rtt_ns", orderCol, true},
	{"retransmits", "retransmits", orderCol, true},
	{"drops", "drop_packets", orderCol, true},
	{"dns_latency", "dns_latency_ns", orderCol, true},
	{"accuracy", "accuracy", orderCol, false},
}

// OrderNames lists the names ParseOrder accepts.
func OrderNames() []string {
	out := make([]string, len(orders))
	for i, o := range orders {
		out[i] = o.name
	}
	return out
}

// NewestFirst is the default order: last_seen descending.
func NewestFirst() Order {
	o, _ := ParseOrder("last_seen")
	return o
}

// ParseOrder returns the order named name (one of OrderNames; src_addr and
// dst_addr are also accepted).
func ParseOrder(name string) (Order, error) {
	switch name {
	case "src_addr":
		name = "src"
	case "dst_addr":
		name = "dst"
	}
	for _, d := range orders {
		if d.name != name {
			continue
		}
		o := Order{name: d.name, kind: d.kind, desc: d.desc, src: d.name == "src"}
		if d.kind == orderCol {
			f, ok := flow.FieldByName(d.field)
			if !ok {
				return Order{}, fmt.Errorf("store: sort field %s is not a record field", d.field)
			}
			o.time, o.pres = f.Type == flow.TypeTime, f.Presence
			if col, ok := fieldCol(d.field); ok {
				o.col = col
			} else {
				o.kind, o.fld = orderDecoded, f
			}
		}
		return o, nil
	}
	return Order{}, fmt.Errorf("unknown sort field %q (want one of %s)", name, strings.Join(OrderNames(), ", "))
}

func (o Order) String() string { return o.name }

// cand is one matching record: where it is and its sort key. Smaller sorts
// first: key, then the newest last_seen, then storage order.
type cand struct {
	key, tie uint64
	seg, row uint32
}

func candCmp(a, b *cand) int {
	return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.tie, b.tie), cmp.Compare(a.seg, b.seg), cmp.Compare(a.row, b.row))
}

// candHeap holds the best candidates so far, the worst at the root.
type candHeap []cand

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return candCmp(&h[j], &h[i]) < 0 }
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)        { *h = append(*h, x.(cand)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// signedKey maps an int64 to a uint64 of the same order.
func signedKey(v int64) uint64 { return uint64(v) ^ 1<<63 }

func (o *Order) encode(v uint64) uint64 {
	if o.desc {
		return ^v
	}
	return v
}

// selectWorker is one goroutine's share of Select.
type selectWorker struct {
	o          *Order
	cq         *compiled
	limit      int
	index      map[uint64]uint32 // segment id -> snapshot index
	in         *interner
	ranks      []uint32          // orderAddr: rank of each global address id
	ifaceRanks map[string]uint32 // orderIface: rank of each interface name
	h          candHeap          // limit > 0
	all        []cand            // limit <= 0
	remap      []uint32
	rec        flow.Record
	matched    uint64
}

func (w *selectWorker) offer(c cand) {
	switch {
	case w.limit <= 0:
		w.all = append(w.all, c)
	case len(w.h) < w.limit:
		heap.Push(&w.h, c)
	case candCmp(&c, &w.h[0]) < 0:
		w.h[0] = c
		heap.Fix(&w.h, 0)
	}
}

// bestKey is the smallest key any record of s can have under a time order
// (the only ones whose bound the header gives), and whether it is known.
func (w *selectWorker) bestKey(s *segment) (uint64, bool) {
	if w.o.kind != orderCol || !w.o.time || !w.o.desc {
		return 0, false
	}
	switch w.o.col {
	case cLast:
		return w.o.encode(signedKey(s.maxLast)), true
	case cFirst:
		return w.o.encode(signedKey(s.maxFirst)), true
	}
	return 0, false
}

func (w *selectWorker) segment(s *segment) error {
	f, ok, err := w.cq.forSegment(s)
	if err != nil || !ok {
		return err
	}
	simple := f.simple()
	if best, ok := w.bestKey(s); ok && w.limit > 0 && len(w.h) == w.limit && best > w.h[0].key {
		// No record here can enter the heap: only count the matches.
		if simple {
			w.matched += uint64(s.n)
			return nil
		}
		for i := range s.n {
			if f.match(s, i) {
				w.matched++
			}
		}
		return nil
	}
	o := w.o
	need := []int{cLast}
	var dec *recordDecoder
	switch o.kind {
	case orderCol:
		need = append(need, o.col)
		if o.pres != 0 {
			need = append(need, cPresence)
		}
	case orderAddr:
		need = append(need, cSrcAddr, cDstAddr, bAddrDict, bAddrFam)
	case orderIface:
		need = append(need, cIface, bNames)
	case orderService:
		need = append(need, cEthType, cProto, cSrcPort, cDstPort, cTCPFlags)
	case orderDecoded:
		if err := s.verifyAll(); err != nil {
			return err
		}
		if dec, err = checkedDecoder(s); err != nil {
			return err
		}
	}
	if o.kind == orderCol && o.col == cLast {
		need = append(need, cFirst) // the tie
	}
	if err := s.verify(need...); err != nil {
		return err
	}
	var keyOf func(i int) uint64
	c := &s.cols
	switch o.kind {
	case orderCol:
		col, width, pres := c[o.col], colWidth(o.col), c[cPresence]
		keyOf = func(i int) uint64 {
			var v uint64
			switch {
			case len(col) == 0:
				// A sparse column this segment does not hold: zeros.
			case width == 8:
				v = le.Uint64(col[8*i:])
			case width == 4:
				v = uint64(le.Uint32(col[4*i:]))
			case width == 2:
				v = uint64(le.Uint16(col[2*i:]))
			default:
				v = uint64(col[i])
			}
			if o.pres != 0 {
				if !flow.Presence(sparseU32(pres, i)).Any(o.pres) {
					return math.MaxUint64 // not measured: last
				}
				// Measured, even as 0: before the records that were not.
				v = min(v, math.MaxUint64-1) + 1
			}
			if o.time {
				v = signedKey(int64(v))
			}
			return o.encode(v)
		}
	case orderAddr:
		col := c[cDstAddr]
		if o.src {
			col = c[cSrcAddr]
		}
		if err := s.checkIndex(cSrcAddr, s.nAddr); err != nil {
			return err
		}
		if err := s.checkIndex(cDstAddr, s.nAddr); err != nil {
			return err
		}
		w.remap = w.in.remap(s, w.remap)
		remap, ranks := w.remap, w.ranks
		keyOf = func(i int) uint64 {
			id := remap[le.Uint32(col[4*i:])]
			if int(id) >= len(ranks) {
				return math.MaxUint64 // an address the rank pass did not see
			}
			return uint64(ranks[id])
		}
	case orderIface:
		names, err := s.nameDict()
		if err != nil {
			return err
		}
		if err := s.checkIndex(cIface, len(names)); err != nil {
			return err
		}
		rank := make([]uint64, len(names))
		for j, n := range names {
			rank[j] = math.MaxUint64 // a name the rank pass did not see
			if r, ok := w.ifaceRanks[n]; ok {
				rank[j] = uint64(r)
			}
		}
		col := c[cIface]
		keyOf = func(i int) uint64 { return rank[le.Uint32(col[4*i:])] }
	case orderService:
		eth, proto, sp, dp, fl := c[cEthType], c[cProto], c[cSrcPort], c[cDstPort], c[cTCPFlags]
		keyOf = func(i int) uint64 {
			return uint64(recordServicePort(le.Uint16(eth[2*i:]), proto[i], le.Uint16(sp[2*i:]), le.Uint16(dp[2*i:]), le.Uint16(fl[2*i:])))
		}
	case orderDecoded:
		keyOf = func(i int) uint64 {
			_ = dec.decode(i, &w.rec) // indices checked by checkedDecoder
			return o.encode(o.fld.Uint(&w.rec))
		}
	}
	last := c[cLast]
	tieOf := func(i int) uint64 { return ^signedKey(int64(le.Uint64(last[8*i:]))) }
	if o.kind == orderCol && o.col == cLast {
		first := c[cFirst]
		tieOf = func(i int) uint64 { return ^signedKey(int64(le.Uint64(first[8*i:]))) }
	}
	seg := w.index[s.id]
	for i := range s.n {
		if !simple && !f.match(s, i) {
			continue
		}
		w.matched++
		k := keyOf(i)
		if w.limit > 0 && len(w.h) == w.limit && k > w.h[0].key {
			continue // cannot enter the heap: skip the tie
		}
		w.offer(cand{key: k, tie: tieOf(i), seg: seg, row: uint32(i)})
	}
	return nil
}

// checkedDecoder returns a decoder of s after checking every dictionary
// index, so that decode cannot fail.
func checkedDecoder(s *segment) (*recordDecoder, error) {
	dec, err := newRecordDecoder(s)
	if err != nil {
		return nil, err
	}
	for _, c := range [...]struct{ col, limit int }{
		{cSrcAddr, s.nAddr}, {cDstAddr, s.nAddr}, {cSrcMAC, s.nMAC}, {cDstMAC, s.nMAC}, {cIface, len(dec.names)},
	} {
		if err := s.checkIndex(c.col, c.limit); err != nil {
			return nil, err
		}
	}
	return dec, nil
}

// Select calls fn for the records matching q in order o, the first limit
// of them (all if limit <= 0), and sets q.Report's Matched to how many
// matched in all. fn's *flow.Record is reused: copy it to keep it. An
// error from fn stops Select and is returned as is.
func (r *Reader) Select(ctx context.Context, q Query, o Order, limit int, fn func(*flow.Record) error) error {
	if o.name == "" {
		o = NewestFirst()
	}
	cq, err := q.compile()
	if err != nil {
		return err
	}
	rep := q.report()
	sn, err := r.snapshot(ctx, cq.since, cq.until, rep)
	if err != nil {
		return err
	}
	defer sn.close()
	slices.SortFunc(sn.files, func(a, b snapFile) int { return cmp.Compare(a.e.id, b.e.id) })
	index := make(map[uint64]uint32, len(sn.files))
	for i, sf := range sn.files {
		index[sf.e.id] = uint32(i)
	}
	in := &interner{}
	var ranks []uint32
	if o.kind == orderAddr {
		if ranks, err = r.addrRanks(ctx, sn, &cq, in); err != nil {
			return err
		}
	}
	var ifaceRanks map[string]uint32
	if o.kind == orderIface {
		if ifaceRanks, err = r.nameRanks(ctx, sn, &cq); err != nil {
			return err
		}
	}
	ws := make([]*selectWorker, maxWorkers())
	for i := range ws {
		ws[i] = &selectWorker{o: &o, cq: &cq, limit: limit, index: index, in: in, ranks: ranks, ifaceRanks: ifaceRanks}
	}
	// Under a time order, the segments that hold the best records go
	// first, so that the heaps fill with them and most other segments are
	// only counted.
	files := slices.Clone(sn.files)
	slices.SortFunc(files, func(a, b snapFile) int {
		if o.kind == orderCol && o.time && o.desc {
			return cmp.Or(cmp.Compare(b.e.maxLast, a.e.maxLast), cmp.Compare(b.e.id, a.e.id))
		}
		return cmp.Compare(b.e.size, a.e.size)
	})
	if err := r.parallelIn(ctx, files, rep, func(w int, s *segment) error { return ws[w].segment(s) }); err != nil {
		return err
	}
	var all []cand
	for _, w := range ws {
		rep.Matched += w.matched
		all = append(all, w.h...)
		all = append(all, w.all...)
		w.h, w.all = nil, nil
	}
	slices.SortFunc(all, func(a, b cand) int { return candCmp(&a, &b) })
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	return r.emit(ctx, sn, rep, all, fn)
}

// addrRanks interns the addresses of every segment of the snapshot that
// overlaps the window, and ranks them in netip.Addr order.
func (r *Reader) addrRanks(ctx context.Context, sn *snapshot, cq *compiled, in *interner) ([]uint32, error) {
	var scratch Report // Select's own pass reports damaged segments
	err := r.parallel(ctx, sn, &scratch, func(_ int, s *segment) error {
		if s.n == 0 || s.maxLast < cq.since || s.minFirst > cq.until {
			return nil
		}
		if err := s.verify(bAddrDict, bAddrFam); err != nil {
			return err
		}
		in.remap(s, nil)
		return nil
	})
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.Addr, len(in.keys))
	ids := make([]uint32, len(in.keys))
	for i, k := range in.keys {
		addrs[i], ids[i] = addrOf(k), uint32(i)
	}
	slices.SortFunc(ids, func(a, b uint32) int { return addrs[a].Compare(addrs[b]) })
	ranks := make([]uint32, len(ids))
	for rank, id := range ids {
		ranks[id] = uint32(rank)
	}
	return ranks, nil
}

// nameRanks ranks the strings of the dictionaries of every segment of the
// snapshot that overlaps the window, in string order: the interface names
// among them, which orderIface sorts by. The dictionaries are small (the
// names, not the records), so reading them all costs little.
func (r *Reader) nameRanks(ctx context.Context, sn *snapshot, cq *compiled) (map[string]uint32, error) {
	var (
		mu  sync.Mutex
		all = map[string]uint32{}
	)
	var scratch Report // Select's own pass reports damaged segments
	err := r.parallel(ctx, sn, &scratch, func(_ int, s *segment) error {
		if s.n == 0 || s.maxLast < cq.since || s.minFirst > cq.until {
			return nil
		}
		if err := s.verify(bNames); err != nil {
			return err
		}
		names, err := s.nameDict()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			all[n] = 0
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sorted := slices.Sorted(maps.Keys(all))
	for i, n := range sorted {
		all[n] = uint32(i)
	}
	return all, nil
}

// emit decodes the chosen records in order. Their segments are mapped and
// verified whole once each, and kept until the end.
func (r *Reader) emit(ctx context.Context, sn *snapshot, rep *Report, cands []cand, fn func(*flow.Record) error) error {
	type open struct {
		s   *segment
		dec *recordDecoder
		bad bool
	}
	segs := make([]open, len(sn.files))
	defer func() {
		for _, o := range segs {
			o.s.release()
		}
	}()
	var rec flow.Record
	for i, c := range cands {
		if i%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		o := &segs[c.seg]
		if o.s == nil && !o.bad {
			sf := sn.files[c.seg]
			s, err := mapFile(sf, true)
			var dec *recordDecoder
			if err == nil {
				if dec, err = checkedDecoder(s); err != nil {
					s.release()
				}
			}
			switch {
			case damaged(err):
				// Its blocks the sort read were sound, the rest is not.
				o.bad = true
				r.log.Warn("skipping damaged segment", "path", sf.path, "err", err)
				rep.Corrupt = append(rep.Corrupt, SegmentError{Path: sf.path, Err: err})
			case err != nil:
				return err
			default:
				o.s, o.dec = s, dec
			}
		}
		if o.bad {
			continue
		}
		if err := o.dec.decode(int(c.row), &rec); err != nil {
			return err
		}
		if err := fn(&rec); err != nil {
			return err
		}
	}
	return nil
}
