package store

import (
	"context"
	"slices"
	"sync"

	"loupe/internal/flow"
)

// Top's port grouping (ByPort) groups a record by its service port: the
// port of the side that accepted the connection, so that a server's
// replies count under its port rather than under each client's ephemeral
// port. Which side that is comes from the SYNs, resolved per connection
// (the unordered pair of address and port of a TCP flow) over the query's
// window:
//
//   - A record's TCP flags are the union of its packets' flags, so the
//     client's first record usually carries the SYN and the ACK of the
//     handshake's last packet: "SYN and ACK" alone does not say which side
//     answered. A record with SYN and without ACK does: only the client
//     sends a SYN alone (a SYN retried to a port that never answers, or a
//     handshake split by an eviction).
//   - When both directions of a connection have a record with SYN, the
//     client's SYN came first: the direction whose SYN record started
//     earlier is the client's.
//   - Otherwise (the SYN outside the window, a single direction seen,
//     UDP and the other protocols with ports), the lower port is the
//     service: well-known and registered ports are below the ephemeral
//     range.
//
// Every record of a connection, from every eviction interval, both
// directions and every interface, inherits what the connection's SYNs
// said; records outside the window say nothing. Flows without ports
// (non-IP, ICMP, other protocols) group under port 0.
//
// The SYNs change the answer only for a connection whose client turns out
// to be the side with the lower port, and the client is a side that sent
// a SYN: so only connections with a SYN from the lower port to the higher
// need resolving, and only those whose service is the higher port are
// kept. Top's first pass (synPass) finds the first, reading the SYN
// records alone; a second scan reads the SYNs the other way of those
// connections alone, if there are any; then Top sums the records, each
// under its service port, once. Every other connection's service is the
// lower port, without a lookup.

// connID is a TCP connection: the canonical address and port of the side
// with the lower port, then of the other side.
type connID struct {
	lo, hi addrKey
	lp, hp uint16
}

// connHash hashes a connection from its addresses' hashes (connCache).
func connHash(lo, hi uint64, lp, hp uint16) uint64 {
	x := (lo*hashMul ^ hi) * partMul
	x ^= uint64(lp)<<16 | uint64(hp)
	x *= hashMul
	return x ^ x>>29
}

// connCache holds the hashes of one segment's canonical address entries,
// computed as records need them. A segment id names the same dictionary in
// every pass of a query.
type connCache struct {
	seg   uint64
	valid bool
	h     []uint64 // 0: not computed yet
}

func (c *connCache) hash(s *segment, e uint32) uint64 {
	if !c.valid || c.seg != s.id {
		c.seg, c.valid = s.id, true
		c.h = slices.Grow(c.h[:0], s.nAddr)[:s.nAddr]
		clear(c.h)
	}
	if h := c.h[e]; h != 0 {
		return h
	}
	k := canon(s.addrKey(e))
	h := addrHash(le.Uint64(k.a[:8]), le.Uint64(k.a[8:]), uint32(k.fam)) | 1
	c.h[e] = h
	return h
}

// hashBits is a bit per hash value modulo its size: a bit not set says a
// connection is not in the set it was built from, without a lookup.
type hashBits struct {
	w    []uint64
	mask uint64
}

// newHashBits sizes the bits for n connections, 16 bits each, so that
// most absent connections find their bit clear.
func newHashBits(n int) hashBits {
	words := 1
	for words*64 < 16*n {
		words *= 2
	}
	return hashBits{make([]uint64, words), uint64(words)*64 - 1}
}

func (b *hashBits) set(h uint64)      { h &= b.mask; b.w[h/64] |= 1 << (h % 64) }
func (b *hashBits) has(h uint64) bool { h &= b.mask; return b.w[h/64]&(1<<(h%64)) != 0 }

