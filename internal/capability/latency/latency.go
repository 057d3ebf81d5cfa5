// Package latency is the unit of per-hop latency's kernel half: it switches
// the latency capability of the entry programs (bpf/latency/), reads the
// ring of stamps and trace contexts into a hop.Sink, and serves the
// capability's counters and status.
//
// What it reads goes to its output (package output: the matcher of
// internal/hop, the latency log in the store, the hop histograms and the
// OTLP spans). If the kernel refuses the entry programs with the
// capability, the agent loads them without it and the unit says so (log,
// loupe status, loupe_latency_up).
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
	"loupe/internal/capability/latency/output"
	"loupe/internal/datapath"
	"loupe/internal/hop"
)

// Name is the unit's name and its switch in bpf/loupe.c (cfg_cap_latency).
const Name = "latency"

// readPeriod is how long a read waits for the ring while records come,
// readIdle while none came at the last read: a record does not wake the
// reader until a quarter of the ring is unread (the datapath's
// latency_wake_bytes), so below that the ring is read on this period rather
// than per record. By default the kernel wakes a reader that has caught up,
// which at a few thousand records a second is nearly every record, and the
// wake-ups (an interrupt raised in the hook, the reader's thread scheduled
// in and out) cost more than matching: at 2 000 requests/s, each with its
// trace context, the agent's CPU halved without them (docs/architecture.md,
// "Reading the ring"). Both are small beside the matcher's window; readIdle
// bounds how late the unit notices its context is done.
const (
	readPeriod = 20 * time.Millisecond
	readIdle   = 200 * time.Millisecond
)

// batchWait is how long the unit lets the ring gather records after a read
// that found some, before it reads again: once woken past a quarter of the
// ring, or on a ring that is never empty, a read would otherwise return at
// once with the few records that came since the last, and the unit would
// spin. The ring holds thousands of records, more than come in the pause.
const batchWait = 5 * time.Millisecond

// Unit is the latency capability's userspace half.
type Unit struct {
	cfg     Config
	outOpts output.Options
	log     *slog.Logger

	mu   sync.Mutex
	sink hop.Sink
	out  *output.Pipeline // nil while the capability is off

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

// New returns the unit for cfg; out says where its records go (the
// store, OTLP targets), its Config and IfaceName are the unit's own.
func New(cfg Config, out output.Options, log *slog.Logger) *Unit {
	out.Config = cfg.Matching
	out.Logger = log
	u := &Unit{cfg: cfg, outOpts: out, log: log.With("component", Name)}
	u.state.Store("starting")
	return u
}

// SetSink sets where the records go instead of the unit's output; call it
// before Run. nil: the output (counted and dropped when there is none).
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
	u.outOpts.IfaceName = h.IfaceName
	out, err := output.Open(u.outOpts)
	if err != nil {
		r.Close()
		return err
	}
	u.reader, u.out = r, out
	u.log.Info("latency on", "sampling", u.cfg.Sampling, "untraced_sampling", u.cfg.UntracedSampling, "header_scan_limit", u.cfg.HeaderScanLimit,
		"scan_table_size", u.cfg.ScanTableSize, "ring_size", u.cfg.RingSize, "table_size", u.cfg.Matching.TableSize,
		"match_window", u.cfg.Matching.MatchWindow)
	return nil
}

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
		sink = u.out
	}
	// The output outlives ctx by the last read: what the programs wrote
	// before they were detached is matched, stored and sent too.
	outCtx, stopOut := context.WithCancel(context.Background())
	outDone := make(chan error, 1)
	go func() { outDone <- u.out.Run(outCtx) }()
	defer func() {
		stopOut()
		<-outDone
	}()
	pause := time.NewTimer(batchWait)
	pause.Stop()
	wait := readIdle
	for {
		done := ctx.Err() != nil
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
			case <-time.After(readIdle):
			}
		}
		if done {
			u.state.Store("stopping")
			return nil
		}
		wait = readIdle
		if st+cx+bad > 0 {
			wait = readPeriod
			pause.Reset(batchWait)
			select {
			case <-ctx.Done():
			case <-pause.C:
			}
		}
	}
}

// Close closes the reader and the output.
func (u *Unit) Close() error {
	if u.reader == nil {
		return nil
	}
	return errors.Join(u.reader.Close(), u.out.Close())
}

// Collectors are the capability's counters, the kernel's and the
// matcher's. The output's exist once the unit is open: an agent whose
// kernel refused the capability serves loupe_latency_up 0 and no hops.
func (u *Unit) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{newCollector(u)}
	if u.out != nil {
		cs = append(cs, u.out.Collectors()...)
	}
	return cs
}

// Status says whether the capability runs, its sizes and what was read.
func (u *Unit) Status() capability.Status {
	d := map[string]any{
		"sampling": u.cfg.Sampling, "untraced_sampling": u.cfg.UntracedSampling, "header_scan_limit": u.cfg.HeaderScanLimit, "scan_table_size": u.cfg.ScanTableSize,
		"ring_size": u.cfg.RingSize, "stamps": u.stamps.Load(), "contexts": u.contexts.Load(),
		"bad_records": u.bad.Load(),
	}
	if u.Up() {
		d["latency"] = "running"
		if n, err := u.dp.LatencyScans(); err == nil {
			d["scans_in_progress"] = n
		}
		d["matching"] = u.out.Detail()
	} else if u.refused != nil {
		d["latency"] = "unavailable: " + u.refused.Error()
	}
	return capability.Status{Name: Name, Enabled: u.cfg.Enabled, State: u.state.Load().(string), Detail: d}
}
