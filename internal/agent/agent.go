// Package agent wires Loupe's parts into the running agent: datapath,
// attach manager, evictor, sinks and the HTTP listener, and orders their
// shutdown so that every in-flight packet reaches every sink.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"loupe/internal/attach"
	"loupe/internal/config"
	"loupe/internal/datapath"
	"loupe/internal/export"
	"loupe/internal/export/delivery"
	"loupe/internal/export/promflow"
	"loupe/internal/export/storesink"
	"loupe/internal/export/targets"
	"loupe/internal/flow"
)

// Run runs the agent until ctx is done, then shuts down gracefully: detach,
// final eviction (which drains the ring buffer), flush and close every sink.
// sd, if not nil, follows the shutdown for a caller that may give up on it.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, sd *Shutdown) (err error) {
	tables, err := tableKind(cfg.MapType)
	if err != nil {
		return err
	}
	mode, err := attach.ParseMode(cfg.AttachMode)
	if err != nil {
		return err
	}
	pos, err := attach.ParsePosition(cfg.AttachPosition)
	if err != nil {
		return err
	}

	pinDir := cfg.PinDir
	if pinDir == config.None {
		pinDir = ""
	}
	dp, err := datapath.Load(datapath.Options{
		FlowBudget:   cfg.FlowBudget,
		Tables:       tables,
		RingBufSize:  int(cfg.RingbufSize),
		PinDir:       pinDir,
		Capabilities: []string{"flows"},
		Logger:       log,
	})
	if err != nil {
		return privilegeError("", err)
	}
	defer dp.Close()
	running := false
	defer func() {
		// A set pinned by this agent that never counted anything holds
		// nothing for a next agent: a failed start takes it back. An
		// adopted set holds what earlier agents counted and stays.
		if !running && !dp.Adopted() {
			dp.Unpin()
		}
	}()
	if total, tbl, err := dp.MemoryBytes(); err == nil {
		log.Info("datapath loaded", "component", "datapath", "tables", tables, "flow_budget", cfg.FlowBudget,
			"cpus", dp.CPUs(), "table_memory_bytes", tbl, "total_memory_bytes", total)
	}

	sinks, queues, prom, storeSink, err := openSinks(cfg, log)
	if err != nil {
		return err
	}
	sd.update(func(s *Shutdown) { s.queues = queues })
	fan := export.NewFanout(log, sinks...)
	defer func() {
		if cerr := fan.Close(); cerr != nil {
			log.Error("closing sinks", "err", cerr)
			err = errors.Join(err, cerr)
		}
	}()

	// The store says up to where it holds this set's diverted packets: the
	// reader starts there, so that a restart stores none of them twice.
	stored, _ := fan.Stored(dp.Set())
	events, err := dp.OpenEvents(stored.RingPos)
	if err != nil {
		return err
	}
	// Taken before the reader runs: the marks of the first evictions
	// must not claim events still on their way to the evictor.
	ringStart := events.Position()
	defer events.Close()
	eventCh := make(chan flow.Event, 4096)
	go forwardEvents(events, eventCh, log)

	mgr, err := attach.NewManager(attach.Config{
		Programs: attach.Programs{Ingress: dp.Ingress(), Egress: dp.Egress()},
		Mode:     mode,
		Position: pos,
		Include:  cfg.Interfaces,
		Exclude:  cfg.Exclude,
		PinDir:   linkPinDir(dp, pinDir),
		Logger:   log,
	})
	if err != nil {
		return err
	}
	ev := flow.NewEvictor(flow.EvictorConfig{
		Table:         dp,
		Events:        eventCh,
		DrainEvents:   func() { _ = events.Drain() },
		RingStart:     ringStart,
		ReleaseEvents: events.Release,
		Out:           fan,
		Interval:      cfg.CacheActiveTimeout,
		IfaceName:     mgr.Name,
		Logger:        log,
	})

	var srv *http.Server
	if cfg.Listen != config.None {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg.MustRegister(newHealthCollector(dp, mgr, ev, fan, storeSink, cfg, log), newExportCollector(queues), prom)
		if srv, err = serveHTTP(cfg.Listen, reg, log); err != nil {
			return err
		}
		defer shutdownHTTP(srv, log)
	}

	mgrCtx, stopMgr := context.WithCancel(context.Background())
	defer stopMgr()
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Run(mgrCtx) }()
	select {
	case <-mgr.Ready():
	case err := <-mgrDone:
		return privilegeError("attach: ", err)
	}

	evCtx, stopEvictor := context.WithCancel(context.Background())
	defer stopEvictor()
	evDone := make(chan error, 1)
	go func() { evDone <- ev.Run(evCtx) }()
	running = true
	log.Info("loupe running", "interfaces", mgr.Stats().Attached, "mode", mgr.Stats().Mode,
		"cache_active_timeout", cfg.CacheActiveTimeout, "sinks", sinkNames(fan))

	var runErr error
	mgrStopped := false
	select {
	case <-ctx.Done():
		sd.update(func(s *Shutdown) { s.stopping = true })
		log.Info("shutting down: detaching, evicting and flushing")
	case runErr = <-mgrDone:
		mgrStopped = true
		log.Error("interface manager stopped", "err", runErr)
	}

	// Order matters: detach first so no new packet is counted, then the
	// final eviction (its table swap waits out running programs, then the
	// ring buffer is drained), then the sinks are flushed and closed.
	stopMgr()
	if !mgrStopped {
		runErr = <-mgrDone
	}
	sd.update(func(s *Shutdown) { s.stopping, s.detached, s.evicting = true, true, true })
	stopEvictor()
	evErr := <-evDone
	if evErr != nil {
		runErr = errors.Join(runErr, fmt.Errorf("final eviction: %w", evErr))
	}
	sd.update(func(s *Shutdown) { s.evicted = true })
	st := ev.Stats()
	log.Info("final eviction done", "records", st.LastRecords, "flows", st.LastFlows,
		"total_records", st.Records, "total_flows", st.Flows)
	unpin(dp, evErr, log)
	return runErr
}

