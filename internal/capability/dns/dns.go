// Package dns is the unit of the two signals Loupe reads at the TC hook
// rather than at a tracepoint: DNS exchanges (latency, response code, query
// name) and the TCP handshake's RTT. Their kernel halves are the dns and
// handshake capabilities of the entry programs (bpf/dns/, bpf/handshake/);
// this unit switches them, drains their results per flow and interval,
// finds the DNS queries that timed out, and serves their health and
// metrics.
//
// Each signal is on by default and switched in dns.*; if the kernel refuses
// the entry programs with them, the agent loads them without, and the unit
// says which signal is off and why (log, loupe status,
// loupe_signal_up{signal}), while every other capability runs.
//
// The unit hands each interval's results, by flow key, to whoever calls
// Drain: the flows capability, right after each table swap, to put them on
// the records of the same interval. Until something does, the unit drains
// them itself, twice per cache_active_timeout, so that the tables never
// fill and its metrics stay current, and logs each result at debug level.
package dns

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/capability"
	"loupe/internal/datapath"
	"loupe/internal/flow"
)

// Name is the unit's name. Its switches in bpf/loupe.c are cfg_cap_dns and
// cfg_cap_handshake.
const Name = "dns"

// The signals of the unit, as loupe_signal_up{signal} names them.
const (
	SignalDNS          = "dns"
	SignalHandshakeRTT = "handshake_rtt"
)

// The capabilities of the entry programs the signals switch.
const (
	capDNS       = "dns"
	capHandshake = "handshake"
)

// Unit is the DNS and handshake RTT capability.
type Unit struct {
	cfg      Config
	interval time.Duration
	log      *slog.Logger

	dp        *datapath.Datapath
	ifaceName func(uint32) string
	refused   error        // the kernel refused the programs with the switches
	state     atomic.Value // string
	// claimed is set by the first Drain from outside the unit: from then
	// on the caller owns the intervals and the unit drains no more.
	claimed atomic.Bool

	mu     sync.Mutex // serialises drains and guards totals
	totals totals
}

// totals are what the drains found since the agent started.
type totals struct {
	dnsResults, timeouts, handshakes uint64
	drainErrors                      uint64
}

// Results are one interval's signals, by flow key: the DNS exchange and
// the handshake RTT of each flow that had one.
type Results struct {
	DNS        map[flow.Key]datapath.DNSResult
	Handshakes map[flow.Key]datapath.HandshakeResult
}

var (
	_ capability.Unit     = (*Unit)(nil)
	_ capability.Switched = (*Unit)(nil)
)

// New returns the unit for cfg; interval is the flows' eviction interval
// (cache_active_timeout), which paces the unit's own drains.
func New(cfg Config, interval time.Duration, log *slog.Logger) *Unit {
	u := &Unit{cfg: cfg, interval: interval, log: log.With("component", Name)}
	u.state.Store("starting")
	return u
}

// Name implements capability.Unit.
func (u *Unit) Name() string { return Name }

// Switches implements capability.Switched: the capabilities the
// configuration turns on.
func (u *Unit) Switches() []string {
	var s []string
	if u.cfg.Enabled {
		s = append(s, capDNS)
	}
	if u.cfg.HandshakeRTT {
		s = append(s, capHandshake)
	}
	return s
}

// Refused implements capability.Switched: the agent runs without the
// unit's switches.
func (u *Unit) Refused(err error) { u.refused = err }

// Open takes the datapath's tables and says what runs.
func (u *Unit) Open(h *capability.Host) error {
	u.dp = h.Datapath
	u.ifaceName = h.IfaceName
	for _, s := range []string{SignalDNS, SignalHandshakeRTT} {
		if u.Up(s) {
			u.log.Info("signal on", "signal", s)
		} else {
			u.log.Warn("signal off", "signal", s, "reason", u.reason(s))
		}
	}
	return nil
}

// on reports whether the configuration turns signal s on.
func (u *Unit) on(s string) bool {
	if s == SignalDNS {
		return u.cfg.Enabled
	}
	return u.cfg.HandshakeRTT
}

// Up reports whether signal s (SignalDNS, SignalHandshakeRTT) runs: a
// record's field for a signal that is not up is absent, not zero.
func (u *Unit) Up(s string) bool {
	return u.dp != nil && u.on(s) && u.refused == nil
}

// SignalsUp implements capability.SignalReporter.
func (u *Unit) SignalsUp() map[string]bool {
	return map[string]bool{SignalDNS: u.Up(SignalDNS), SignalHandshakeRTT: u.Up(SignalHandshakeRTT)}
}

// reason says why signal s is off ("" when it runs).
func (u *Unit) reason(s string) string {
	switch {
	case !u.on(s):
		return "disabled"
	case u.refused != nil:
		return "unavailable: the kernel refused the entry programs with the TC signals: " + u.refused.Error()
	case u.dp == nil:
		return "not loaded"
	}
	return ""
}

// describe is a signal's state in a word, and why it is off.
func (u *Unit) describe(s string) string {
	if u.Up(s) {
		return "running"
	}
	return u.reason(s)
}

// Run drains the results twice per interval until ctx is done, unless
// something else drains them (Drain); then once more, so that the last
// interval reaches the metrics and the log.
func (u *Unit) Run(ctx context.Context) error {
	u.state.Store("running")
	t := time.NewTicker(max(u.interval/2, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if !u.claimed.Load() {
				u.drain()
			}
			u.state.Store("stopping")
			return nil
		case <-t.C:
			if !u.claimed.Load() {
				u.drain()
			}
		}
	}
}