// synInfo is what a connection's SYN records said, per side: 0 the lower
// port's, 1 the higher's.
type synInfo struct {
	first [2]int64 // earliest first_seen of a record with SYN
	syn   [2]bool  // a record with SYN
	alone [2]bool  // a record with SYN and without ACK
}

func (v *synInfo) add(side int, first int64, alone bool) {
	if !v.syn[side] || first < v.first[side] {
		v.first[side] = first
	}
	v.syn[side] = true
	v.alone[side] = v.alone[side] || alone
}

func (v *synInfo) merge(o *synInfo) {
	for side := range 2 {
		if o.syn[side] {
			v.add(side, o.first[side], o.alone[side])
		}
	}
}

// client returns the side the client sent, or -1 if the SYNs do not say.
func (v *synInfo) client() int {
	switch {
	case v.alone[0] != v.alone[1]:
		if v.alone[0] {
			return 0
		}
		return 1
	case v.syn[0] && v.syn[1] && v.first[0] != v.first[1]:
		if v.first[0] < v.first[1] {
			return 0
		}
		return 1
	}
	return -1
}

// services is what the service pass found: the connections whose service
// is the higher port. It is read without locks once built.
type services struct {
	high map[connID]struct{}
	bits hashBits
}

// port returns the service port of row i of s (0 for a flow without
// ports).
func (sv *services) port(c *connCache, s *segment, i int) uint16 {
	cols := &s.cols
	sp, dp := le.Uint16(cols[cSrcPort][2*i:]), le.Uint16(cols[cDstPort][2*i:])
	port, ok := sv.plain(le.Uint16(cols[cEthType][2*i:]), cols[cProto][i], sp, dp)
	if ok {
		return port
	}
	lo, hi := le.Uint32(cols[cSrcAddr][4*i:]), le.Uint32(cols[cDstAddr][4*i:])
	lp, hp := sp, dp
	if sp > dp {
		lo, hi, lp, hp = hi, lo, dp, sp
	}
	if !sv.bits.has(connHash(c.hash(s, lo), c.hash(s, hi), lp, hp)) {
		return lp
	}
	if _, ok := sv.high[connID{canon(s.addrKey(lo)), canon(s.addrKey(hi)), lp, hp}]; ok {
		return hp
	}
	return lp
}

// groups sets col[i] to the group (protocol and service port) of each row
// i of s, as port finds it, in one loop.
func (sv *services) groups(s *segment, c *connCache, col []uint32) {
	cols := &s.cols
	eth, protos, sport, dport := cols[cEthType], cols[cProto], cols[cSrcPort], cols[cDstPort]
	for i := range s.n {
		proto := protos[i]
		port, ok := sv.plain(le.Uint16(eth[2*i:]), proto, le.Uint16(sport[2*i:]), le.Uint16(dport[2*i:]))
		if !ok {
			port = sv.port(c, s, i)
		}
		col[i] = uint32(proto)<<16 | uint32(port)
	}
}

// plain returns the service port of a record without looking its
// connection up, if it needs no lookup: a flow without ports, one other
// than TCP, one with equal ports, or any when no connection's service is
// the higher port.
func (sv *services) plain(ethType uint16, proto uint8, sp, dp uint16) (uint16, bool) {
	switch {
	case !hasPorts(ethType, proto):
		return 0, true
	case proto != flow.ProtoTCP || len(sv.high) == 0 || sp == dp:
		return min(sp, dp), true
	}
	return 0, false
}

// recordServicePort is the service port one record says on its own,
// without the rest of its connection: the destination port of a SYN
// without ACK, else the lower port; 0 for a flow without ports.
func recordServicePort(ethType uint16, proto uint8, sp, dp, flags uint16) uint16 {
	if !hasPorts(ethType, proto) {
		return 0
	}
	if proto == flow.ProtoTCP && flags&flow.TCPSyn != 0 && flags&flow.TCPAck == 0 {
		return dp
	}
	return min(sp, dp)
}