// unpin removes the pinned maps after a clean stop: the links are gone and
// the final eviction emptied the tables. After a failed final eviction the
// pins stay, for the next agent to drain what is left.
func unpin(dp *datapath.Datapath, evErr error, log *slog.Logger) {
	if !dp.Pinned() {
		return
	}
	if evErr != nil {
		log.Warn("pinned maps kept: the final eviction reported an error, the next agent drains whatever it left", "component", "datapath")
		return
	}
	if err := dp.Unpin(); err != nil {
		log.Error("removing the pinned maps", "component", "datapath", "err", err)
		return
	}
	log.Info("pinned maps removed", "component", "datapath")
}

// linkPinDir is where the attach manager pins TCX links: beside the maps,
// when they are pinned.
func linkPinDir(dp *datapath.Datapath, pinDir string) string {
	if !dp.Pinned() {
		return ""
	}
	return filepath.Join(pinDir, datapath.LinksDir)
}

func tableKind(s string) (datapath.TableKind, error) {
	switch s {
	case "auto", "":
		return datapath.AutoTables()
	case "percpu":
		return datapath.PerCPU, nil
	case "shared":
		return datapath.Shared, nil
	}
	return 0, fmt.Errorf("map_type %q: want auto, percpu or shared", s)
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

func sinkNames(f *export.Fanout) string {
	var names []string
	for _, s := range f.Stats() {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

// forwardEvents moves ring-buffer events to the evictor until the ring
// buffer is drained or closed, then closes out.
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

func serveHTTP(addr string, reg *prometheus.Registry, log *slog.Logger) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	log.Info("serving metrics", "component", "http", "addr", ln.Addr().String())
	return srv, nil
}

func shutdownHTTP(srv *http.Server, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
}
