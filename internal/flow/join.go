package flow

import (
	"bytes"
	"cmp"
	"maps"
	"slices"
	"time"

	"loupe/internal/tunnel"
)

// The join: what the kernel measured beside a flow table over its interval
// (the kernel signals, per 5-tuple; the tunnels, DNS exchanges and
// handshakes seen at the hooks, per flow key) goes onto the records the
// evictor makes of that table, in this one place.
//
//   - A tunnel's outer side, a DNS exchange and a handshake RTT go on the
//     record of their flow key; a DNS exchange or a handshake whose flow
//     has no record in the interval (a query that timed out, say) gets a
//     record of that key with no packets.
//   - A socket's signals (RTT, retransmissions) carry a 5-tuple but no
//     interface: they go on exactly one record of the interval, so that a
//     sum over records never counts them twice: the egress record of the
//     5-tuple (the socket's own packets on their way out), the one that
//     came through no tunnel first (the packets as the socket sent them,
//     not their encapsulated copies on the underlay), then the lowest
//     ifindex; else a record of its own, on no interface.
//   - A 5-tuple's drops go on one record of the dropped packets' 5-tuple:
//     an ingress record first (a packet is mostly dropped after the last
//     hook that received it), else an egress one, with the same order
//     after that; else a record of their own, on no interface.
//
// A record of signals on no interface has the 5-tuple's key with ifindex
// 0, an empty interface name, no MAC, no VLAN and no packets; it spans the
// interval. Its direction is egress for a socket's signals (whose 5-tuple
// has the local end as source, as egress records have) and ingress for
// drops, which says nothing more.

// SocketSignals are what the kernel measured of one TCP socket over an
// interval.
type SocketSignals struct {
	// HasRTT says the socket's smoothed RTT was sampled; the three
	// values are then its minimum, maximum and last, in nanoseconds.
	HasRTT                        bool
	RTTMinNs, RTTMaxNs, RTTLastNs uint64
	// HasRetransmits says the retransmissions were counted (their signal
	// is on); Retransmits, 0 included, is then what was counted.
	HasRetransmits bool
	Retransmits    uint64
}

// Drops are the packets of one 5-tuple the kernel dropped over an interval.
type Drops struct {
	Packets, Bytes uint64
	// Reasons are the packets by drop reason; never changed afterwards.
	Reasons DropReasons
}

// Extras are what was measured beside a table over its interval, which the
// evictor joins onto the records it makes of the table
// (EvictorConfig.Extras). Any of them may be nil.
type Extras struct {
	// Sockets are the TCP sockets' signals by their 5-tuple, local end as
	// source.
	Sockets map[FiveTuple]SocketSignals
	// Drops are by the dropped packets' 5-tuple; the zero 5-tuple holds
	// the drops whose headers could not be read.
	Drops map[FiveTuple]Drops
	// Tunnels are the outer sides of the tunnelled flows, by flow key.
	Tunnels map[Key]tunnel.Info
	// DNS are the flows' DNS exchanges, and Handshakes their TCP
	// handshake RTTs in nanoseconds, by flow key.
	DNS        map[Key]DNSExchange
	Handshakes map[Key]uint64
}

// joiner joins one table's extras onto its records as they are made.
type joiner struct {
	x Extras
	// held are the records of the 5-tuples that have signals, kept back
	// until the table's every record is known: which of them gets the
	// signals depends on all of them. At most a few records for each
	// 5-tuple of the signal tables, which are bounded.
	held map[FiveTuple][]Record
	// placed are the keys of DNS and Handshakes that found their record.
	placed map[Key]bool
}

func newJoiner(x Extras) *joiner {
	return &joiner{x: x, held: make(map[FiveTuple][]Record), placed: make(map[Key]bool)}
}

// take puts what is known of r's flow by its key on r, and reports whether
// it keeps r back for finish, which places the signals of its 5-tuple. An
// aggregate has no 5-tuple: it takes no signal.
func (j *joiner) take(r *Record) (held bool) {
	j.byKey(r)
	if r.AggPrefix != 0 || len(j.x.Sockets) == 0 && len(j.x.Drops) == 0 {
		return false
	}
	ft := r.FiveTuple()
	_, s := j.x.Sockets[ft]
	_, d := j.x.Drops[ft]
	if !s && !d {
		return false
	}
	j.held[ft] = append(j.held[ft], *r)
	return true
}

// byKey puts r's tunnel, DNS exchange and handshake on it.
func (j *joiner) byKey(r *Record) {
	if t, ok := j.x.Tunnels[r.Key]; ok {
		r.SetTunnel(&t)
	}
	if x, ok := j.x.DNS[r.Key]; ok && !j.placed[r.Key] {
		r.SetDNS(&x)
		j.placed[r.Key] = true
	}
	if ns, ok := j.x.Handshakes[r.Key]; ok && !r.Has.Any(HasHandshakeRTT) {
		r.SetHandshakeRTT(ns)
		j.placed[r.Key] = true
	}
}

