package datapath

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
)

// The handshake capability's maps (bpf/handshake/handshake.h): handshakes
// in progress, the last handshake RTT of each flow per interval (a pair
// that swaps with the flow tables), counters and the RTT histogram.

// HandshakeSizes size the handshake capability's tables.
type HandshakeSizes struct {
	// Pending is the number of handshakes in progress followed at once:
	// an LRU table, past which the oldest is forgotten (a SYN flood does
	// not lock out the next connections).
	Pending int
	// Flows is the number of flows with a handshake RTT per interval
	// (each table of the pair); past it, results are counted
	// (results_full).
	Flows int
}

// DefaultHandshakeSizes are the sizes when the configuration says nothing.
func DefaultHandshakeSizes() HandshakeSizes { return HandshakeSizes{Pending: 8192, Flows: 8192} }

// sizeHandshake sizes the handshake maps of spec; off, at their smallest.
func sizeHandshake(spec *ebpf.CollectionSpec, s HandshakeSizes, on bool) error {
	if !on {
		s = HandshakeSizes{Pending: 1, Flows: 1}
	}
	if err := checkTableSize("handshake pending", s.Pending); err != nil {
		return err
	}
	if err := checkTableSize("handshake flows", s.Flows); err != nil {
		return err
	}
	spec.Maps[loupeMapHandshakePending].MaxEntries = uint32(s.Pending)
	spec.Maps[loupeMapHandshakeFlowsA].MaxEntries = uint32(s.Flows)
	spec.Maps[loupeMapHandshakeFlowsB].MaxEntries = uint32(s.Flows)
	// The slots of the numbers SYN-ACKs await: twice the handshakes
	// followed, so that few share a slot (handshake.h).
	slots := roundPow2(2 * s.Pending)
	if !on {
		slots = 1
	}
	spec.Maps[loupeMapHandshakeSynacks].MaxEntries = uint32(slots)
	if err := spec.Variables[loupeVarHandshakeSlotMask].Set(uint32(slots - 1)); err != nil {
		return fmt.Errorf("set handshake slots: %w", err)
	}
	return nil
}

// HandshakeResult is a TCP handshake timed at the hook, on the client's
// flow (the one of the SYN and the handshake's ACK).
type HandshakeResult struct {
	// RTT is SynToSynAck + SynAckToAck: the connection's round trip as
	// the path through this hook sees it (handshake_rtt_ns).
	RTT time.Duration
	// SynToSynAck is the round trip towards the server, SynAckToAck the
	// one towards the client, from this hook.
	SynToSynAck time.Duration
	SynAckToAck time.Duration
}

// DrainHandshakes ends the handshake results' interval: it returns, by
// flow, the last handshake timed in the interval the flow tables' last
// swap (Rotate) ended, and forgets them (as DrainDNS).
func (d *Datapath) DrainHandshakes() (map[flow.Key]HandshakeResult, error) {
	if !d.hasCapability("handshake") {
		return nil, errors.New("the handshake capability is not loaded")
	}
	out := map[flow.Key]HandshakeResult{}
	err := drainStandby(d, d.objs.HandshakeFlowsA, d.objs.HandshakeFlowsB, func(k *flow.Key, v *loupeHandshakeResult) {
		out[*k] = HandshakeResult{
			RTT:         time.Duration(v.RttNs),
			SynToSynAck: time.Duration(v.SynSynackNs),
			SynAckToAck: time.Duration(v.SynackAckNs),
		}
	})
	return out, err
}

// HandshakeStats reads the histogram of every handshake RTT timed, summed
// over the CPUs.
func (d *Datapath) HandshakeStats() (LatencyHist, error) {
	var h LatencyHist
	per, err := perCPUValue[loupeHandshakeStats](d, d.objs.HandshakeStats)
	if err != nil {
		return h, err
	}
	for _, v := range per {
		h.add(v.RttNs, v.Hist[:])
	}
	return h, nil
}

// handshakeCounterNames follows enum handshake_counter.
var handshakeCounterNames = [loupeHandshakeCounterHANDSHAKE_COUNTER_MAX]string{
	loupeHandshakeCounterHANDSHAKE_SYNS:               "syns",
	loupeHandshakeCounterHANDSHAKE_MEASURED:           "measured",
	loupeHandshakeCounterHANDSHAKE_RETRANSMITTED:      "retransmitted",
	loupeHandshakeCounterHANDSHAKE_SYNACK_WITHOUT_SYN: "synack_without_syn",
	loupeHandshakeCounterHANDSHAKE_SYNACK_MISMATCH:    "synack_mismatch",
	loupeHandshakeCounterHANDSHAKE_PENDING_FULL:       "pending_full",
	loupeHandshakeCounterHANDSHAKE_RESULTS_FULL:       "results_full",
}

// HandshakeCounters reads and sums the handshake capability's per-CPU
// counters.
func (d *Datapath) HandshakeCounters() ([]Counter, error) {
	return sumCounters(d.objs.HandshakeCounters, handshakeCounterNames[:], d.ncpu)
}
