package otlp

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"loupe/internal/hop"
)

// Span attributes of a hop. The network ones are the semantic
// conventions' (attrs.go); the rest are loupe.*.
const (
	AttrHopFrom      = "loupe.hop.from_iface"
	AttrHopTo        = "loupe.hop.to_iface"
	AttrHopDirection = "loupe.hop.direction"
	AttrHopLatency   = "loupe.hop.latency_ns"
	AttrHopIndex     = "loupe.hop.index"
	AttrHopFromNode  = "loupe.hop.from_node"
	AttrTCPSeq       = "loupe.tcp.seq"
	AttrTraceSource  = "loupe.trace.source"
)

// Defaults of the span exporter.
const (
	DefaultSpanQueue    = 4096
	spanExportInterval  = time.Second
	spanRequestRequests = 500 // requests (a few spans each) per Export
)

// SpanStats count what the span exporter did with the requests it was
// given.
type SpanStats struct {
	// Requests were exported (their spans accepted, or refused for good:
	// Rejected); Dropped found the queue full (a collector too slow or
	// away); Failed were given up after a retryable error left no room
	// to keep them.
	Requests, Dropped, Failed, Rejected uint64
	Queued                              int
}

// SpanExporter sends per-hop latency to an OTLP/gRPC endpoint as spans on
// each request's own trace, so that Jaeger or Tempo show the network time
// inside the trace: one span per hop, a child of the span that sent the
// request (the traceparent's parent id), from the time the segment crossed
// the first hook to the time it crossed the second (each on the wall clock
// of the node that timed it).
//
// One span per hop rather than one span with an event per hop: an event
// has no duration, so the hop would not show as a bar of its length in
// the trace's timeline, and the hops of two nodes would share one span of
// one node. Requests without a trace id (sampled segments) have no trace
// to join and are not sent.
//
// Export never blocks: requests wait in a bounded queue that Run sends
// every second; what does not fit is counted (SpanStats.Dropped).
type SpanExporter struct {
	target   Target
	opts     Options
	log      *slog.Logger
	conn     *grpc.ClientConn
	rpc      coltracepb.TraceServiceClient
	md       metadata.MD
	callOpts []grpc.CallOption
	res      *resourcepb.Resource
	scope    *commonpb.InstrumentationScope
	max      int

	mu    sync.Mutex
	queue []*hop.Request

	requests, dropped, failed, rejected atomic.Uint64
	failLog                             warnLimiter
}

// NewSpanExporter creates an exporter for target (`otlp://HOST:PORT`)
// with the client's options (TLS, headers, compression, resource); queue
// bounds the requests waiting (default DefaultSpanQueue).
func NewSpanExporter(target string, opts Options, queue int) (*SpanExporter, error) {
	t, err := ParseTarget(target)
	if err != nil {
		return nil, err
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	dialOpts, err := o.dialOptions()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(t.Addr(), dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("otlp span exporter for %s: %w", t, err)
	}
	if queue <= 0 {
		queue = DefaultSpanQueue
	}
	e := &SpanExporter{
		target: t, opts: o, conn: conn, max: queue,
		log:      o.Logger.With("component", "export.otlp.spans", "target", t.String()),
		rpc:      coltracepb.NewTraceServiceClient(conn),
		callOpts: o.callOptions(),
		res:      newResource(&o),
		scope:    &commonpb.InstrumentationScope{Name: ScopeName, Version: o.Version},
	}
	if len(o.Headers) > 0 {
		e.md = metadata.New(o.Headers)
	}
	return e, nil
}

// Export queues r's hops as spans, if r has a trace id.
func (e *SpanExporter) Export(r *hop.Request) {
	if r.TraceID == "" || len(r.Hops) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) >= e.max {
		e.dropped.Add(1)
		return
	}
	e.queue = append(e.queue, r)
}

// Run sends the queue every second until ctx is done, then once more
// (bounded by closeTimeout).
func (e *SpanExporter) Run(ctx context.Context) {
	t := time.NewTicker(spanExportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			e.Flush(fctx)
			cancel()
			return
		case <-t.C:
			e.Flush(ctx)
		}
	}
}

// Flush sends what is queued now. A retryable failure puts the requests
// back in front of the queue, as far as it has room.
func (e *SpanExporter) Flush(ctx context.Context) error {
	e.mu.Lock()
	batch := e.queue
	e.queue = nil
	e.mu.Unlock()
	for len(batch) > 0 {
		n := min(len(batch), spanRequestRequests)
		if err := e.send(ctx, batch[:n]); err != nil {
			e.requeue(batch)
			return err
		}
		batch = batch[n:]
	}
	return nil
}