// synScan is what the query's first pass gathered for ByPort: per worker,
// the window's SYNs from the lower port to the higher (whatever the
// query's other filters: a reply's direction may be filtered out but
// still says which side answered), and the segments of the window.
type synScan struct {
	win     *compiled
	files   []snapFile
	workers []*synWorker
}

// synPass is ByPort's first pass: it checks every segment, as a query's
// first pass does, and gathers the window's SYNs from the lower port to the
// higher. It returns the segments that may hold a record of the query.
func (r *Reader) synPass(ctx context.Context, st *topState, files []snapFile, rep *Report) ([]snapFile, *synScan, error) {
	win := st.cq.window()
	sc := &synScan{win: &win}
	for range maxWorkers() {
		sc.workers = append(sc.workers, &synWorker{syns: make(map[connID]synInfo)})
	}
	var mu sync.Mutex
	inWindow := make(map[uint64]bool)
	matching, err := r.pass(ctx, st, files, rep, func(w int, s *segment, _ *segFilter, ok bool) (bool, error) {
		// A segment none of whose records match may still hold SYNs
		// of the window.
		wf, wok, err := win.forSegment(s)
		if err != nil {
			return false, err
		}
		if wok {
			sc.workers[w].scan(s, wf, nil)
			mu.Lock()
			inWindow[s.id] = true
			mu.Unlock()
		}
		return ok, nil
	})
	if err != nil {
		return nil, nil, err
	}
	sc.files = keepOnly(files, inWindow)
	return matching, sc, nil
}

