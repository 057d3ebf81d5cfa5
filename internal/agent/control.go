package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"loupe/internal/api"
	"loupe/internal/attach"
	"loupe/internal/capability"
	flowsquery "loupe/internal/capability/flows/query"
	latencyquery "loupe/internal/capability/latency/query"
	"loupe/internal/config"
	"loupe/internal/datapath"
)

// control is the agent's control API (internal/api). Its socket is bound
// before anything is loaded, so that a path in use by another agent, or
// one this user cannot create, stops the start at once; it answers once
// the units are open, so that the status lists them.
type control struct {
	srv     *api.Server // nil when the socket and TCP are both off
	started time.Time
	state   atomic.Value // string: api.StateStarting, ...
	// err is a permission error kept for pending.
	err error
}

// listenControl binds the control API's socket and TCP listener. A
// permission error is not returned but kept for pending: a user who may
// not create the socket usually may not load BPF either, and the
// datapath's error, which says which capabilities are missing, should
// come first.
func listenControl(cfg config.Config, log *slog.Logger) (*control, error) {
	c := &control{started: time.Now()}
	c.state.Store(api.StateStarting)
	o := api.Options{Socket: cfg.Control.Socket, Listen: cfg.Control.Listen, TokenFile: cfg.Control.TokenFile, Logger: log}
	if (o.Socket == config.None || o.Socket == "") && (o.Listen == config.None || o.Listen == "") {
		log.Info("control API disabled", "component", "api")
		return c, nil
	}
	srv, err := api.Listen(o)
	if errors.Is(err, os.ErrPermission) {
		c.err = err
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	c.srv = srv
	return c, nil
}

// serve starts answering routes.
func (c *control) serve(routes []api.Route) error {
	if c.srv == nil {
		return nil
	}
	if err := c.srv.Serve(routes); err != nil {
		return fmt.Errorf("control API: %w", err)
	}
	return nil
}

// routes are every route of the API, which the UI's listener serves too:
// GET /api/v1/status, the agent's own routes (extra), then the routes of
// every unit that provides some.
func (c *control) routes(version string, units []capability.Unit, dp *datapath.Datapath, mgr *attach.Manager, extra []api.Route) []api.Route {
	routes := []api.Route{api.StatusRoute(func() api.Status { return c.status(version, units, dp, mgr) })}
	routes = append(routes, extra...)
	for _, u := range units {
		if rp, ok := u.(capability.RouteProvider); ok {
			routes = append(routes, rp.Routes()...)
		}
	}
	return routes
}

// storeRoutes are the queries over the agent's store (flows, top,
// traffic, topology, latency), none without a store: the same answers
// as the CLI's commands run with --store on it.
func storeRoutes(cfg config.Config) []api.Route {
	if cfg.Store.Path == config.None {
		return nil
	}
	return append(flowsquery.Routes(cfg.Store.Path), latencyquery.Routes(cfg.Store.Path)...)
}

// pending returns the permission error listenControl kept, once the
// datapath has loaded.
func (c *control) pending() error { return c.err }

func (c *control) setState(s string) { c.state.Store(s) }

// currentState is the agent's state, as the status reports it.
func (c *control) currentState() string { return c.state.Load().(string) }

// close stops the API; it may be called more than once. The agent calls
// it before closing the units and the datapath, which the status reads.
func (c *control) close() {
	if c.srv != nil {
		_ = c.srv.Close()
	}
}

func (c *control) status(version string, units []capability.Unit, dp *datapath.Datapath, mgr *attach.Manager) api.Status {
	st := api.Status{
		Version:       version,
		PID:           os.Getpid(),
		Started:       c.started.UTC().Format(time.RFC3339),
		UptimeSeconds: time.Since(c.started).Round(time.Millisecond).Seconds(),
		State:         c.currentState(),
	}
	for _, u := range units {
		us := u.Status()
		st.Capabilities = append(st.Capabilities, api.CapabilityStatus{Name: us.Name, Enabled: us.Enabled, State: us.State, Detail: us.Detail})
	}
	names := mgr.Attached()
	st.Interfaces = api.InterfaceStatus{Attached: len(names), Names: names, Mode: mgr.Stats().Mode.String()}
	st.Datapath = api.DatapathStatus{
		Tables:     dp.Options().Tables.String(),
		FlowBudget: dp.Options().FlowBudget,
		CPUs:       dp.CPUs(),
		Pinned:     dp.Pinned(),
	}
	st.Datapath.MemoryBytes, _, _ = dp.MemoryBytes()
	if plan := dp.Plan(); plan.Budget > 0 {
		st.Datapath.MemoryBudget = plan.Budget
		st.Datapath.SketchBytes = plan.SketchBytes
	}
	if p, ok := dp.SketchParams(); ok {
		st.Datapath.SketchFlows = p.FlowSet.Capacity()
	}
	return st
}
