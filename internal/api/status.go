package api

import (
	"net/http"
	"time"
)

// StatusPath is the agent's status document.
const StatusPath = Prefix + "status"

// Agent states, in the order an agent goes through them.
const (
	StateStarting = "starting" // units open, interfaces being attached
	StateRunning  = "running"
	StateStopping = "stopping" // detaching, last eviction, flushing
)

// Status is the document GET /api/v1/status returns: the wire contract of
// `loupe status --json`. Fields are only ever added (docs/api.md).
type Status struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	// Started is when the agent started, RFC 3339 in UTC.
	Started       string  `json:"started"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	// State is StateStarting, StateRunning or StateStopping.
	State        string             `json:"state"`
	Capabilities []CapabilityStatus `json:"capabilities"`
	Interfaces   InterfaceStatus    `json:"interfaces"`
	Datapath     DatapathStatus     `json:"datapath"`
}

// CapabilityStatus is what a capability unit says of itself.
type CapabilityStatus struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled"`
	// State is starting, running, stopping, stopped or failed.
	State string `json:"state"`
	// Detail is the unit's own: sizes, counts, what it degraded to.
	Detail map[string]any `json:"detail,omitempty"`
}

// InterfaceStatus says where the programs are attached.
type InterfaceStatus struct {
	Attached int `json:"attached"`
	// Names are the attached interfaces, sorted; never null.
	Names []string `json:"names"`
	// Mode is tcx or tc, auto before the first attach.
	Mode string `json:"mode"`
}

// DatapathStatus describes the loaded kernel side.
type DatapathStatus struct {
	Tables     string `json:"tables"` // percpu, shared or ringbuf
	FlowBudget int    `json:"flow_budget"`
	CPUs       int    `json:"cpus"`
	Pinned     bool   `json:"pinned"`
	// MemoryBytes is what every map takes, as the kernel accounts it;
	// MemoryBudget the budget it is held to (memory; 0: none).
	MemoryBytes  uint64 `json:"memory_bytes"`
	MemoryBudget uint64 `json:"memory_budget_bytes,omitempty"`
	// SketchBytes is the sketches' kernel memory (0: sketch mode off),
	// SketchFlows the flows one CPU's sketch decodes per interval.
	SketchBytes uint64 `json:"sketch_bytes,omitempty"`
	SketchFlows int    `json:"sketch_capacity_flows,omitempty"`
}

// StatusRoute serves GET /api/v1/status with the document snapshot
// returns, called once per request.
func StatusRoute(snapshot func() Status) Route {
	return Route{
		Method: http.MethodGet,
		Path:   StatusPath,
		Access: Read,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			st := snapshot()
			if st.Capabilities == nil {
				st.Capabilities = []CapabilityStatus{}
			}
			if st.Interfaces.Names == nil {
				st.Interfaces.Names = []string{}
			}
			WriteJSON(w, http.StatusOK, st)
		}),
	}
}

// Uptime is the status's uptime as a duration.
func (s Status) Uptime() time.Duration {
	return time.Duration(s.UptimeSeconds * float64(time.Second))
}
