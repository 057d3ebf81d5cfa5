// Package flows is the flows capability's userspace half: it drains the
// kernel's flow tables and the ring buffer of diverted packets (the
// datapath), merges them into records (flow.Evictor) and hands them to the
// flow pipeline: the store, every --export target and the Prometheus flow
// metrics. Its kernel half is bpf/flows/.
//
// Configuration: the top-level flow keys (flow_budget, map_type,
// cache_active_timeout, ringbuf_size), store.*, export and each exporter's
// section (internal/config).
package flows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/capability"
	"loupe/internal/config"
	"loupe/internal/datapath"
	"loupe/internal/export"
	"loupe/internal/export/delivery"
	"loupe/internal/export/promflow"
	"loupe/internal/export/storesink"
	"loupe/internal/export/targets"
	"loupe/internal/flow"
)

// Name is the capability's name.
const Name = "flows"

// Unit is the flows capability.
type Unit struct {
	cfg config.Config
	log *slog.Logger

	dp      *datapath.Datapath
	fan     *export.Fanout
	queues  []*delivery.Queue
	prom    *promflow.Sink
	store   *storesink.Sink // nil without a store
	events  *datapath.Events
	eventCh chan flow.Event
	ev      *flow.Evictor
	state   atomic.Value // string
	// signals, if set, are drained at each eviction onto the records
	// (extras.go).
	signals      Signals
	tc           TCSignals
	tunnelErrors atomic.Uint64
	// namer, if set, names every record's ends (names.go).
	namer Namer
}

var _ capability.Unit = (*Unit)(nil)

// New returns the flows unit for cfg. Nothing is opened before Open.
func New(cfg config.Config, log *slog.Logger) *Unit {
	u := &Unit{cfg: cfg, log: log}
	u.state.Store("starting")
	return u
}

// Name implements capability.Unit.
func (u *Unit) Name() string { return Name }

// Open opens the sinks, then the ring-buffer reader, and prepares the
// evictor.
func (u *Unit) Open(h *capability.Host) error {
	u.dp = h.Datapath
	sinks, queues, prom, st, err := openSinks(u.cfg, u.log)
	if err != nil {
		return err
	}
	u.queues, u.prom, u.store = queues, prom, st
	u.fan = export.NewFanout(u.log, sinks...)

	// The store says up to where it holds this set's diverted packets: the
	// reader starts there, so that a restart stores none of them twice.
	stored, _ := u.fan.Stored(u.dp.Set())
	if u.events, err = u.dp.OpenEvents(stored.RingPos); err != nil {
		return err
	}
	// Taken before the reader runs: the marks of the first evictions
	// must not claim events still on their way to the evictor.
	ringStart := u.events.Position()
	u.eventCh = make(chan flow.Event, 4096)
	go forwardEvents(u.events, u.eventCh, u.log)

	events := u.events
	var out flow.Output = u.fan
	if u.namer != nil {
		out = newNamingOutput(u.fan, u.namer)
	}
	u.ev = flow.NewEvictor(flow.EvictorConfig{
		Table:         u.dp,
		Events:        u.eventCh,
		DrainEvents:   func() { _ = events.Drain() },
		RingStart:     ringStart,
		ReleaseEvents: events.Release,
		Out:           out,
		Interval:      u.cfg.CacheActiveTimeout,
		IfaceName:     h.IfaceName,
		Logger:        u.log,
		Extras:        u.extras,
	})
	return nil
}

// Run evicts on the configured interval until ctx is done, then runs the
// final eviction (which drains the ring buffer) and returns its error.
func (u *Unit) Run(ctx context.Context) error {
	u.state.Store("running")
	err := u.ev.Run(ctx)
	st := u.ev.Stats()
	u.log.Info("final eviction done", "records", st.LastRecords, "flows", st.LastFlows,
		"total_records", st.Records, "total_flows", st.Flows)
	u.state.Store("stopping")
	return err
}

// Close closes the ring-buffer reader and flushes and closes every sink.
func (u *Unit) Close() error {
	var errs []error
	if u.events != nil {
		errs = append(errs, u.events.Close())
	}
	if u.fan != nil {
		if err := u.fan.Close(); err != nil {
			u.log.Error("closing sinks", "err", err)
			errs = append(errs, err)
		}
	}
	u.state.Store("stopped")
	return errors.Join(errs...)
}

