package hop

import (
	"encoding/hex"
	"net/netip"
	"slices"
	"time"
)

// Direction words of a hop: "out" from the pod towards the network, "in"
// from the network towards the pod (see PathDirection).
const (
	Out = "out"
	In  = "in"
)

// Request is one segment matched across the hooks of one host: a request's
// first segment (Kind "request", with its trace context when the kernel
// found one) or a sampled TCP segment (Kind "sampled", no trace id). It is
// what the matcher emits, what the store keeps (in a binary form, binary.go)
// and what `loupe latency` prints; its JSON names are the CLI's contract.
type Request struct {
	// TraceID and SpanID are hex, "" when no context was found; SpanID is
	// the caller's span (the parent of the hop spans).
	TraceID     string `json:"trace_id"`
	SpanID      string `json:"span_id"`
	TraceSource string `json:"trace_source,omitempty"`
	Kind        string `json:"kind"`

	SrcAddr netip.Addr `json:"src_addr"`
	DstAddr netip.Addr `json:"dst_addr"`
	SrcPort uint16     `json:"src_port"`
	DstPort uint16     `json:"dst_port"`
	Proto   uint8      `json:"proto"`
	Seq     uint32     `json:"seq"`

	// Time is the wall-clock time of the first hook's stamp.
	Time time.Time `json:"time"`
	// Node is the host the hooks are on (its host name, or the agent's
	// configured node name).
	Node string `json:"node,omitempty"`
	Hops []Hop  `json:"hops"`

	// Path is every hook's sight, in time order: what the hops are made
	// of, kept so that stores of two nodes can be joined.
	Path []Point `json:"path,omitempty"`
	// BootID is the host's boot id: two records with the same one were
	// timed on one monotonic clock (two agents of one machine).
	BootID string `json:"boot_id,omitempty"`
	// ClockOffsetNs is the wall clock minus the monotonic clock when the
	// record was made: Point.TimeNs + ClockOffsetNs is a unix time.
	ClockOffsetNs int64 `json:"clock_offset_ns,omitempty"`
	// ClockSync says the agent was configured with latency.clock_sync:
	// its wall clock is synchronised with the other nodes' (PTP, or NTP
	// well enough for the hops measured), so a hop to another node's
	// hook may be reported one way.
	ClockSync bool `json:"clock_sync,omitempty"`
}

// Hop is the time between two consecutive hooks of a path.
type Hop struct {
	FromIface string `json:"from_iface"`
	ToIface   string `json:"to_iface"`
	Direction string `json:"direction"`
	LatencyNs int64  `json:"latency_ns"`
	// FromNode and ToNode name the nodes of a hop that crosses from one
	// node to another (only in stores joined by `loupe latency`).
	FromNode string `json:"from_node,omitempty"`
	ToNode   string `json:"to_node,omitempty"`
	// FromPod and ToPod name the pod behind either interface, when it is
	// a pod's host-side veth and Kubernetes names are on
	// ("namespace/name").
	FromPod string `json:"from_pod,omitempty"`
	ToPod   string `json:"to_pod,omitempty"`
}

// Point is one hook's sight of the segment.
type Point struct {
	Iface   string `json:"iface"`
	IfIndex uint32 `json:"ifindex"`
	// Kind is the interface's link kind (veth, vxlan, device, ...).
	Kind string `json:"kind,omitempty"`
	// Pod is the pod behind the interface ("namespace/name"), if any.
	Pod      string `json:"pod,omitempty"`
	Hook     string `json:"hook"` // ingress or egress
	TimeNs   uint64 `json:"time_ns"`
	Tunneled bool   `json:"tunneled,omitempty"`
	Seq      uint32 `json:"seq"`
	Len      uint32 `json:"len"`
}

// Clone is a copy of r that shares nothing r's owner may reuse (strings
// are immutable and shared).
func (r *Request) Clone() *Request {
	c := *r
	c.Hops = slices.Clone(r.Hops)
	c.Path = slices.Clone(r.Path)
	return &c
}

// Wall is the point's time on the wall clock of its record's host.
func (r *Request) Wall(p Point) time.Time {
	return time.Unix(0, int64(p.TimeNs)+r.ClockOffsetNs)
}

// Kind names in Request.Kind.
const (
	KindNameRequest = "request"
	KindNameSampled = "sampled"
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return KindNameRequest
	case KindSampled:
		return KindNameSampled
	}
	return "unknown"
}

func (s Source) String() string {
	switch s {
	case SourceTraceparent:
		return "traceparent"
	case SourceB3:
		return "b3_multi"
	case SourceB3Single:
		return "b3"
	case SourceTCPOption:
		return "tcp_option"
	case SourceIPOption:
		return "ip_option"
	}
	return ""
}

// hexID is an id in hex, "" when it is all zeros (no id).
func hexID(b []byte) string {
	for _, c := range b {
		if c != 0 {
			return hex.EncodeToString(b)
		}
	}
	return ""
}
