package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"loupe/internal/flow"
)

// Events reads the packets the datapath diverted to the ring buffer because
// the flow table refused them. Their space is given back to the kernel only
// by Release (see ring): a reader that is killed leaves what it had not
// released for the next one.
type Events struct {
	r *ring
}

// ErrDrained is returned by Events.Read once Drain was called and every
// record that was in the ring buffer at that moment has been read.
var ErrDrained = errors.New("ring buffer drained")

// OpenEvents opens a reader on the ring buffer, starting at its consumer
// position or at from, whichever is later: from is the position up to
// which the store already holds the events (flow.Mark.RingPos of this pin
// set), 0 if none. One reader at a time.
func (d *Datapath) OpenEvents(from uint64) (*Events, error) {
	r, err := openRing(d.objs.FlowEvents)
	if err != nil {
		return nil, fmt.Errorf("open flow event ring buffer: %w", err)
	}
	r.skipTo(from)
	return &Events{r: r}, nil
}

// Position is the ring-buffer position the reader starts from, or has read
// up to.
func (e *Events) Position() uint64 { return e.r.position() }

// Read blocks until the next event. The event's RingPos is the position
// after it. It returns ErrDrained after Drain, and os.ErrClosed after Close.
func (e *Events) Read() (flow.Event, error) {
	b, pos, err := e.r.read()
	if err != nil {
		return flow.Event{}, err
	}
	ev, err := decodeEvent(b)
	ev.RingPos = pos
	return ev, err
}

// Release gives the ring buffer's space up to pos back to the kernel:
// call it once the events before pos are stored.
func (e *Events) Release(pos uint64) { e.r.release(pos) }

// Drain makes Read return what is in the ring buffer now, then ErrDrained.
// Called after the programs are detached, it lets the reader finish.
func (e *Events) Drain() error { return e.r.drain() }

// Close interrupts Read and releases the reader (not the space of events
// it read but was not told to release).
func (e *Events) Close() error { return e.r.close() }

const eventSize = int(unsafe.Sizeof(loupeFlowEvent{}))

// flowKeySize is the size of struct flow_key.
const flowKeySize = int(unsafe.Sizeof(loupeFlowKey{}))

// keyFromBytes decodes a struct flow_key in the host's byte order, field by
// field (no reflection: floods of diverted packets and spilled flows are
// when this is hot). b holds at least flowKeySize bytes.
func keyFromBytes(k *flow.Key, b []byte) {
	ne := binary.NativeEndian
	_ = b[flowKeySize-1]
	copy(k.SrcAddr[:], b[0:16])
	copy(k.DstAddr[:], b[16:32])
	copy(k.SrcMAC[:], b[32:38])
	copy(k.DstMAC[:], b[38:44])
	k.IfIndex = ne.Uint32(b[44:])
	k.EtherType = ne.Uint16(b[48:])
	k.SrcPort = ne.Uint16(b[50:])
	k.DstPort = ne.Uint16(b[52:])
	k.VlanID = ne.Uint16(b[54:])
	k.Proto = b[56]
	k.Direction = flow.Direction(b[57])
	k.AggPrefix = b[58]
	// 59: the key's padding.
}

// decodeEvent decodes a struct flow_event in the host's byte order, field
// by field (no reflection: a flood of diverted packets is when this is hot).
func decodeEvent(b []byte) (flow.Event, error) {
	if len(b) < eventSize {
		return flow.Event{}, fmt.Errorf("flow event: %d bytes, want %d", len(b), eventSize)
	}
	ne := binary.NativeEndian
	var ev flow.Event
	keyFromBytes(&ev.Key, b)
	// 60-63: the event's padding, before 8-byte aligned stats.
	s := b[64:]
	ev.Stats = flow.Stats{
		Packets:   ne.Uint64(s[0:]),
		Bytes:     ne.Uint64(s[8:]),
		Segments:  ne.Uint64(s[0:]) + ne.Uint64(s[16:]),
		WireBytes: ne.Uint64(s[8:]) + ne.Uint64(s[24:]),
		FirstSeen: ne.Uint64(s[32:]),
		LastSeen:  ne.Uint64(s[40:]),
		TCPFlags:  uint16(ne.Uint32(s[48:])),
		Sampling:  uint32(ne.Uint16(s[52:])),
		DSCP:      s[54],
	}
	ev.Reason = flow.EventReason(ne.Uint32(s[56:]))
	ev.Errno = -int32(ne.Uint32(s[60:]))
	return ev, nil
}
