// Package hop is per-hop network latency: what the kernel reports when a hook
// sees a segment worth timing, and the requests and hops userspace makes of
// those reports.
//
// The kernel half (bpf/latency, read by internal/datapath) stamps, at every
// hook Loupe is attached to, the segments that start an HTTP request and, at
// a configured rate, sampled TCP segments, keyed by the inner 5-tuple and the
// TCP sequence range, so that the same bytes are recognised at a pod's veth,
// at the overlay device and at the NIC; and it reports the trace context it
// finds in a request. Userspace (the matcher in this package) joins the
// stamps of one segment across hooks into hops.
package hop

import (
	"loupe/internal/flow"
)

// Kind says why a segment was stamped.
type Kind uint8

const (
	// KindRequest is the segment holding the first byte of an HTTP
	// request (its method at payload offset 0).
	KindRequest Kind = 1
	// KindSampled is a TCP segment kept by the sampling rate.
	KindSampled Kind = 2
)

// Stamp is one hook's sight of one segment.
type Stamp struct {
	// TimeNs is when the hook saw it: bpf_ktime_get_ns, CLOCK_MONOTONIC,
	// one clock for every hook of a host.
	TimeNs uint64
	// Key is the segment's inner 5-tuple, as a flow key of the hook that
	// saw it: IfIndex and Direction say which hook; when the segment was
	// seen encapsulated (on an underlay interface), Key is the inner
	// packet's and Tunneled is true.
	Key      flow.Key
	Tunneled bool
	// Seq is the TCP sequence number of the segment's first payload byte
	// and Len its payload bytes in this buffer (a GSO or GRO buffer holds
	// several wire segments: [Seq, Seq+Len) covers them all).
	Seq  uint32
	Len  uint32
	Kind Kind
}

// Source says where a trace context was found.
type Source uint8

const (
	SourceTraceparent Source = 1 // W3C traceparent header
	SourceB3          Source = 2 // X-B3-TraceId / X-B3-SpanId headers
	SourceB3Single    Source = 3 // the single b3 header
	SourceTCPOption   Source = 4 // TCP option kind 25
	SourceIPOption    Source = 5 // IPv4 option 136
)

// Context is a trace context found in a request at one hook.
type Context struct {
	TimeNs   uint64
	Key      flow.Key
	Tunneled bool
	// Seq is the sequence number of the request's first byte (the
	// KindRequest stamp's Seq), also when the context was found in a
	// later segment of the request.
	Seq     uint32
	TraceID [16]byte
	// SpanID is the parent span: the caller's span id from traceparent
	// (or b3); zero when the source carries none.
	SpanID [8]byte
	Source Source
}

// Sink takes what the kernel reports, as the reader drains it: stamps of one
// segment from different CPUs may arrive out of time order, and a request's
// context may arrive before or after its stamps.
type Sink interface {
	Stamp(Stamp)
	Context(Context)
}

// BatchSink is a Sink that takes what one read of the kernel's ring held
// at once: the reader hands it the batch instead of record by record.
type BatchSink interface {
	Sink
	Batch(stamps []Stamp, ctxs []Context)
}
