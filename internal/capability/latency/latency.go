// Package latency is the unit of per-hop latency's kernel half: it switches
// the latency capability of the entry programs (bpf/latency/), reads the
// ring of stamps and trace contexts into a hop.Sink, and serves the
// capability's counters and status.
//
// The sink is the integrator's (SetSink: the matcher of internal/hop);
// until one is set, the unit counts what it reads and drops it, so that
// the agent runs with --latency before the matcher does. If the kernel
// refuses the entry programs with the capability, the agent loads them
// without it and the unit says so (log, loupe status, loupe_latency_up).
package latency

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/capability"
	"loupe/internal/datapath"
	"loupe/internal/hop"
)

// Name is the unit's name and its switch in bpf/loupe.c (cfg_cap_latency).
const Name = "latency"

// readWait is how long a read waits for the ring's first record: the
// bound on how late the unit notices its context is done.
const readWait = 200 * time.Millisecond

// Unit is the latency capability's userspace half.
type Unit struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	sink hop.Sink

	dp      *datapath.Datapath
	reader  *datapath.LatencyReader
	refused error
	state   atomic.Value // string

	stamps, contexts, bad, readErrs atomic.Uint64
}

var (
	_ capability.Unit     = (*Unit)(nil)
	_ capability.Switched = (*Unit)(nil)
)

// New returns the unit for cfg, with the counting sink.
func New(cfg Config, log *slog.Logger) *Unit {
	u := &Unit{cfg: cfg, log: log.With("component", Name)}
	u.state.Store("starting")
	return u
}

// SetSink sets where the records go; call it before Run. nil: the records
// are counted and dropped.
func (u *Unit) SetSink(s hop.Sink) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sink = s
}

// Name implements capability.Unit.
func (u *Unit) Name() string { return Name }

// Switches implements capability.Switched.
func (u *Unit) Switches() []string { return []string{Name} }

// Refused implements capability.Switched: the agent runs without the
// capability.
func (u *Unit) Refused(err error) { u.refused = err }

// Up reports whether the capability runs in the kernel.
func (u *Unit) Up() bool { return u.reader != nil }

// Open takes the datapath's ring.
func (u *Unit) Open(h *capability.Host) error {
	u.dp = h.Datapath
	if u.refused != nil {
		u.log.Warn("latency off: the kernel refused the entry programs with it", "err", u.refused)
		return nil
	}
	r, err := h.Datapath.OpenLatency()
	if err != nil {
		// Degrade: the rest of the agent runs.
		u.refused = err
		u.log.Warn("latency off: its ring cannot be read", "err", err)
		return nil
	}
	u.reader = r
	u.log.Info("latency on", "sampling", u.cfg.Sampling, "header_scan_limit", u.cfg.HeaderScanLimit,
		"table_size", u.cfg.TableSize, "ring_size", u.cfg.RingSize)
	return nil
}

// countSink counts and drops (the default sink).
type countSink struct{}

func (countSink) Stamp(hop.Stamp)     {}
func (countSink) Context(hop.Context) {}

// Run reads the ring into the sink until ctx is done, then once more, so
// that what the programs wrote before they were detached is handed on.
func (u *Unit) Run(ctx context.Context) error {
	u.state.Store("running")
	if u.reader == nil {
		<-ctx.Done()
		u.state.Store("stopping")
		return nil
	}
	u.mu.Lock()
	sink := u.sink
	u.mu.Unlock()
	if sink == nil {
		sink = countSink{}
	}
	for {
		done := ctx.Err() != nil
		wait := readWait
		if done {
			wait = 0
		}
		st, cx, bad, err := u.reader.Read(sink, wait)
		u.stamps.Add(uint64(st))
		u.contexts.Add(uint64(cx))
		u.bad.Add(uint64(bad))
		if err != nil {
			if errors.Is(err, datapath.ErrLatencyClosed) {
				return nil
			}
			u.readErrs.Add(1)
			u.log.Warn("reading the latency ring", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(readWait):
			}
		}
		if done {
			u.state.Store("stopping")
			return nil
		}
	}
}

// Close closes the reader.
func (u *Unit) Close() error {
	if u.reader == nil {
		return nil
	}
	return u.reader.Close()
}

// Collectors are the capability's counters.
func (u *Unit) Collectors() []prometheus.Collector { return []prometheus.Collector{newCollector(u)} }

// Status says whether the capability runs, its sizes and what was read.
func (u *Unit) Status() capability.Status {
	d := map[string]any{
		"sampling": u.cfg.Sampling, "header_scan_limit": u.cfg.HeaderScanLimit, "table_size": u.cfg.TableSize,
		"ring_size": u.cfg.RingSize, "stamps": u.stamps.Load(), "contexts": u.contexts.Load(),
		"bad_records": u.bad.Load(),
	}
	if u.Up() {
		d["latency"] = "running"
		if n, err := u.dp.LatencyScans(); err == nil {
			d["scans_in_progress"] = n
		}
	} else if u.refused != nil {
		d["latency"] = "unavailable: " + u.refused.Error()
	}
	return capability.Status{Name: Name, Enabled: u.cfg.Enabled, State: u.state.Load().(string), Detail: d}
}