// Drain ends the interval and returns its results: call it right after
// each swap of the flow tables (datapath.Rotate), and the results are
// those of the flow records drained from the table the swap returned. The
// DNS queries older than dns.timeout are there too, as timeouts on their
// query's flow. The first call hands the intervals to the caller: the unit
// stops draining on its own. A signal that is not Up has no results.
func (u *Unit) Drain() (Results, error) {
	u.claimed.Store(true)
	return u.drain()
}

func (u *Unit) drain() (Results, error) {
	r := Results{DNS: map[flow.Key]datapath.DNSResult{}, Handshakes: map[flow.Key]datapath.HandshakeResult{}}
	u.mu.Lock()
	defer u.mu.Unlock()
	var errs []error
	if u.Up(SignalDNS) {
		m, err := u.dp.DrainDNS(u.cfg.Timeout)
		errs = append(errs, err)
		r.DNS = m
	}
	if u.Up(SignalHandshakeRTT) {
		m, err := u.dp.DrainHandshakes()
		errs = append(errs, err)
		r.Handshakes = m
	}
	err := errors.Join(errs...)
	if err != nil {
		u.totals.drainErrors++
		u.log.Warn("draining the DNS and handshake results", "err", err)
	}
	for k, v := range r.DNS {
		u.totals.dnsResults++
		if v.Timeout {
			u.totals.timeouts++
		}
		u.logDNS(&k, v)
	}
	for k, v := range r.Handshakes {
		u.totals.handshakes++
		u.logHandshake(&k, v)
	}
	return r, err
}

// endpoint writes an address and port of k.
func endpoint(addr [16]byte, port uint16) string {
	return netip.AddrPortFrom(netip.AddrFrom16(addr).Unmap(), port).String()
}

func (u *Unit) flowAttrs(k *flow.Key) []any {
	return []any{"iface", u.ifaceName(k.IfIndex), "direction", k.Direction.String(),
		"src", endpoint(k.SrcAddr, k.SrcPort), "dst", endpoint(k.DstAddr, k.DstPort), "proto", k.Proto}
}

// logDNS logs one result at debug level: what a record will carry once the
// flows capability puts it there.
func (u *Unit) logDNS(k *flow.Key, v datapath.DNSResult) {
	if !u.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := append(u.flowAttrs(k), "dns_id", v.ID, "dns_qname", v.QName)
	switch {
	case v.Timeout:
		attrs = append(attrs, "dns_rcode", "TIMEOUT")
	case v.Response:
		attrs = append(attrs, "dns_rcode", v.RcodeName())
	}
	if v.Matched {
		attrs = append(attrs, "dns_latency_ns", v.Latency.Nanoseconds())
	}
	u.log.Debug("dns result", attrs...)
}

func (u *Unit) logHandshake(k *flow.Key, v datapath.HandshakeResult) {
	if !u.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	u.log.Debug("handshake result", append(u.flowAttrs(k), "handshake_rtt_ns", v.RTT.Nanoseconds(),
		"syn_to_synack_ns", v.SynToSynAck.Nanoseconds(), "synack_to_ack_ns", v.SynAckToAck.Nanoseconds())...)
}

func (u *Unit) snapshot() totals {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.totals
}

// Close releases nothing: the tables are the datapath's.
func (u *Unit) Close() error { return nil }

// Collectors are the signals' health, counters and histograms.
func (u *Unit) Collectors() []prometheus.Collector { return []prometheus.Collector{newCollector(u)} }

// Status says each signal's state, the tables' sizes, and what the drains
// found.
func (u *Unit) Status() capability.Status {
	t := u.snapshot()
	d := map[string]any{
		SignalDNS: u.describe(SignalDNS), SignalHandshakeRTT: u.describe(SignalHandshakeRTT),
		"timeout": u.cfg.Timeout.String(), "max_pending": u.cfg.MaxPending, "max_flows": u.cfg.MaxFlows,
		"handshake_max_pending": u.cfg.HandshakeMaxPending,
		"dns_results":           t.dnsResults, "dns_timeouts": t.timeouts, "handshake_results": t.handshakes,
	}
	if u.Up(SignalDNS) {
		if n, err := u.dp.DNSPending(); err == nil {
			d["dns_pending"] = n
		}
	}
	return capability.Status{Name: Name, Enabled: u.cfg.Any(), State: u.state.Load().(string), Detail: d}
}

// DrainFlows is Drain in the flow records' terms (flows.TCSignals): each
// flow's DNS exchange, and its handshake RTT in nanoseconds.
func (u *Unit) DrainFlows() (map[flow.Key]flow.DNSExchange, map[flow.Key]uint64, error) {
	r, err := u.Drain()
	dns := make(map[flow.Key]flow.DNSExchange, len(r.DNS))
	for k, d := range r.DNS {
		x := flow.DNSExchange{ID: d.ID, QName: d.QName, HasRcode: d.Response, Rcode: uint16(d.Rcode)}
		if d.Matched {
			x.HasLatency, x.LatencyNs = true, uint64(d.Latency)
		}
		dns[k] = x
	}
	hs := make(map[flow.Key]uint64, len(r.Handshakes))
	for k, h := range r.Handshakes {
		hs[k] = uint64(h.RTT)
	}
	return dns, hs, err
}