// finish places every 5-tuple's signals on one record and returns the held
// records, then a record on no interface for each 5-tuple whose signals
// found none to go on, and a record with no packets for each DNS exchange
// and handshake whose flow had none, spanning first to last. The order is
// fixed: by 5-tuple, then as the records came; then by key.
func (j *joiner) finish(first, last time.Time) []Record {
	var out []Record
	var alone []Key
	for k := range j.x.DNS {
		if !j.placed[k] {
			alone = append(alone, k)
		}
	}
	for k := range j.x.Handshakes {
		if _, dns := j.x.DNS[k]; !dns && !j.placed[k] {
			alone = append(alone, k)
		}
	}
	slices.SortFunc(alone, compareKeys)
	for _, k := range alone {
		r := Record{Key: k, FirstSeen: first, LastSeen: last, Sampling: 1}
		if !j.take(&r) {
			out = append(out, r)
		}
	}
	for _, ft := range sortedTuples(j.x.Sockets, j.x.Drops) {
		recs := j.held[ft]
		held := len(recs)
		if s, ok := j.x.Sockets[ft]; ok {
			i := best(recs, func(r *Record) (bool, int) { return r.Direction == Egress, 0 })
			if i < 0 {
				recs = append(recs, orphan(&ft, Egress, first, last))
				i = len(recs) - 1
			}
			s.apply(&recs[i])
		}
		if d, ok := j.x.Drops[ft]; ok {
			// Ingress first. Without a record of the 5-tuple, the
			// socket's record on no interface, if it got one.
			i := best(recs[:held], func(r *Record) (bool, int) { return true, int(r.Direction) })
			if i < 0 && len(recs) > held {
				i = held
			}
			if i < 0 {
				recs = append(recs, orphan(&ft, Ingress, first, last))
				i = len(recs) - 1
			}
			recs[i].SetDrops(d.Packets, d.Bytes, d.Reasons)
		}
		out = append(out, recs...)
	}
	clear(j.held)
	return out
}

// compareKeys orders flow keys by their 5-tuple, then interface and
// direction, then the rest.
func compareKeys(a, b Key) int {
	return cmp.Or(compareTuples(a.FiveTuple(), b.FiveTuple()), cmp.Compare(a.IfIndex, b.IfIndex), cmp.Compare(a.Direction, b.Direction),
		cmp.Compare(a.EtherType, b.EtherType), cmp.Compare(a.VlanID, b.VlanID), bytes.Compare(a.SrcMAC[:], b.SrcMAC[:]),
		bytes.Compare(a.DstMAC[:], b.DstMAC[:]), cmp.Compare(a.AggPrefix, b.AggPrefix))
}

func (s *SocketSignals) apply(r *Record) {
	if s.HasRTT {
		r.SetRTT(s.RTTMinNs, s.RTTMaxNs, s.RTTLastNs)
	}
	if s.HasRetransmits {
		r.SetRetransmits(s.Retransmits)
	}
}

// best returns the index of the record of recs that a 5-tuple's signals go
// on, or -1 if rank accepts none: the lowest rank, then the records that
// came through no tunnel, then the lowest ifindex, VLAN and MACs.
func best(recs []Record, rank func(*Record) (ok bool, rank int)) int {
	bi, brank := -1, 0
	for i := range recs {
		r := &recs[i]
		ok, rk := rank(r)
		if !ok {
			continue
		}
		if bi < 0 || cmp.Or(cmp.Compare(rk, brank), compareRecords(r, &recs[bi])) < 0 {
			bi, brank = i, rk
		}
	}
	return bi
}

func compareRecords(a, b *Record) int {
	tun := func(r *Record) int {
		if r.Has.Any(HasTunnelType) {
			return 1
		}
		return 0
	}
	return cmp.Or(cmp.Compare(tun(a), tun(b)), cmp.Compare(a.IfIndex, b.IfIndex), cmp.Compare(a.VlanID, b.VlanID),
		bytes.Compare(a.SrcMAC[:], b.SrcMAC[:]), bytes.Compare(a.DstMAC[:], b.DstMAC[:]))
}

// orphan is the record of a 5-tuple's signals that no record carries.
func orphan(ft *FiveTuple, dir Direction, first, last time.Time) Record {
	return Record{Key: ft.key(dir), FirstSeen: first, LastSeen: last, Sampling: 1}
}

// sortedTuples lists the 5-tuples of both maps once each, in byte order.
func sortedTuples(a map[FiveTuple]SocketSignals, b map[FiveTuple]Drops) []FiveTuple {
	all := slices.Collect(maps.Keys(a))
	for ft := range b {
		if _, ok := a[ft]; !ok {
			all = append(all, ft)
		}
	}
	slices.SortFunc(all, compareTuples)
	return all
}

func compareTuples(a, b FiveTuple) int {
	return cmp.Or(bytes.Compare(a.SrcAddr[:], b.SrcAddr[:]), bytes.Compare(a.DstAddr[:], b.DstAddr[:]),
		cmp.Compare(a.SrcPort, b.SrcPort), cmp.Compare(a.DstPort, b.DstPort), cmp.Compare(a.Proto, b.Proto))
}
