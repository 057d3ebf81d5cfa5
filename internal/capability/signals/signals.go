// Package signals is the kernel signals' unit: RTT and retransmissions of
// TCP connections and drops with the kernel's reason, each from a raw
// tracepoint (bpf/signals.c, loaded by datapath.LoadSignals). Each signal
// is switched on or off in the configuration (signals.*) and degrades
// alone: a tracepoint the kernel refuses turns off its signal, which the
// log, `loupe status` and loupe_signal_up{signal} say, and the others run.
//
// The unit hands each interval's signals, per 5-tuple, to whoever calls
// Drain: the flows capability, at each eviction, to put them on its
// records. Until something does, the unit drains the kernel's tables
// itself every cache_active_timeout, so that they never fill and its
// metrics stay current.
package signals

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/capability"
	"loupe/internal/datapath"
)

// Name is the capability's name.
const Name = "signals"

// Unit is the kernel signals capability.
type Unit struct {
	cfg      Config
	interval time.Duration
	log      *slog.Logger
	// tracepoints renames tracepoints (tests: a name the kernel lacks);
	// nil: the loupe_faults build's TEST_SIGNALS_TRACEPOINTS, else none.
	tracepoints map[datapath.Signal]string

	sig   *datapath.Signals // nil before Open
	state atomic.Value      // string
	// claimed is set by the first Drain from outside the unit: from then
	// on the caller owns the intervals and the unit drains no more.
	claimed atomic.Bool

	mu     sync.Mutex // serialises drains and guards what follows
	totals totals
}

// totals are what every drain returned since the agent started, for the
// unit's metrics.
type totals struct {
	retransmits uint64
	rttSamples  uint64
	drops       map[string]datapath.DropCount // by reason
	drainErrors uint64
}

var (
	_ capability.Unit       = (*Unit)(nil)
	_ capability.Standalone = (*Unit)(nil)
)

// New returns the signals unit for cfg; interval is how often the unit
// drains the tables while nothing else does (cache_active_timeout).
func New(cfg Config, interval time.Duration, log *slog.Logger) *Unit {
	u := &Unit{cfg: cfg, interval: interval, log: log.With("component", Name),
		totals: totals{drops: map[string]datapath.DropCount{}}}
	u.state.Store("starting")
	return u
}

// Name implements capability.Unit.
func (u *Unit) Name() string { return Name }

// Standalone implements capability.Standalone: the signals are an object
// of their own, at tracepoints, not a switch of the TC entry programs.
func (u *Unit) Standalone() {}

// Open loads and attaches the signals the configuration turns on. What the
// kernel refuses turns off the signal it concerns, logged with the reason;
// it never stops the agent.
func (u *Unit) Open(*capability.Host) error {
	tps := u.tracepoints
	if tps == nil {
		tps = faultTracepoints()
	}
	sig, err := datapath.LoadSignals(datapath.SignalsOptions{
		On: u.cfg.On(), TableSize: u.cfg.TableSize, Tracepoints: tps, Logger: u.log,
	})
	if err != nil {
		return err
	}
	u.sig = sig
	mem, _ := sig.MemoryBytes()
	u.log.Info("signals loaded", "rtt", u.describe(datapath.SignalRTT), "retransmits", u.describe(datapath.SignalRetransmits),
		"drops", u.describe(datapath.SignalDrops), "table_size", u.cfg.TableSize, "memory_bytes", mem)
	return nil
}

// describe is a signal's state in a word, and why it is off when the
// kernel refused it.
func (u *Unit) describe(s datapath.Signal) string {
	st := u.sig.State(s)
	switch {
	case st.Up:
		return "attached"
	case st.Reason == datapath.ReasonDisabled:
		return "disabled"
	}
	return "unavailable: " + st.Reason
}

// Up reports whether signal s is attached: a record's field for a signal
// that is not up is absent, not zero.
func (u *Unit) Up(s datapath.Signal) bool { return u.sig != nil && u.sig.State(s).Up }

// SignalsUp implements capability.SignalReporter.
func (u *Unit) SignalsUp() map[string]bool {
	up := make(map[string]bool)
	for _, s := range datapath.AllSignals() {
		up[s.String()] = u.Up(s)
	}
	return up
}

// Run drains the tables every interval until ctx is done, unless
// something else drains them (Drain); then once more, so that the last
// interval reaches the metrics.
func (u *Unit) Run(ctx context.Context) error {
	u.state.Store("running")
	t := time.NewTicker(u.interval)
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

// Claim hands the intervals to the caller before its first Drain: from
// now on the unit drains no more on its own, not even at shutdown, so
// that what the kernel counted waits for the caller's next Drain (the
// flows capability's final eviction, say) rather than going to the
// metrics alone.
func (u *Unit) Claim() { u.claimed.Store(true) }

// Drain ends the interval and returns every 5-tuple's signals since the
// previous drain: the call the flows capability makes at each eviction to
// put the signals on its records (datapath.SignalKeyOf finds a record's).
// The first call hands the intervals to the caller: the unit stops
// draining on its own. Values of a signal that is off are absent (see Up).
func (u *Unit) Drain() (map[datapath.SignalKey]datapath.SignalValues, error) {
	u.claimed.Store(true)
	return u.drain()
}

func (u *Unit) drain() (map[datapath.SignalKey]datapath.SignalValues, error) {
	if u.sig == nil {
		return map[datapath.SignalKey]datapath.SignalValues{}, nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	m, err := u.sig.Drain()
	if err != nil {
		u.totals.drainErrors++
		u.log.Warn("draining the signal tables", "err", err)
	}
	for _, v := range m {
		u.totals.retransmits += v.Retransmits
		if v.RTT != nil {
			u.totals.rttSamples += v.RTT.Samples
		}
		for reason, d := range v.Drops {
			t := u.totals.drops[reason]
			t.Packets += d.Packets
			t.Bytes += d.Bytes
			u.totals.drops[reason] = t
		}
	}
	return m, err
}

// snapshot copies the totals, for a scrape.
func (u *Unit) snapshot() totals {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.totals
	t.drops = maps.Clone(u.totals.drops)
	return t
}

// Close detaches the programs and releases the tables.
func (u *Unit) Close() error {
	if u.sig == nil {
		return nil
	}
	return u.sig.Close()
}

// Collectors are the signals' health and totals.
func (u *Unit) Collectors() []prometheus.Collector { return []prometheus.Collector{newCollector(u)} }

// Status says each signal's state, and the tables' size and memory.
func (u *Unit) Status() capability.Status {
	d := map[string]any{"table_size": u.cfg.TableSize}
	if u.sig != nil {
		for _, s := range datapath.AllSignals() {
			d[s.String()] = u.describe(s)
		}
		if mem, err := u.sig.MemoryBytes(); err == nil {
			d["memory_bytes"] = mem
		}
	}
	return capability.Status{Name: Name, Enabled: u.cfg.Any(), State: u.state.Load().(string), Detail: d}
}