func (e *SpanExporter) send(ctx context.Context, rs []*hop.Request) error {
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   e.res,
		ScopeSpans: []*tracepb.ScopeSpans{{Scope: e.scope, Spans: SpansOf(rs)}},
	}}}
	if e.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, e.md)
	}
	rctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()
	resp, err := e.rpc.Export(rctx, req, e.callOpts...)
	switch {
	case err != nil && Permanent(err):
		e.rejected.Add(uint64(len(rs)))
		e.failLog.warn(e.log, e.opts.Now(), "collector refused spans permanently", "requests", len(rs), "error", err)
		return nil
	case err != nil:
		e.failLog.warn(e.log, e.opts.Now(), "span export failed; retrying", "requests", len(rs), "error", err)
		return fmt.Errorf("otlp export spans to %s: %w", e.target, err)
	}
	if ps := resp.GetPartialSuccess(); ps != nil && ps.RejectedSpans > 0 {
		e.failLog.warn(e.log, e.opts.Now(), "collector rejected part of a spans request", "rejected_spans", ps.RejectedSpans, "message", ps.ErrorMessage)
	}
	e.requests.Add(uint64(len(rs)))
	return nil
}

// requeue puts rs back before what was queued meanwhile, keeping the
// newest when both do not fit.
func (e *SpanExporter) requeue(rs []*hop.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	all := append(rs, e.queue...)
	if over := len(all) - e.max; over > 0 {
		e.failed.Add(uint64(over))
		all = all[over:]
	}
	e.queue = all
}

// Stats returns the counters.
func (e *SpanExporter) Stats() SpanStats {
	e.mu.Lock()
	q := len(e.queue)
	e.mu.Unlock()
	return SpanStats{Requests: e.requests.Load(), Dropped: e.dropped.Load(), Failed: e.failed.Load(), Rejected: e.rejected.Load(), Queued: q}
}

// Close closes the connection (Run has sent the queue).
func (e *SpanExporter) Close() error {
	if err := e.conn.Close(); err != nil {
		return fmt.Errorf("otlp close %s: %w", e.target, err)
	}
	return nil
}

// SpansOf are the spans of requests: one per hop, on the request's trace,
// child of its parent span. A span's id is a hash of the trace, the node,
// the segment and the hop, so that the same record exported twice (a
// retry after a lost answer) is the same span.
func SpansOf(rs []*hop.Request) []*tracepb.Span {
	var spans []*tracepb.Span
	for _, r := range rs {
		traceID, err := hex.DecodeString(r.TraceID)
		if err != nil || len(traceID) != 16 {
			continue
		}
		parent, _ := hex.DecodeString(r.SpanID)
		if len(parent) != 8 {
			parent = nil
		}
		for i, h := range r.Hops {
			var start, end time.Time
			if i+1 < len(r.Path) {
				start, end = r.Wall(r.Path[i]), r.Wall(r.Path[i+1])
			} else {
				start = r.Time
				end = start.Add(time.Duration(h.LatencyNs))
			}
			attrs := []*commonpb.KeyValue{
				strKV(AttrHopFrom, h.FromIface), strKV(AttrHopTo, h.ToIface), strKV(AttrHopDirection, h.Direction),
				intKV(AttrHopLatency, h.LatencyNs), intKV(AttrHopIndex, int64(i)),
				strKV(AttrTransport, Transport(r.Proto)),
				strKV(AttrSrcAddr, r.SrcAddr.String()), intKV(AttrSrcPort, int64(r.SrcPort)),
				strKV(AttrDstAddr, r.DstAddr.String()), intKV(AttrDstPort, int64(r.DstPort)),
				intKV(AttrTCPSeq, int64(r.Seq)),
			}
			if r.TraceSource != "" {
				attrs = append(attrs, strKV(AttrTraceSource, r.TraceSource))
			}
			if r.Node != "" {
				attrs = append(attrs, strKV(AttrHopFromNode, r.Node))
			}
			spans = append(spans, &tracepb.Span{
				TraceId:           traceID,
				SpanId:            spanID(r, i),
				ParentSpanId:      parent,
				Name:              "hop " + h.FromIface + " -> " + h.ToIface,
				Kind:              tracepb.Span_SPAN_KIND_INTERNAL,
				StartTimeUnixNano: unixNano(start),
				EndTimeUnixNano:   unixNano(end),
				Attributes:        attrs,
			})
		}
	}
	return spans
}

func spanID(r *hop.Request, i int) []byte {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s/%s:%d>%s:%d/%d/%d", r.TraceID, r.Node, r.SrcAddr, r.SrcPort, r.DstAddr, r.DstPort, r.Seq, i)
	v := h.Sum64()
	if v == 0 {
		v = 1 // the zero id is invalid
	}
	return binary.BigEndian.AppendUint64(nil, v)
}

func intKV(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}
