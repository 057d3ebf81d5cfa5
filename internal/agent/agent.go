// Package agent wires Loupe's parts into the running agent: the datapath,
// the attach manager, the capability units (internal/capability: flows,
// with its evictor and sinks) and the HTTP listener, and orders their
// shutdown so that every in-flight packet reaches every output.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"loupe/internal/api"
	"loupe/internal/attach"
	"loupe/internal/capability"
	"loupe/internal/capability/capture"
	dnsunit "loupe/internal/capability/dns"
	"loupe/internal/capability/flows"
	kubeunit "loupe/internal/capability/kubernetes"
	latencyunit "loupe/internal/capability/latency"
	"loupe/internal/capability/latency/output"
	rulesunit "loupe/internal/capability/rules"
	signalsunit "loupe/internal/capability/signals"
	"loupe/internal/config"
	"loupe/internal/datapath"
	"loupe/internal/ifnames"
	"loupe/internal/k8s"
	"loupe/internal/ui"
)

// Run runs the agent until ctx is done, then shuts down gracefully: detach,
// each unit's last pass (the final eviction, which drains the ring buffer),
// flush and close every output.
// sd, if not nil, follows the shutdown for a caller that may give up on it.
// version is the build's, for the control API's status.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, sd *Shutdown, version string) (err error) {
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

	// Bound before anything is loaded: a socket another agent serves
	// stops this one before it touches the kernel (a socket this user
	// may not create, once the datapath has said what else is missing).
	ctl, err := listenControl(cfg, log)
	if err != nil {
		return err
	}
	defer ctl.close()
	// The UI's port likewise, before anything is loaded.
	web, err := ui.Listen(ui.Options{Listen: cfg.UI.Listen, TokenFile: cfg.Control.TokenFile, Logger: log})
	if err != nil {
		return err
	}
	defer web.Close()

	pinDir := cfg.PinDir
	if pinDir == config.None {
		pinDir = ""
	}
	flowUnit := flows.New(cfg, log)
	units := []capability.Unit{flowUnit}
	if cfg.Capture.Enabled() {
		cu, err := capture.New(cfg.Capture, version, log)
		if err != nil {
			return err
		}
		units = append(units, cu)
	}
	if cfg.Rules.On() {
		units = append(units, rulesunit.New(cfg.Rules, log))
	}
	// On by default; each signal degrades alone, so the unit never stops
	// the start. The flows unit puts them on its records.
	sigUnit := signalsunit.New(cfg.Signals, cfg.CacheActiveTimeout, log)
	flowUnit.SetSignals(sigUnit)
	units = append(units, sigUnit)
	if cfg.DNS.Any() {
		du := dnsunit.New(cfg.DNS, cfg.CacheActiveTimeout, log)
		flowUnit.SetTCSignals(du)
		units = append(units, du)
	}
	// Kubernetes names: the resolver watches the cluster for the agent's
	// lifetime (its unit), and the flows unit names every record by it.
	// Without a cluster it is off, and records go to the sinks as they
	// are.
	resolver, err := k8s.New(cfg.Kubernetes, k8s.Options{Logger: log})
	if err != nil {
		return err
	}
	if resolver.On() {
		flowUnit.SetNamer(resolver)
	}
	units = append(units, kubeunit.New(resolver))
	if cfg.Latency.Enabled {
		out, err := latencyOutput(cfg, resolver, log)
		if err != nil {
			return err
		}
		units = append(units, latencyunit.New(cfg.Latency, out, log))
	}
	// The memory budget pays for the kernel signals' tables too.
	var reserved uint64
	if cfg.Memory > 0 && cfg.Signals.Any() {
		if reserved, err = datapath.SignalsMapBytes(cfg.Signals.TableSize); err != nil {
			return err
		}
	}
	budget, err := flowBudget(cfg, tables)
	if err != nil {
		return err
	}
	dp, err := loadDatapath(datapath.Options{
		FlowBudget:  budget,
		Memory:      cfg.Memory,
		Reserved:    reserved,
		Tables:      tables,
		RingBufSize: int(cfg.RingbufSize),
		PinDir:      pinDir,
		Capture:     cfg.Capture.Sizes(),
		DNS:         cfg.DNS.DNSSizes(),
		Handshake:   cfg.DNS.HandshakeSizes(),
		Latency:     cfg.Latency.Sizes(),
		Logger:      log,
	}, units, log)
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
	if err := ctl.pending(); err != nil {
		return err
	}
	if total, tbl, err := dp.MemoryBytes(); err == nil {
		log.Info("datapath loaded", "component", "datapath", "tables", tables, "flow_budget", dp.Options().FlowBudget,
			"cpus", dp.CPUs(), "capabilities", strings.Join(dp.Options().Capabilities, ","),
			"table_memory_bytes", tbl, "total_memory_bytes", total)
	}
	if plan := dp.Plan(); plan.Budget > 0 {
		log.Info("memory budget split", "component", "datapath", "budget_bytes", plan.Budget,
			"flow_budget", plan.FlowBudget, "flow_budget_given", plan.FlowBudgetGiven, "tables_bytes", plan.TablesBytes,
			"sketch_bytes", plan.SketchBytes, "ringbuf_bytes", plan.RingBytes, "other_maps_bytes", plan.OtherBytes,
			"unused_bytes", plan.Unused())
	}

	// The attach manager's watcher tells names the interfaces it sees,
	// which name the units' records; it is created now and run once every
	// unit is open.
	names := ifnames.New(nil)
	mgr, err := attach.NewManager(attach.Config{
		Names:    names,
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

	host := &capability.Host{Datapath: dp, IfaceName: names.Name, Logger: log}
	var opened []capability.Unit
	defer func() {
		// In reverse: a unit opened later may use what an earlier one
		// provides.
		for i := len(opened) - 1; i >= 0; i-- {
			if cerr := opened[i].Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", opened[i].Name(), cerr))
			}
		}
	}()
	for _, u := range units {
		if err := u.Open(host); err != nil {
			return err
		}
		opened = append(opened, u)
	}
	sd.update(func(s *Shutdown) { s.queues = flowUnit.Queues() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(newHealthCollector(dp, mgr, log), newExportCollector(flowUnit.Queues()), newSignalCollector(units))
	for _, u := range units {
		reg.MustRegister(u.Collectors()...)
	}
	routes := ctl.routes(version, units, dp, mgr, append(storeRoutes(cfg), metricsRoute(reg)))
	if err := ctl.serve(routes); err != nil {
		return err
	}
	if web != nil {
		if err := web.Serve(routes); err != nil {
			return fmt.Errorf("ui: %w", err)
		}
	}
	// A failed start stops the API before the units close: the status
	// reads them.
	defer ctl.close()

	var srv *http.Server
	if cfg.Listen != config.None {
		if srv, err = serveHTTP(cfg.Listen, reg, ctl.currentState, log); err != nil {
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

	// The units run under a context of their own, cancelled only once
	// every program is detached: their last pass then sees everything.
	unitCtx, stopUnits := context.WithCancel(context.Background())
	defer stopUnits()
	unitDone := make([]chan error, len(units))
	for i, u := range units {
		unitDone[i] = make(chan error, 1)
		go func() { unitDone[i] <- u.Run(unitCtx) }()
	}
	running = true
	ctl.setState(api.StateRunning)
	log.Info("loupe running", "interfaces", mgr.Stats().Attached, "mode", mgr.Stats().Mode,
		"cache_active_timeout", cfg.CacheActiveTimeout, "sinks", flowUnit.SinkNames())

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
	ctl.setState(api.StateStopping)

	// Order matters: detach first so no new packet is counted, then each
	// unit's last pass (the flows unit's final eviction: its table swap
	// waits out running programs, then the ring buffer is drained), then
	// the units' outputs are flushed and closed (deferred above).
	stopMgr()
	if !mgrStopped {
		runErr = <-mgrDone
	}
	sd.update(func(s *Shutdown) { s.stopping, s.detached, s.evicting = true, true, true })
	stopUnits()
	var flowsErr error
	for i, u := range units {
		if uerr := <-unitDone[i]; uerr != nil {
			runErr = errors.Join(runErr, fmt.Errorf("%s: final pass: %w", u.Name(), uerr))
			if u == capability.Unit(flowUnit) {
				flowsErr = uerr
			}
		}
	}
	sd.update(func(s *Shutdown) { s.evicted = true })
	// Before unpinning, which changes what the status reads.
	ctl.close()
	unpin(dp, flowsErr, log)
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

// loadDatapath loads the datapath with the capabilities of units on: a
// unit's name, or the switches of a capability.Switched unit. If the kernel
// refuses the programs with those switches, it loads them without, and
// tells each such unit why: its signals are off, the rest runs.
func loadDatapath(opts datapath.Options, units []capability.Unit, log *slog.Logger) (*datapath.Datapath, error) {
	var optional []string
	for _, u := range units {
		if _, ok := u.(capability.Standalone); ok {
			continue // its own object, not a switch of the entry programs
		}
		if s, ok := u.(capability.Switched); ok {
			opts.Capabilities = append(opts.Capabilities, s.Switches()...)
			optional = append(optional, s.Switches()...)
		} else {
			opts.Capabilities = append(opts.Capabilities, u.Name())
		}
	}
	dp, err := datapath.Load(opts)
	if err == nil || len(optional) == 0 {
		return dp, err
	}
	log.Warn("the datapath did not load with its optional capabilities; loading it without them",
		"component", "datapath", "optional", strings.Join(optional, ","), "err", err)
	opts.Capabilities = slices.DeleteFunc(opts.Capabilities, func(c string) bool { return slices.Contains(optional, c) })
	dp, rerr := datapath.Load(opts)
	if rerr != nil {
		// Not the optional capabilities' fault: the first error is
		// the one to report.
		return nil, err
	}
	for _, u := range units {
		if s, ok := u.(capability.Switched); ok {
			s.Refused(err)
		}
	}
	return dp, nil
}

// linkPinDir is where the attach manager pins TCX links: beside the maps,
// when they are pinned.
func linkPinDir(dp *datapath.Datapath, pinDir string) string {
	if !dp.Pinned() {
		return ""
	}
	return filepath.Join(pinDir, datapath.LinksDir)
}

// flowBudget is the configured flow budget: 0 asks the datapath to size it
// from the memory budget, or is its default without one. A given budget is
// per CPU with per-CPU tables.
func flowBudget(cfg config.Config, tables datapath.TableKind) (int, error) {
	if cfg.FlowBudget != 0 || cfg.Memory != 0 {
		return cfg.FlowBudget, nil
	}
	return datapath.DefaultFlowBudget(tables)
}

func tableKind(s string) (datapath.TableKind, error) {
	switch s {
	case "auto", "":
		return datapath.AutoTables()
	case "percpu":
		return datapath.PerCPU, nil
	case "shared":
		return datapath.Shared, nil
	case "ringbuf":
		return datapath.RingBuf, nil
	}
	return 0, fmt.Errorf("map_type %q: want auto, percpu, shared or ringbuf", s)
}

func serveHTTP(addr string, reg *prometheus.Registry, state func() string, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: httpHandler(reg, state, log), ReadHeaderTimeout: 5 * time.Second}
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

// latencyOutput says where the latency unit's records go: the latency log
// beside the flows in the store, and spans to every OTLP target.
// Hops name the pod behind a host-side veth when Kubernetes names are on.
func latencyOutput(cfg config.Config, names *k8s.Resolver, log *slog.Logger) (output.Options, error) {
	o := output.Options{OTLPTargets: output.OTLPTargets(cfg.Export)}
	if names.On() {
		o.IfacePod = func(ifindex uint32) string {
			if n := names.IfaceOwner(int(ifindex)); n.Pod != "" {
				return n.Namespace + "/" + n.Pod
			}
			return ""
		}
	}
	if cfg.Store.Path != config.None {
		o.StoreDir, o.Retention, o.MaxSize = cfg.Store.Path, cfg.Store.Retention, int64(cfg.Store.MaxSize)
	}
	if len(o.OTLPTargets) > 0 {
		var err error
		if o.OTLP, err = cfg.OTLP.Options(log); err != nil {
			return o, err
		}
	}
	return o, nil
}
