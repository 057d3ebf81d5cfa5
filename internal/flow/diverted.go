package flow

import "sync"

// diverted is the running set's aggregate of the packets diverted to the
// ring buffer since the last eviction took it: one entry per flow, and the
// ring position after the last event added.
//
// The evictor's event reader adds to it on a goroutine of its own, while
// evictions take it whole under the lock and emit it without the lock, so
// that reading the ring buffer never waits for the sinks (the store writes
// and fsyncs a segment at every eviction).
//
// It needs no bound of its own: the ring buffer's space is given back only
// once the records an event went into are flushed (Mark), so the events
// held here and in an eviction under way are all in the ring buffer's
// unreleased space: at most one flow per 136-byte record, ringbuf_size /
// 136 in all. Past that the datapath itself refuses packets and counts
// them (loupe_dropped_packets_total); nothing that was read is dropped.
type diverted struct {
	mu      sync.Mutex
	flows   map[Key]Stats
	spare   map[Key]Stats // an emptied map, for the next take
	ringPos uint64
	// full holds one signal once a packet was diverted because the table
	// was full since the last take: the evictor then evicts early.
	full chan struct{}
}

func newDiverted(ringStart uint64) *diverted {
	return &diverted{flows: make(map[Key]Stats), ringPos: ringStart, full: make(chan struct{}, 1)}
}

// add merges one event into the aggregate.
func (d *diverted) add(ev *Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	addStats(d.flows, &ev.Key, &ev.Stats)
	d.ringPos = max(d.ringPos, ev.RingPos)
	if ev.Reason == ReasonMapFull {
		select {
		case d.full <- struct{}{}:
		default: // already signalled
		}
	}
}

// take returns the aggregate and the ring position it reaches, and starts
// an empty one; a signal of a full table it includes is consumed with it.
func (d *diverted) take() (map[Key]Stats, uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	flows := d.flows
	d.flows = d.spare
	if d.flows == nil {
		d.flows = make(map[Key]Stats)
	}
	d.spare = nil
	select {
	case <-d.full:
	default:
	}
	return flows, d.ringPos
}

// putBack merges flows that were taken but not emitted (the table they
// were to join could not be read) into the aggregate, for the next
// eviction; the ring position stays, since it only grows.
func (d *diverted) putBack(flows map[Key]Stats) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, s := range flows {
		addStats(d.flows, &k, &s)
	}
	clear(flows)
	d.spare = flows
}

// recycle keeps a map that take returned, once emitted and emptied, so
// that a steady flood of diverted packets does not grow a new map at every
// eviction.
func (d *diverted) recycle(flows map[Key]Stats) {
	d.mu.Lock()
	d.spare = flows
	d.mu.Unlock()
}

func addStats(flows map[Key]Stats, k *Key, st *Stats) {
	s := flows[*k]
	s.Add(st)
	flows[*k] = s
}
