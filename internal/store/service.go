package store

import (
	"context"
	"math"
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

// endpoint order: a connection's key holds its lower (address id, port)
// endpoint first; dir 0 is a record sent by that endpoint.
func connKey(srcID uint32, sp uint16, dstID uint32, dp uint16) (k flowKey, dir int) {
	if srcID < dstID || (srcID == dstID && sp <= dp) {
		return flowKey{uint64(srcID)<<32 | uint64(dstID), 1<<32 | uint64(sp)<<16 | uint64(dp)}, 0
	}
	return flowKey{uint64(dstID)<<32 | uint64(srcID), 1<<32 | uint64(dp)<<16 | uint64(sp)}, 1
}

// synInfo is what a connection's SYN records said, per direction.
type synInfo struct {
	first  [2]int64 // earliest first_seen of a record with SYN; MaxInt64: none
	alone  [2]bool  // a record with SYN and without ACK
	client int8     // the direction the client sent; -1: unknown
}

func (v *synInfo) resolve() {
	v.client = -1
	switch {
	case v.alone[0] != v.alone[1]:
		if v.alone[0] {
			v.client = 0
		} else {
			v.client = 1
		}
	case v.first[0] != math.MaxInt64 && v.first[1] != math.MaxInt64 && v.first[0] != v.first[1]:
		if v.first[0] < v.first[1] {
			v.client = 0
		} else {
			v.client = 1
		}
	}
}

type synSlot struct {
	k flowKey
	v synInfo
}

// synTable is an open-addressing table of connections.
type synTable struct {
	slots []synSlot
	shift uint
	used  int
}

func (t *synTable) get(k flowKey) *synInfo {
	if t.used*4 >= len(t.slots)*3 {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for h := (k.hash() * hashMul) >> t.shift; ; h = (h + 1) & mask {
		sl := &t.slots[h]
		if sl.k == k {
			return &sl.v
		}
		if sl.k.b == 0 {
			*sl = synSlot{k: k, v: synInfo{first: [2]int64{math.MaxInt64, math.MaxInt64}}}
			t.used++
			return &sl.v
		}
	}
}

func (t *synTable) grow() {
	old := t.slots
	logSize := uint(8)
	if old != nil {
		logSize = 64 - t.shift + 1
	}
	t.slots = make([]synSlot, 1<<logSize)
	t.shift = 64 - logSize
	mask := uint64(len(t.slots) - 1)
	for _, sl := range old {
		if sl.k.b == 0 {
			continue
		}
		h := (sl.k.hash() * hashMul) >> t.shift
		for t.slots[h].k.b != 0 {
			h = (h + 1) & mask
		}
		t.slots[h] = sl
	}
}

// clientTable maps a connection to the direction its client sent.
type clientTable struct {
	slots []clientSlot
	shift uint
	used  int
}

type clientSlot struct {
	k      flowKey
	client int8
}

func (t *clientTable) put(k flowKey, client int8) {
	if t.used*4 >= len(t.slots)*3 {
		old := t.slots
		logSize := uint(4)
		if old != nil {
			logSize = 64 - t.shift + 1
		}
		t.slots, t.shift, t.used = make([]clientSlot, 1<<logSize), 64-logSize, 0
		for _, sl := range old {
			if sl.k.b != 0 {
				t.put(sl.k, sl.client)
			}
		}
	}
	mask := uint64(len(t.slots) - 1)
	h := (k.hash() * hashMul) >> t.shift
	for t.slots[h].k.b != 0 {
		h = (h + 1) & mask
	}
	t.slots[h] = clientSlot{k, client}
	t.used++
}

func (t *clientTable) find(k flowKey) (int8, bool) {
	if t.used == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for h := (k.hash() * hashMul) >> t.shift; ; h = (h + 1) & mask {
		sl := &t.slots[h]
		if sl.k == k {
			return sl.client, true
		}
		if sl.k.b == 0 {
			return 0, false
		}
	}
}

// serviceTable is every connection of the window with a SYN record, in
// partitions like keySet. It is read without locks once built.
type serviceTable struct {
	parts [1 << partBits]struct {
		mu  sync.Mutex
		t   synTable    // while the pass runs
		res clientTable // then: the connections whose client is known
	}
	bits []uint64 // a bit set for each connection's hash (modulo its size)
	mask uint64
}

func (t *serviceTable) set(h uint64)      { h &= t.mask; t.bits[h/64] |= 1 << (h % 64) }
func (t *serviceTable) has(h uint64) bool { h &= t.mask; return t.bits[h/64]&(1<<(h%64)) != 0 }

type synPending struct {
	k     flowKey
	first int64
	dir   uint8
	alone bool
}

type synBuf [1 << partBits][]synPending

func (t *serviceTable) flush(b *synBuf) {
	for i := range b {
		if len(b[i]) == 0 {
			continue
		}
		p := &t.parts[i]
		p.mu.Lock()
		for _, e := range b[i] {
			v := p.t.get(e.k)
			v.first[e.dir] = min(v.first[e.dir], e.first)
			v.alone[e.dir] = v.alone[e.dir] || e.alone
		}
		p.mu.Unlock()
		b[i] = b[i][:0]
	}
}

// port returns the service port of a record with transport ports, given
// its canonical address ids.
func (t *serviceTable) port(srcID, dstID uint32, sp, dp uint16, proto uint8) uint16 {
	if proto == flow.ProtoTCP {
		k, dir := connKey(srcID, sp, dstID, dp)
		if h := k.hash(); !t.has(h) {
			// No SYN of this connection in the window.
		} else if client, ok := t.parts[h>>(64-partBits)].res.find(k); ok {
			if int(client) == dir {
				return dp // the record's sender is the client
			}
			return sp
		}
	}
	return min(sp, dp)
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

// servicePass reads the SYN records of the query's window (whatever its
// other filters: a reply's direction may be filtered out but still says
// which side answered) and resolves each connection's client. It checks
// each segment as the aggregation pass does (topState.check), so both skip
// the same damaged segments; the aggregation pass reports them.
func (r *Reader) servicePass(ctx context.Context, sn *snapshot, st *topState) (*serviceTable, error) {
	win := st.cq.window()
	t := &serviceTable{}
	ws := make([]*synWorker, maxWorkers())
	for i := range ws {
		ws[i] = &synWorker{}
	}
	var scratch Report
	err := r.parallel(ctx, sn, &scratch, func(wi int, s *segment) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		w := ws[wi]
		f, ok, err := win.forSegment(s)
		if err != nil || !ok {
			return err
		}
		if _, _, err := st.check(s); err != nil {
			return err
		}
		c := &s.cols
		flags, proto, eth := c[cTCPFlags], c[cProto], c[cEthType]
		simple := f.simple()
		remapped := false
		for i := range s.n {
			fl := le.Uint16(flags[2*i:])
			if fl&flow.TCPSyn == 0 || proto[i] != flow.ProtoTCP || !hasPorts(le.Uint16(eth[2*i:]), flow.ProtoTCP) {
				continue
			}
			if !simple && !f.match(s, i) {
				continue
			}
			if !remapped {
				// Lazily: SYN records are few, their addresses fewer.
				w.remap = slices.Grow(w.remap[:0], s.nAddr)[:s.nAddr]
				for j := range w.remap {
					w.remap[j] = noID
				}
				remapped = true
			}
			k, dir := connKey(w.id(s, st.in, le.Uint32(c[cSrcAddr][4*i:])), le.Uint16(c[cSrcPort][2*i:]),
				w.id(s, st.in, le.Uint32(c[cDstAddr][4*i:])), le.Uint16(c[cDstPort][2*i:]))
			p := k.hash() >> (64 - partBits)
			w.buf[p] = append(w.buf[p], synPending{k: k, first: int64(le.Uint64(c[cFirst][8*i:])), dir: uint8(dir), alone: fl&flow.TCPAck == 0})
		}
		t.flush(&w.buf)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Keep only the connections whose client is known, in small slots,
	// and one bit per connection hash (16 bits per connection): most
	// records' connections had no decisive SYN in the window, and the bit
	// says so without a trip to the table.
	n := 0
	for i := range t.parts {
		p := &t.parts[i]
		for j := range p.t.slots {
			if sl := &p.t.slots[j]; sl.k.b != 0 {
				sl.v.resolve()
				if sl.v.client >= 0 {
					n++
				}
			}
		}
	}
	t.bits = make([]uint64, max(1, (16*n+63)/64))
	t.mask = uint64(len(t.bits))*64 - 1
	for i := range t.parts {
		p := &t.parts[i]
		for _, sl := range p.t.slots {
			if sl.k.b != 0 && sl.v.client >= 0 {
				p.res.put(sl.k, sl.v.client)
				t.set(sl.k.hash())
			}
		}
		p.t = synTable{}
	}
	return t, nil
}

// noID marks an address entry not interned yet.
const noID = ^uint32(0)

// synWorker is one goroutine of the service pass.
type synWorker struct {
	buf   synBuf
	remap []uint32 // global ids of the segment's address entries, noID until needed
}

func (w *synWorker) id(s *segment, in *interner, idx uint32) uint32 {
	if id := w.remap[idx]; id != noID {
		return id
	}
	in.mu.Lock()
	id := in.intern(canonical(s.addrKey(idx)))
	in.mu.Unlock()
	w.remap[idx] = id
	return id
}
