package flow

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// Sketch mode: when a flow table is full, the datapath counts the packets of
// further flows into a sketch (internal/sketch) instead of the table. A
// drained table then comes with what its sketch decoded (Spill), and the
// evictor turns it into records (spillRecords):
//
//   - every flow the sketch decoded, with its exact counts (Decoded);
//   - flows whose key is known but whose counts are not (the sketch did not
//     decode completely), and heavy hitters of the intervals before, as
//     count-min estimates with their bounds (Estimated);
//   - per interface and direction, an unattributed record (no addresses,
//     ports or protocol) with what the datapath's exact per-interface
//     totals leave: the flows the sketch could not name.
//
// So an interval's records still add up to what crossed each hook, exactly.
// An estimate is never below its flow's truth; the unattributed record is
// then below its own by as much as the estimates are above theirs, and
// carries the sum of their bounds. Estimates that would take more than the
// unattributed traffic holds are not emitted: their flows stay in it.

// SpillFlow is a flow the sketch holds, by key.
type SpillFlow struct {
	Key     Key
	Packets uint64
	Bytes   uint64
}

// SpillTotal is what spilled into the sketch on one interface and
// direction, exactly.
type SpillTotal struct {
	IfIndex   uint32
	Direction Direction
	Packets   uint64
	Bytes     uint64
}

// Estimate is a count-min estimate of one flow: never below the truth, and
// above it by at most the bounds with probability Confidence.
type Estimate struct {
	Packets, Bytes                 uint64
	MaxErrorPackets, MaxErrorBytes uint64
	Confidence                     float64
}

// Spill is what a drained table's sketch held over its interval.
type Spill struct {
	// Decoded flows, with exact counts.
	Decoded []SpillFlow
	// Unverified flows: key decoded, counts an upper bound.
	Unverified []SpillFlow
	// Undecoded is the number of flows whose key stayed in the sketch.
	Undecoded uint64
	// Totals are exact, per interface and direction.
	Totals []SpillTotal
	// Estimate queries the count-min sketch (nil: none).
	Estimate func(k *Key) Estimate
	// Seen queries the flow filter: whether the flow spilled in the
	// interval (or, at the filter's false-positive rate, not).
	Seen func(k *Key) bool
}

// SketchDrain is a Drain whose table has a sketch behind it.
type SketchDrain interface {
	Drain
	// Spill decodes the sketch of the drained table.
	Spill() (Spill, error)
}

// spillRecord is one record-to-be of a spill.
type spillRecord struct {
	key      Key
	counts   SpillFlow
	accuracy Accuracy
	est      Estimate
}

// spillRecords turns a spill into records-to-be. candidates are keys of
// heavy flows seen before, estimated when the sketch holds traffic it could
// not name; a candidate is estimated only if the flow filter says it
// spilled (without a filter: only if its estimate exceeds its bound, i.e.
// the flow is surely there).
func spillRecords(s *Spill, candidates []Key) []spillRecord {
	type ifdir struct {
		ifindex uint32
		dir     Direction
	}
	left := make(map[ifdir]*SpillTotal, len(s.Totals))
	for _, t := range s.Totals {
		id := ifdir{t.IfIndex, t.Direction}
		if l := left[id]; l != nil {
			l.Packets += t.Packets
			l.Bytes += t.Bytes
			continue
		}
		left[id] = &t
	}
	var out []spillRecord
	// take counts a record's traffic out of its interface's total, or,
	// when the datapath had no slot apart for that interface (its spill
	// went to "other", interface 0), out of that.
	take := func(k *Key, p, b uint64) bool {
		for _, id := range [2]ifdir{{k.IfIndex, k.Direction}, {}} {
			if t := left[id]; t != nil && t.Packets >= p && t.Bytes >= b {
				t.Packets -= p
				t.Bytes -= b
				return true
			}
		}
		return false
	}
	for _, f := range s.Decoded {
		if take(&f.Key, f.Packets, f.Bytes) {
			out = append(out, spillRecord{key: f.Key, counts: f, accuracy: Decoded})
		}
	}
	if s.Estimate != nil && (len(s.Unverified) > 0 || s.Undecoded > 0) {
		known := make(map[Key]bool, len(s.Decoded))
		for _, f := range s.Decoded {
			known[f.Key] = true
		}
		var ests []spillRecord
		add := func(k Key, upper SpillFlow, bounded bool) {
			if known[k] {
				return
			}
			known[k] = true
			if !bounded && s.Seen != nil && !s.Seen(&k) {
				return // did not spill
			}
			e := s.Estimate(&k)
			if bounded {
				e.Packets, e.Bytes = min(e.Packets, upper.Packets), min(e.Bytes, upper.Bytes)
			} else if s.Seen == nil && e.Packets <= e.MaxErrorPackets {
				return // not surely there
			}
			if e.Packets == 0 {
				return
			}
			ests = append(ests, spillRecord{key: k, counts: SpillFlow{Key: k, Packets: e.Packets, Bytes: e.Bytes}, accuracy: Estimated, est: e})
		}
		for _, f := range s.Unverified {
			add(f.Key, f, true)
		}
		for _, k := range candidates {
			add(k, SpillFlow{}, false)
		}
		// Largest first: when the unattributed traffic cannot hold
		// them all, the heavy hitters are the ones named.
		slices.SortFunc(ests, func(a, b spillRecord) int { return cmp.Compare(b.counts.Bytes, a.counts.Bytes) })
		for _, r := range ests {
			if take(&r.key, r.counts.Packets, r.counts.Bytes) {
				out = append(out, r)
			}
		}
	}
	// What is left of each interface's total: the flows no record names,
	// low by what the interface's estimates are high, so its bound is
	// theirs summed, holding when all of theirs do (the union bound).
	type bound struct {
		packets, bytes uint64
		miss           float64
	}
	bounds := make(map[ifdir]*bound)
	for _, r := range out {
		if r.accuracy != Estimated {
			continue
		}
		id := ifdir{r.key.IfIndex, r.key.Direction}
		b := bounds[id]
		if b == nil {
			b = &bound{}
			bounds[id] = b
		}
		b.packets += r.est.MaxErrorPackets
		b.bytes += r.est.MaxErrorBytes
		b.miss += 1 - r.est.Confidence
	}
	for _, total := range s.Totals { // in their order: records come out the same every time
		id := ifdir{total.IfIndex, total.Direction}
		t := *left[id]
		if t.Packets == 0 && t.Bytes == 0 {
			continue
		}
		*left[id] = SpillTotal{} // a pair listed twice is emitted once
		k := Key{IfIndex: t.IfIndex, Direction: t.Direction}
		e := Estimate{Confidence: 1}
		if b := bounds[id]; b != nil {
			e = Estimate{MaxErrorPackets: b.packets, MaxErrorBytes: b.bytes, Confidence: max(0, 1-b.miss)}
		}
		out = append(out, spillRecord{key: k, counts: SpillFlow{Key: k, Packets: t.Packets, Bytes: t.Bytes}, accuracy: Estimated, est: e})
	}
	return out
}

