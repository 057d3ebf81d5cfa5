package flow

import "fmt"

// EventReason says why the datapath diverted a packet to the ring buffer.
type EventReason uint32

const (
	// ReasonMapFull: the flow table held its budget of flows.
	ReasonMapFull EventReason = 1
	// ReasonMapBusy: the insert failed for another reason (a bucket lock
	// taken by a program this CPU interrupted).
	ReasonMapBusy EventReason = 2
	// ReasonOffPath: off-path mode (map_type ringbuf), where every
	// packet goes through the ring buffer and is counted in userspace.
	ReasonOffPath EventReason = 3
)

func (r EventReason) String() string {
	switch r {
	case ReasonMapFull:
		return "map_full"
	case ReasonMapBusy:
		return "map_busy"
	case ReasonOffPath:
		return "off_path"
	}
	return fmt.Sprintf("reason_%d", uint32(r))
}

// Event is one packet's contribution to a flow, delivered through the ring
// buffer because the flow table refused it, or because the datapath runs
// off-path.
type Event struct {
	Key    Key
	Stats  Stats
	Reason EventReason
	// Errno is the positive errno of the failed table insert.
	Errno int32
	// RingPos is the ring-buffer position just after the event: once the
	// records it went into are stored, the space up to it can be given
	// back (flow.Mark).
	RingPos uint64
}