// Queues are the delivery queues of the network exporters, for a caller
// that must say what an early exit leaves undelivered.
func (u *Unit) Queues() []*delivery.Queue { return u.queues }

// SinkNames lists the sinks, comma-separated, for the start-up log line.
func (u *Unit) SinkNames() string {
	var names []string
	for _, s := range u.fan.Stats() {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

// Collectors implements capability.Unit.
func (u *Unit) Collectors() []prometheus.Collector {
	return []prometheus.Collector{newCollector(u), u.prom}
}

// capacity is the flows the kernel's table holds: the flow budget, times
// the CPUs with per-CPU tables (each CPU holds the budget).
func (u *Unit) capacity() int {
	o := u.dp.Options()
	if o.Tables == datapath.PerCPU {
		return o.FlowBudget * u.dp.CPUs()
	}
	return o.FlowBudget
}

// Status implements capability.Unit.
func (u *Unit) Status() capability.Status {
	s := capability.Status{Name: Name, Enabled: true, State: u.state.Load().(string), Detail: map[string]any{
		"cache_active_timeout": u.cfg.CacheActiveTimeout.String(),
	}}
	if u.dp != nil {
		s.Detail["flow_budget"] = u.dp.Options().FlowBudget
		s.Detail["flow_capacity"] = u.capacity()
		s.Detail["tables"] = u.dp.Options().Tables.String()
		s.Detail["pinned"] = u.dp.Pinned()
		if plan := u.dp.Plan(); plan.Budget > 0 {
			s.Detail["memory_budget_bytes"] = plan.Budget
			s.Detail["sketch_bytes"] = plan.SketchBytes
		}
	}
	if u.ev != nil {
		es := u.ev.Stats()
		s.Detail["evictions"] = es.Evictions
		s.Detail["records"] = es.Records
		s.Detail["flows_last_eviction"] = es.LastFlows
	}
	if u.fan != nil {
		var sinks []string
		for _, st := range u.fan.Stats() {
			sinks = append(sinks, st.Name)
		}
		s.Detail["sinks"] = sinks
	}
	return s
}

// openSinks opens the store, every --export target and the Prometheus
// flow metrics, in that order. Network exporters come with their delivery
// queues, and the store sink (nil without a store) is returned too, for
// the metrics.
func openSinks(cfg config.Config, log *slog.Logger) ([]export.Sink, []*delivery.Queue, *promflow.Sink, *storesink.Sink, error) {
	var sinks []export.Sink
	var queues []*delivery.Queue
	var st *storesink.Sink
	fail := func(err error) ([]export.Sink, []*delivery.Queue, *promflow.Sink, *storesink.Sink, error) {
		for _, s := range sinks {
			s.Close()
		}
		return nil, nil, nil, nil, err
	}
	if cfg.Store.Path != config.None {
		s, err := storesink.Open(storesink.Options{Dir: cfg.Store.Path, Retention: cfg.Store.Retention,
			MaxSize: int64(cfg.Store.MaxSize), Logger: log})
		if err != nil {
			return fail(err)
		}
		sinks = append(sinks, s)
		st = s
	}
	for _, target := range cfg.Export {
		s, q, err := targets.Open(target, cfg.Exporters, log)
		if err != nil {
			return fail(err)
		}
		sinks = append(sinks, s)
		if q != nil {
			queues = append(queues, q)
		}
	}
	popts, err := cfg.Prometheus.Options(log)
	if err != nil {
		return fail(fmt.Errorf("prometheus.%w", err))
	}
	prom, err := promflow.Open(popts)
	if err != nil {
		return fail(err)
	}
	sinks = append(sinks, prom)
	return sinks, queues, prom, st, nil
}

// forwardEvents moves ring-buffer events to the evictor until the ring
// buffer is drained or closed, then closes out. The evictor takes each at
// once, whatever its sinks are doing (flow.EvictorConfig.Events).
func forwardEvents(events *datapath.Events, out chan<- flow.Event, log *slog.Logger) {
	defer close(out)
	for {
		e, err := events.Read()
		switch {
		case err == nil:
			out <- e
		case errors.Is(err, datapath.ErrDrained), errors.Is(err, os.ErrClosed):
			return
		default:
			log.Error("reading flow events", "component", "datapath", "err", err)
			time.Sleep(100 * time.Millisecond)
		}
	}
}
