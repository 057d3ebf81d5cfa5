package flows

import (
	"loupe/internal/datapath"
	"loupe/internal/flow"
)

// Signals are the kernel signals, as the flows unit asks for them at each
// eviction (the signals unit).
type Signals interface {
	// Drain ends the interval and returns every 5-tuple's signals since
	// the previous Drain.
	Drain() (map[datapath.SignalKey]datapath.SignalValues, error)
	// Up reports whether a signal is attached: a record's field of a
	// signal that is not is absent, not zero.
	Up(datapath.Signal) bool
	// Claim hands the intervals to the caller of Drain before its first:
	// nothing else drains them from then on.
	Claim()
}

// TCSignals are the signals read at the TC hook (the dns unit): each
// flow's last DNS exchange and TCP handshake RTT (ns) of the interval the
// last table swap ended.
type TCSignals interface {
	DrainFlows() (map[flow.Key]flow.DNSExchange, map[flow.Key]uint64, error)
}

// SetTCSignals makes the unit put the DNS exchanges and handshake RTTs of
// t on its records, draining t at each eviction of the running tables.
// Call it before Open.
func (u *Unit) SetTCSignals(t TCSignals) { u.tc = t }

// SetSignals makes the unit put the kernel signals on its records: at each
// eviction of the running tables it drains s, and the evictor joins what s
// returns onto the interval's records (flow/join.go). The intervals are
// the unit's from now on, so that a run shorter than one eviction
// interval keeps its signals for the final eviction. Call it before Open.
func (u *Unit) SetSignals(s Signals) {
	u.signals = s
	s.Claim()
}

// extras is the evictor's EvictorConfig.Extras: the tunnels beside table
// d, and for a table of the running set the interval's kernel signals.
func (u *Unit) extras(d flow.Drain, running bool) flow.Extras {
	var x flow.Extras
	if running && u.signals != nil {
		// The signals unit counts and logs its own drain errors; what it
		// returns with one is still the interval's.
		m, _ := u.signals.Drain()
		x.Sockets, x.Drops = signalExtras(m, u.signals.Up(datapath.SignalRetransmits))
	}
	if running && u.tc != nil {
		// Counted and logged by the dns unit, like the signals'.
		x.DNS, x.Handshakes, _ = u.tc.DrainFlows()
	}
	t, err := datapath.Tunnels(d)
	if err != nil {
		u.tunnelErrors.Add(1)
		u.log.Warn("reading the tunnel table beside a flow table failed: this interval's records have no tunnel fields", "err", err)
	}
	x.Tunnels = t
	return x
}

// signalExtras turns an interval's signals into what the evictor joins:
// a socket's RTT and retransmissions (retransmissions present, 0 included,
// when their signal is on), and a 5-tuple's drops with their packets by
// reason.
func signalExtras(m map[datapath.SignalKey]datapath.SignalValues, retransmitsUp bool) (map[flow.FiveTuple]flow.SocketSignals, map[flow.FiveTuple]flow.Drops) {
	sockets := make(map[flow.FiveTuple]flow.SocketSignals)
	drops := make(map[flow.FiveTuple]flow.Drops)
	for k, v := range m {
		ft := flow.FiveTuple{SrcAddr: k.SrcAddr, DstAddr: k.DstAddr, SrcPort: k.SrcPort, DstPort: k.DstPort, Proto: k.Proto}
		if v.RTT != nil || v.Retransmits > 0 {
			s := flow.SocketSignals{HasRetransmits: retransmitsUp, Retransmits: v.Retransmits}
			if r := v.RTT; r != nil {
				s.HasRTT, s.RTTMinNs, s.RTTMaxNs, s.RTTLastNs = true, r.MinNs, r.MaxNs, r.LastNs
			}
			sockets[ft] = s
		}
		if len(v.Drops) > 0 {
			d := flow.Drops{Reasons: make(flow.DropReasons, len(v.Drops))}
			for reason, c := range v.Drops {
				d.Packets += c.Packets
				d.Bytes += c.Bytes
				d.Reasons[reason] += c.Packets
			}
			drops[ft] = d
		}
	}
	return sockets, drops
}
