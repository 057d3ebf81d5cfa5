package store

import (
	"context"
	"slices"
	"sync"

	"loupe/internal/flow"
)

// Top's second pass counts the distinct flows of the candidate groups
// exactly: every candidate record's flow.Key goes into one set shared by
// the workers (keyset.go), and a candidate's flow count goes up by one
// when a key enters the set for the first time. The key is packed without
// loss into two words of query-wide ids: the two addresses as stored (so
// that keys that differ only in the bytes of a non-IP or malformed address
// stay apart), the ports, and a context id that stands for the rest (MACs,
// interface index, EtherType, VLAN, direction, protocol), which takes few
// distinct values on any host. A key's group is a function of the key, so
// the keys of different groups never meet, and the set finds a new key's
// candidate from the key (candOf) rather than keep it beside every key.

// flowPass counts the distinct flows of each candidate in files.
func (r *Reader) flowPass(ctx context.Context, st *topState, files []snapFile, cands []topCand, lim keyLimits) ([]uint64, error) {
	flows := make([]uint64, len(cands))
	if len(cands) == 0 {
		return flows, nil
	}
	sh := &flowShared{st: st}
	for _, c := range cands {
		sh.records += c.flows // the first pass counted records
	}
	sh.keys.sh, sh.keys.limits = sh, lim
	sh.match(cands)
	ws := make([]*flowWorker, maxWorkers())
	for i := range ws {
		ws[i] = &flowWorker{sh: sh, flows: padded(len(cands))}
	}
	_, err := r.pass(ctx, st, files, nil, func(w int, s *segment, f *segFilter, ok bool) (bool, error) {
		if ok {
			ws[w].segment(s, f)
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	sh.keys.finish(ws)
	for _, w := range ws {
		for i, n := range w.flows {
			flows[i] += n
		}
	}
	return flows, nil
}

// padded returns n counters that share no cache line with another
// object: each worker counts a new key in its own, and counters of two
// workers in one line made every count a cache miss on the other CPU.
func padded(n int) []uint64 {
	const line = 8 // words in a cache line
	return make([]uint64, n+2*line)[line : line+n : line+n]
}

// flowShared is what the workers of the second pass share.
type flowShared struct {
	st      *topState
	records uint64 // the candidates' records
	// mu guards rawKeys and rawCand, which workers add to as they go and
	// folds of the set read (with ctxs.mu for the contexts).
	mu      sync.RWMutex
	rawKeys []addrKey // st.raw's keys: the addresses of the flow keys' ids
	rawCand []uint32  // per raw id: what addrs finds for its canonical form, or noID
	ctxs    ctxInterner
	keys    keySet

	// The candidates, as the records' dictionaries find them: canonical
	// addresses (BySrc, ByDst: the candidate's index; ByPair: an index
	// into pairs), or group keys (the port groupings).
	addrs  interner
	pairs  u64Map
	groups u64Map
	// addrOf is, per global address id (topState.in), its id in addrs, or
	// noID: what a segment's entries find, from the ids the first pass
	// gave them, without hashing an address.
	addrOf []uint32
}

// match indexes the candidates for the per-record lookups.
func (sh *flowShared) match(cands []topCand) {
	st := sh.st
	keys := st.in.keysNow()
	switch st.by {
	case BySrc, ByDst:
		// Candidates are distinct addresses: the ids interned here are
		// the candidates' indices.
		for _, c := range cands {
			sh.note(keys, uint32(c.g))
		}
	case ByPair:
		sh.pairs.init(len(cands))
		for i, c := range cands {
			src, dst := sh.note(keys, uint32(c.g>>32)), sh.note(keys, uint32(c.g))
			sh.pairs.put(uint64(src)<<32|uint64(dst), uint32(i))
		}
	default:
		sh.groups.init(len(cands))
		for i, c := range cands {
			sh.groups.put(c.g, uint32(i))
		}
		if st.by.isNames() {
			sh.ctxs.groups = &sh.groups
		}
	}
}

// note interns the address of global id g into addrs, and returns its id
// there.
func (sh *flowShared) note(keys []addrKey, g uint32) uint32 {
	if len(sh.addrOf) < len(keys) {
		n := len(sh.addrOf)
		sh.addrOf = slices.Grow(sh.addrOf, len(keys)-n)[:len(keys)]
		for i := n; i < len(keys); i++ {
			sh.addrOf[i] = noID
		}
	}
	id := sh.addrs.intern(keys[g])
	sh.addrOf[g] = id
	return id
}

// candOf returns the candidate of a key in the set: the same as the
// worker that added it found from the key's record. The caller holds
// sh.mu and sh.ctxs.mu for reading, unless no worker runs.
func (sh *flowShared) candOf(k flowKey) uint32 {
	src, dst := uint32(k.a>>32), uint32(k.a)
	switch sh.st.by {
	case BySrc:
		return sh.rawCand[src]
	case ByDst:
		return sh.rawCand[dst]
	case ByPair:
		return sh.pairs.find(uint64(sh.rawCand[src])<<32 | uint64(sh.rawCand[dst]))
	}
	if sh.st.by.isNames() {
		return sh.ctxs.cands[k.b>>32-1]
	}
	x := &sh.ctxs.list[k.b>>32-1]
	sp, dp := uint16(k.b>>16), uint16(k.b)
	port := dp
	switch sh.st.by {
	case BySrcPort:
		port = sp
	case ByPort:
		port = sh.st.svc.keyPort(x.ethType, x.proto, &sh.rawKeys[src], &sh.rawKeys[dst], sp, dp)
	}
	return sh.groups.find(uint64(x.proto)<<16 | uint64(port))
}

// Values of flowWorker.raw besides an id.
const (
	noID   = ^uint32(0) // not needed in this segment
	wanted = noID - 1   // needed, not interned yet
)

// flowWorker is one goroutine of the second pass.
type flowWorker struct {
	sh    *flowShared
	cand  []uint32 // per address entry: what sh.addrs finds for its canonical form, or noID
	raw   []uint32 // per address entry: its id in st.raw
	rows  []uint32 // the segment's candidate records
	conns connCache
	names nameCache // the name groupings
	// groups are the name groups of rows, for the name groupings.
	groups []uint64
	ctx    ctxCache
	keys   keyBuf
	flows  []uint64 // per candidate: the keys that were new to the set
}

// segment adds the flow keys of one segment's candidate records to the
// set. It finds them first, so that it interns only their addresses, all
// under one lock.
func (w *flowWorker) segment(s *segment, f *segFilter) {
	sh := w.sh
	by := sh.st.by
	if by > ByPair {
		w.segmentByGroup(s, f)
		return
	}
	c := &s.cols
	src, dst := c[cSrcAddr], c[cDstAddr]
	if by <= ByPair {
		// The first pass gave every entry of the segment its global id.
		w.cand = slices.Grow(w.cand[:0], s.nAddr)[:s.nAddr]
		for e, g := range sh.st.in.remapOf(s) {
			w.cand[e] = noID
			if int(g) < len(sh.addrOf) {
				w.cand[e] = sh.addrOf[g]
			}
		}
	}
	w.raw = slices.Grow(w.raw[:0], s.nAddr)[:s.nAddr]
	for e := range w.raw {
		w.raw[e] = noID
	}
	w.rows, w.groups = w.rows[:0], w.groups[:0]
	if by.isNames() {
		w.names.reset(s, sh.st)
	}
	simple := f.simple()
	packets, bytes := c[cPackets], c[cBytes]
	for i := range s.n {
		if !simple && !f.match(s, i) {
			continue
		}
		if le.Uint64(packets[8*i:]) == 0 && le.Uint64(bytes[8*i:]) == 0 {
			continue // a record of signals alone (no traffic) is no flow
		}
		sa, da := le.Uint32(src[4*i:]), le.Uint32(dst[4*i:])
		switch by {
		case BySrc:
			if w.cand[sa] == noID {
				continue
			}
		case ByDst:
			if w.cand[da] == noID {
				continue
			}
		case ByPair:
			if w.cand[sa] == noID || w.cand[da] == noID || sh.pairs.find(uint64(w.cand[sa])<<32|uint64(w.cand[da])) == noID {
				continue
			}
		default:
			g := sh.st.group(s, i, &w.conns, &w.names)
			if sh.groups.find(g) == noID {
				continue
			}
			if by.isNames() {
				w.groups = append(w.groups, g)
			}
		}
		w.rows = append(w.rows, uint32(i))
		w.raw[sa], w.raw[da] = wanted, wanted
	}
	if len(w.rows) == 0 {
		return
	}
	w.intern(s)
	var vlanCol []byte
	if sh.st.vlan >= 0 {
		vlanCol = c[sh.st.vlan]
	}
	sport, dport := c[cSrcPort], c[cDstPort]
	w.ctx.reset(s, vlanCol)
	w.keys.reserve(&sh.keys)
	raw := w.raw
	for j, i := range w.rows {
		// Under a name grouping the group is part of the context: the
		// records of one flow may name its ends differently (an address
		// that changed holders), and the flow counts once in each group.
		var g uint64
		if len(w.groups) > 0 {
			g = w.groups[j]
		}
		w.keys.add(flowKey{
			a: uint64(raw[le.Uint32(src[4*i:])])<<32 | uint64(raw[le.Uint32(dst[4*i:])]),
			b: uint64(w.ctx.id(int(i), g, &sh.ctxs)+1)<<32 | uint64(le.Uint16(sport[2*i:]))<<16 | uint64(le.Uint16(dport[2*i:])),
		})
	}
	sh.keys.added(&w.keys, w.flows, len(w.rows))
}

// segmentByGroup is segment for the port and name groupings, whose
// candidates the set finds from a key's ports and context (and for ByPort
// the addresses' keys): the addresses need no candidate, and go into the
// keys as the Reader's ids, all of the segment's found once, in one loop
// over the records.
func (w *flowWorker) segmentByGroup(s *segment, f *segFilter) {
	sh := w.sh
	c := &s.cols
	ids := sh.st.raw.rawOf(s)
	if sh.st.by == ByPort {
		// candOf reads the addresses of the ids: the snapshot must hold
		// this segment's (see intern).
		keys := sh.st.raw.keysNow()
		sh.mu.Lock()
		if len(keys) > len(sh.rawKeys) {
			sh.rawKeys = keys
		}
		sh.mu.Unlock()
	}
	if sh.st.by.isNames() {
		w.names.reset(s, sh.st)
	}
	var vlanCol []byte
	if sh.st.vlan >= 0 {
		vlanCol = c[sh.st.vlan]
	}
	w.ctx.reset(s, vlanCol)
	w.keys.reserve(&sh.keys)
	src, dst, sport, dport := c[cSrcAddr], c[cDstAddr], c[cSrcPort], c[cDstPort]
	packets, bytes := c[cPackets], c[cBytes]
	simple, names := f.simple(), sh.st.by.isNames()
	// A segment without names is one name group: a candidate or not.
	bare := names && w.names.bare
	if bare && sh.groups.find(w.names.group) == noID {
		return
	}
	var inCtx uint64
	if bare {
		inCtx = w.names.group
	}
	n := 0
	for i := range s.n {
		if !simple && !f.match(s, i) {
			continue
		}
		if le.Uint64(packets[8*i:]) == 0 && le.Uint64(bytes[8*i:]) == 0 {
			continue // a record of signals alone (no traffic) is no flow
		}
		if !bare {
			g := sh.st.group(s, i, &w.conns, &w.names)
			if sh.groups.find(g) == noID {
				continue
			}
			if names {
				inCtx = g // as in segment, the name group is part of the context
			}
		}
		w.keys.add(flowKey{
			a: uint64(ids[le.Uint32(src[4*i:])])<<32 | uint64(ids[le.Uint32(dst[4*i:])]),
			b: uint64(w.ctx.id(i, inCtx, &sh.ctxs)+1)<<32 | uint64(le.Uint16(sport[2*i:]))<<16 | uint64(le.Uint16(dport[2*i:])),
		})
		n++
	}
	if n > 0 {
		sh.keys.added(&w.keys, w.flows, n)
	}
}

// intern gives the wanted address entries of s their ids, which the
// Reader's queries share (interner.rawOf), and each its candidate.
func (w *flowWorker) intern(s *segment) {
	sh := w.sh
	ids := sh.st.raw.rawOf(s)
	keys := sh.st.raw.keysNow()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Workers take their snapshots in any order, and the interner only
	// grows: keep the longest, or a worker that took its snapshot before
	// another's ids were interned would hide them.
	if len(keys) > len(sh.rawKeys) {
		sh.rawKeys = keys
	}
	for e, x := range w.raw {
		if x != wanted {
			continue
		}
		id := ids[e]
		w.raw[e] = id
		for int(id) >= len(sh.rawCand) {
			sh.rawCand = append(sh.rawCand, noID)
		}
		if w.cand != nil {
			sh.rawCand[id] = w.cand[e]
		}
	}
}

// flowCtx is the part of a flow.Key that is neither an address nor a
// port.
type flowCtx struct {
	srcMAC, dstMAC [6]byte
	ifindex        uint32
	ethType, vlan  uint16
	dir, proto     uint8
	group          uint64 // the name groupings' group, else 0
}

// ctxInterner gives each distinct flowCtx of a query one id. It is
// consulted once per distinct context per segment, not per record.
type ctxInterner struct {
	mu   sync.RWMutex // Lock to add, RLock to read list while others add
	ids  map[flowCtx]uint32
	list []flowCtx // by id
	// cands are, under a name grouping, the candidate of each context's
	// group (groups), found as the context is added: candOf reads it.
	cands  []uint32
	groups *u64Map
}

func (c *ctxInterner) id(x flowCtx) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = make(map[flowCtx]uint32)
	}
	id, ok := c.ids[x]
	if !ok {
		id = uint32(len(c.list))
		c.ids[x] = id
		c.list = append(c.list, x)
		if c.groups != nil {
			c.cands = append(c.cands, c.groups.find(x.group))
		}
	}
	return id
}

// ctxCache maps one segment's contexts, as a row holds them (MAC
// dictionary indices and the fixed columns), to query-wide ids. Its keys
// are three words, compared and hashed as such: a row's context is looked
// up for every candidate record, and an array key, copied whole, cost
// several times the lookup.
type ctxCache struct {
	slots []ctxSlot
	shift uint
	used  int
	// The segment's columns of the context.
	s                                        *segment
	smac, dmac, ifindex, ethType, vlan, dirs []byte
	protos                                   []byte
}

type ctxSlot struct {
	k0, k1, g uint64
	k2        uint16
	id        uint32 // id+1; 0 marks an empty slot
}

func (c *ctxCache) reset(s *segment, vlanCol []byte) {
	if c.slots == nil {
		c.slots = make([]ctxSlot, 1<<8)
		c.shift = 64 - 8
	} else {
		clear(c.slots)
	}
	c.used = 0
	cols := &s.cols
	c.s, c.vlan = s, vlanCol
	c.smac, c.dmac, c.ifindex, c.ethType = cols[cSrcMAC], cols[cDstMAC], cols[cIfIndex], cols[cEthType]
	c.dirs, c.protos = cols[cDirection], cols[cProto]
}

// id returns the context id of row i of the segment of the last reset, in
// name group g.
func (c *ctxCache) id(i int, g uint64, in *ctxInterner) uint32 {
	smac, dmac := le.Uint32(c.smac[4*i:]), le.Uint32(c.dmac[4*i:])
	var vlan uint16
	if len(c.vlan) > 0 {
		vlan = le.Uint16(c.vlan[2*i:])
	}
	k0 := uint64(smac)<<32 | uint64(dmac)
	k1 := uint64(le.Uint32(c.ifindex[4*i:]))<<32 | uint64(le.Uint16(c.ethType[2*i:]))<<16 | uint64(vlan)
	k2 := uint16(c.dirs[i])<<8 | uint16(c.protos[i])
	if c.used*4 >= len(c.slots)*3 {
		c.grow()
	}
	mask := uint64(len(c.slots) - 1)
	for h := (ctxHash(k0, k1, k2, g) * hashMul) >> c.shift; ; h = (h + 1) & mask {
		sl := &c.slots[h]
		if sl.id == 0 {
			id := in.id(flowCtx{
				srcMAC: c.s.mac(smac), dstMAC: c.s.mac(dmac),
				ifindex: uint32(k1 >> 32), ethType: uint16(k1 >> 16), vlan: vlan,
				dir: uint8(k2 >> 8), proto: uint8(k2), group: g,
			})
			*sl = ctxSlot{k0: k0, k1: k1, g: g, k2: k2, id: id + 1}
			c.used++
			return id
		}
		if sl.k0 == k0 && sl.k1 == k1 && sl.k2 == k2 && sl.g == g {
			return sl.id - 1
		}
	}
}

func ctxHash(k0, k1 uint64, k2 uint16, g uint64) uint64 {
	return ((k0*hashMul^k1)*partMul ^ uint64(k2)) + g*partMul
}

func (c *ctxCache) grow() {
	old := c.slots
	logSize := 64 - c.shift + 1
	c.slots = make([]ctxSlot, 1<<logSize)
	c.shift = 64 - logSize
	mask := uint64(len(c.slots) - 1)
	for _, sl := range old {
		if sl.id == 0 {
			continue
		}
		h := (ctxHash(sl.k0, sl.k1, sl.k2, sl.g) * hashMul) >> c.shift
		for ; c.slots[h].id != 0; h = (h + 1) & mask {
		}
		c.slots[h] = sl
	}
}

// fieldCol returns the column that holds flow field name in this version
// of the segment format, if there is one: columns are the fields' store
// kinds in flow's registry, so a column added there is found here.
func fieldCol(name string) (int, bool) {
	f, ok := flow.FieldByName(name)
	if !ok || f.Wire.Store < 1 || f.Wire.Store > numCols {
		return 0, false
	}
	return int(f.Wire.Store) - 1, true
}