// spill reads what the sketch of d held: zero without a sketch, or when it
// cannot be read (counted, logged: its traffic is then in the datapath's
// spilled counters only).
func (e *Evictor) spill(d Drain) Spill {
	sd, ok := d.(SketchDrain)
	if !ok {
		return Spill{}
	}
	s, err := sd.Spill()
	if err != nil {
		e.spillErrs.Add(1)
		e.log.Error("the sketch behind a full flow table cannot be decoded: its traffic is only in the spilled counters", "err", err)
		return Spill{}
	}
	return s
}

// emitSpill emits the records of a spill. The sketch keeps no times, flags
// or GSO segments (super-packets are not spilled): the records span the
// interval, from cutoff (when the table was made active) to now, and count
// a segment per packet.
func (e *Evictor) emitSpill(ctx context.Context, s *Spill, cutoff uint64) {
	if len(s.Totals) == 0 {
		return
	}
	if s.Undecoded > 0 || len(s.Unverified) > 0 {
		e.spillIncomplete.Add(1)
	}
	first := time.Unix(0, int64(cutoff)+e.wallOffset)
	last := time.Unix(0, int64(e.cfg.Clock.Mono())+e.wallOffset)
	for _, t := range s.Totals {
		e.spillPackets.Add(t.Packets)
		e.spillBytes.Add(t.Bytes)
	}
	for _, r := range spillRecords(s, e.heavy.candidates()) {
		rec := Record{
			Key:       r.key,
			Packets:   r.counts.Packets,
			Bytes:     r.counts.Bytes,
			Segments:  r.counts.Packets,
			WireBytes: r.counts.Bytes,
			FirstSeen: first,
			LastSeen:  last,
			Sampling:  1,
			Accuracy:  r.accuracy,
		}
		switch r.accuracy {
		case Decoded:
			e.spillDecoded.Add(1)
			e.heavy.offer(&r.key, r.counts.Bytes)
		case Estimated:
			e.spillEstimated.Add(1)
			rec.MaxErrorPackets, rec.MaxErrorBytes, rec.ErrorConfidence = r.est.MaxErrorPackets, r.est.MaxErrorBytes, r.est.Confidence
			if r.key.EtherType == 0 {
				e.spillUnattrPackets.Add(r.counts.Packets)
				e.spillUnattrBytes.Add(r.counts.Bytes)
			} else {
				e.heavy.offer(&r.key, r.counts.Bytes)
			}
		}
		e.emitRecord(ctx, rec)
	}
}

// heavyKeep is how many of an interval's heaviest flows are kept as
// candidates for the next interval's estimates.
const heavyKeep = 1024

// heavyFlows keeps the heaviest flows (by bytes) of one interval, in a
// min-heap of at most heavyKeep, and those of the interval before as the
// candidates for its estimates.
type heavyFlows struct {
	heap []heavyFlow
	prev []Key
}

type heavyFlow struct {
	key   Key
	bytes uint64
}

// begin starts an interval: the last one's flows become the candidates.
func (h *heavyFlows) begin() {
	h.prev = h.prev[:0]
	for _, f := range h.heap {
		h.prev = append(h.prev, f.key)
	}
	h.heap = h.heap[:0]
}

// candidates are the heaviest flows of the interval before.
func (h *heavyFlows) candidates() []Key { return h.prev }

// offer keeps k if it is among the heaviest so far.
func (h *heavyFlows) offer(k *Key, bytes uint64) {
	if k.EtherType == 0 {
		return
	}
	if len(h.heap) < heavyKeep {
		h.heap = append(h.heap, heavyFlow{*k, bytes})
		for i := len(h.heap) - 1; i > 0; {
			p := (i - 1) / 2
			if h.heap[p].bytes <= h.heap[i].bytes {
				break
			}
			h.heap[p], h.heap[i] = h.heap[i], h.heap[p]
			i = p
		}
		return
	}
	if bytes <= h.heap[0].bytes {
		return
	}
	h.heap[0] = heavyFlow{*k, bytes}
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(h.heap) && h.heap[l].bytes < h.heap[m].bytes {
			m = l
		}
		if r := l + 1; r < len(h.heap) && h.heap[r].bytes < h.heap[m].bytes {
			m = r
		}
		if m == i {
			return
		}
		h.heap[i], h.heap[m] = h.heap[m], h.heap[i]
		i = m
	}
}