// resolveServices finds the connections whose service is the higher port:
// it reads the SYNs the other way of the connections the first pass found,
// if there are any, and resolves each connection's client.
func (r *Reader) resolveServices(ctx context.Context, st *topState, sc *synScan) (*services, error) {
	up := &synSet{m: sc.workers[0].take()}
	for _, w := range sc.workers[1:] {
		for id, v := range w.take() {
			u := up.m[id]
			u.merge(&v)
			up.m[id] = u
		}
	}
	sv := &services{}
	if len(up.m) == 0 {
		return sv, nil
	}
	up.bits, up.ports = newHashBits(len(up.m)), newHashBits(len(up.m))
	for id := range up.m {
		up.bits.set(id.hash())
		up.ports.set(portsHash(id.lp, id.hp))
	}
	_, err := r.pass(ctx, st, sc.files, nil, func(wi int, s *segment, _ *segFilter, _ bool) (bool, error) {
		f, ok, err := sc.win.forSegment(s)
		if err != nil || !ok {
			return false, err
		}
		sc.workers[wi].scan(s, f, up)
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	for _, w := range sc.workers {
		for id, v := range w.take() {
			u := up.m[id]
			u.merge(&v)
			up.m[id] = u
		}
	}
	sv.high = make(map[connID]struct{})
	for id, v := range up.m {
		if v.client() == 0 {
			sv.high[id] = struct{}{}
		}
	}
	sv.bits = newHashBits(len(sv.high))
	for id := range sv.high {
		sv.bits.set(id.hash())
	}
	return sv, nil
}

// hash is connHash of the connection.
func (id *connID) hash() uint64 {
	h := func(k addrKey) uint64 { return addrHash(le.Uint64(k.a[:8]), le.Uint64(k.a[8:]), uint32(k.fam)) | 1 }
	return connHash(h(id.lo), h(id.hi), id.lp, id.hp)
}

// synSet is the connections with a SYN from the lower port to the higher.
// Most SYNs the other way are of other connections, and most of those
// have other ports: ports says so from the ports alone, before bits
// needs the addresses' hashes.
type synSet struct {
	m     map[connID]synInfo
	bits  hashBits // connHash
	ports hashBits // portsHash
}

// portsHash hashes a connection's ports.
func portsHash(lp, hp uint16) uint64 {
	x := (uint64(lp)<<16 | uint64(hp)) * hashMul
	return x ^ x>>32
}

// synWorker is one goroutine of the service pass.
type synWorker struct {
	syns  map[connID]synInfo
	conns connCache
}

// take returns what the worker gathered and starts it afresh.
func (w *synWorker) take() map[connID]synInfo {
	m := w.syns
	w.syns = make(map[connID]synInfo)
	return m
}

// synRows are the rows of a segment that may be a SYN the service pass
// reads: TCP records with ports, a SYN, and two different ports, sent
// from the lower port to the higher (up) or the other way (down). They
// are a property of the records alone, found once per segment and kept
// with it: about one record in six is a SYN, and few of those are sent
// from the lower port, so each scan then reads a fraction of the rows
// where it read every row's flags, protocol and ports.
type synRows struct {
	up, down []uint32
}

// syns returns the SYN rows of s.
func (s *segment) syns() *synRows {
	s.synMu.Lock()
	defer s.synMu.Unlock()
	if s.synRows != nil {
		return s.synRows
	}
	c := &s.cols
	flags, proto, eth, sport, dport := c[cTCPFlags], c[cProto], c[cEthType], c[cSrcPort], c[cDstPort]
	rows := &synRows{}
	for i := range s.n {
		if le.Uint16(flags[2*i:])&flow.TCPSyn == 0 || proto[i] != flow.ProtoTCP || !hasPorts(le.Uint16(eth[2*i:]), flow.ProtoTCP) {
			continue
		}
		switch sp, dp := le.Uint16(sport[2*i:]), le.Uint16(dport[2*i:]); {
		case sp < dp:
			rows.up = append(rows.up, uint32(i))
		case sp > dp:
			rows.down = append(rows.down, uint32(i))
		}
	}
	rows.up, rows.down = slices.Clip(rows.up), slices.Clip(rows.down)
	s.synRows = rows
	return rows
}

// scan gathers the SYN records of s in the window: those sent from the
// lower port to the higher if up is nil, else those sent the other way
// on the connections of up.
func (w *synWorker) scan(s *segment, f *segFilter, up *synSet) {
	c := &s.cols
	flags, sport, dport, first := c[cTCPFlags], c[cSrcPort], c[cDstPort], c[cFirst]
	simple := f.simple()
	rows := s.syns().up
	if up != nil {
		rows = s.syns().down
	}
	for _, row := range rows {
		i := int(row)
		if !simple && !f.match(s, i) {
			continue
		}
		sp, dp := le.Uint16(sport[2*i:]), le.Uint16(dport[2*i:])
		lo, hi, lp, hp, side := le.Uint32(c[cSrcAddr][4*i:]), le.Uint32(c[cDstAddr][4*i:]), sp, dp, 0
		if up != nil {
			lo, hi, lp, hp, side = hi, lo, dp, sp, 1
			if !up.ports.has(portsHash(lp, hp)) || !up.bits.has(connHash(w.conns.hash(s, lo), w.conns.hash(s, hi), lp, hp)) {
				continue
			}
		}
		id := connID{canon(s.addrKey(lo)), canon(s.addrKey(hi)), lp, hp}
		if up != nil {
			if _, ok := up.m[id]; !ok {
				continue
			}
		}
		v := w.syns[id]
		v.add(side, int64(le.Uint64(first[8*i:])), le.Uint16(flags[2*i:])&flow.TCPAck == 0)
		w.syns[id] = v
	}
}

// portCols keep, per segment, the group of each record (protocol and
// service port) as the sum pass found it, for the flow pass: a service
// port that takes a connection's lookup is found once per query. Rows
// the query does not match hold 0.
type portCols struct {
	mu sync.Mutex
	m  map[uint64][]uint32
}

func (p *portCols) put(seg uint64, col []uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[uint64][]uint32)
	}
	p.m[seg] = col
}

// get returns the groups of segment seg, or nil; p may be nil.
func (p *portCols) get(seg uint64) []uint32 {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[seg]
}
