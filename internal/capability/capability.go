// Package capability is the seam every Loupe capability plugs into.
//
// A capability is one thing Loupe measures or does with packets: flows
// today; triggered capture, selective measurement, per-hop latency and
// kernel signals next. Each one is two halves with the same name:
//
//   - in the kernel, a directory under bpf/ (bpf/flows/) with its maps and a
//     <name>_observe function that the one entry program of each hook
//     (bpf/loupe.c) calls with the packet parsed once, behind a cfg_cap_<name>
//     switch that is folded away when the capability is off;
//   - in userspace, a Unit in internal/capability/<name>: it takes its maps
//     from the loaded datapath, runs its readers, serves its metrics and
//     status, owns its configuration section and its outputs.
//
// A capability whose kernel half never runs at the hooks has an object of
// its own instead, which its unit loads and attaches itself (the kernel
// signals: raw tracepoints, bpf/signals.c); it says so by implementing
// Standalone, and the entry programs are built without it.
//
// The agent (internal/agent) loads the datapath with the switches of the
// enabled units on, opens every unit, attaches the programs, runs the units,
// and on shutdown detaches first, then stops the units in reverse order, so
// that each can flush what the kernel handed it.
//
// Outputs: flow records go through the flow pipeline (export.Sink: delivery
// queues, the store, its exactness ledger). Outputs that are not flow
// records (captured packets, trigger events, latency samples) go through
// their own stream (internal/stream), never through that pipeline.
package capability

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/api"
	"loupe/internal/datapath"
)

// Unit is a capability's userspace half.
type Unit interface {
	// Name is the capability's name: its switch in bpf/loupe.c
	// (cfg_cap_<name>), its directory under internal/capability, and its
	// entry in `loupe status`.
	Name() string
	// Open prepares the unit once the datapath is loaded, before the
	// programs are attached: it takes its maps and opens its outputs, so
	// that nothing the programs produce from their first packet on is
	// missed. An error stops the agent's start.
	Open(h *Host) error
	// Run runs the unit until ctx is done, then finishes what the kernel
	// handed it before returning (the flows unit's final eviction). The
	// agent cancels ctx only after every program is detached.
	Run(ctx context.Context) error
	// Close flushes and releases the unit's outputs, after Run returned
	// (or when the start failed after Open).
	Close() error
	// Collectors are the unit's Prometheus metrics, read at scrape time.
	Collectors() []prometheus.Collector
	// Status is the unit's part of the agent's status.
	Status() Status
}

// RouteProvider is implemented by a unit that serves routes on the agent's
// control API (internal/api): a capture stream, changes to its triggers.
// It is optional, found by a type assertion, so that a unit without routes
// declares nothing. Routes is called once, after Open; each route's
// Access says what it gives away (api.Read, api.Payload, api.Write), and
// the server enforces it.
type RouteProvider interface {
	Routes() []api.Route
}

// Standalone is implemented by a unit whose kernel half is an object of its
// own, loaded and attached by the unit in Open, not a switch of the entry
// programs: the agent leaves it out of the capabilities the entry programs
// are built with, so that it costs the TC hooks nothing.
type Standalone interface {
	Standalone()
}

// Switched is implemented by a unit whose kernel half is switches of the
// entry programs other than its name, each optional: the DNS unit's are
// dns and handshake. The agent switches on what Switches returns instead
// of the unit's name; if the kernel refuses the programs with them, it
// loads the datapath again without them and tells the unit why (Refused),
// so that the unit's signals are off, and say so, while the agent and
// every other capability run. Refused is called before Open.
type Switched interface {
	Switches() []string
	Refused(err error)
}

// SignalReporter is implemented by a unit that runs kernel signals, each of
// which runs or is off on its own (the configuration turned it off, the
// kernel refused it). The agent serves them all as one gauge,
// loupe_signal_up{signal}, whichever unit runs them, so that an operator
// asks one metric whether a signal is measured.
type SignalReporter interface {
	// SignalsUp says, for each of the unit's signals by name (its
	// label), whether it runs.
	SignalsUp() map[string]bool
}

// Host is what the agent gives every unit.
type Host struct {
	Datapath *datapath.Datapath
	// IfaceName names an interface index, including interfaces removed a
	// moment ago ("" if unknown).
	IfaceName func(ifindex uint32) string
	Logger    *slog.Logger
}

// Status is what a unit says of itself in `loupe status`.
type Status struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled"`
	// State is a word: starting, running, stopping, stopped, failed.
	State string `json:"state"`
	// Detail is the unit's own: sizes, counts, what it degraded to.
	Detail map[string]any `json:"detail,omitempty"`
}
