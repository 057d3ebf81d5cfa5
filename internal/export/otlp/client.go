package otlp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"loupe/internal/flow"
)

// warnInterval is the least time between two warnings of one kind, so a
// collector that rejects every batch cannot flood the agent's log.
const warnInterval = 10 * time.Second

// closeTimeout bounds the last metrics export in Close.
const closeTimeout = 2 * time.Second

// Client exports flow records to one OTLP/gRPC endpoint. It implements
// delivery.Client, delivery.Rejecter and delivery.Connector. Send and
// Close must be called from one goroutine (the delivery queue's);
// Rejected and Connected are safe from any.
type Client struct {
	target   Target
	opts     Options
	log      *slog.Logger
	conn     *grpc.ClientConn
	metrRPC  colmetricspb.MetricsServiceClient
	md       metadata.MD
	callOpts []grpc.CallOption // every RPC
	logsOpts []grpc.CallOption // logs RPCs: callOpts and the codec

	res     *resourcepb.Resource
	scope   *commonpb.InstrumentationScope
	logs    *logEncoder
	metrics *trafficMetrics // nil with DisableMetrics
	lastExp time.Time       // last metrics export attempt

	rejected              atomic.Uint64
	rejectLog, metricsLog warnLimiter
}

// New creates a client for target (`otlp://HOST:PORT`). It does not
// connect: gRPC dials on the first Send, and reconnects by itself.
func New(target string, opts Options) (*Client, error) {
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
	cdc, err := newCodec()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(t.Addr(), dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("otlp client for %s: %w", t, err)
	}
	c := &Client{
		target:   t,
		opts:     o,
		log:      o.Logger.With("component", "export.otlp", "target", t.String()),
		conn:     conn,
		metrRPC:  colmetricspb.NewMetricsServiceClient(conn),
		callOpts: o.callOptions(),
		res:      newResource(&o),
		scope:    &commonpb.InstrumentationScope{Name: ScopeName, Version: o.Version},
	}
	if len(o.Headers) > 0 {
		c.md = metadata.New(o.Headers)
	}
	c.logsOpts = append(slices.Clip(c.callOpts), grpc.ForceCodecV2(cdc))
	if c.logs, err = newLogEncoder(c.res, c.scope); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if !o.DisableMetrics {
		c.metrics = newTrafficMetrics(o.Now(), o.MaxMetricStreams)
	}
	return c, nil
}

// newResource builds the resource every request carries: service.name,
// host.name, service.version if known, then Options.Resource (which wins),
// sorted by key so requests are deterministic.
func newResource(o *Options) *resourcepb.Resource {
	attrs := map[string]string{AttrServiceName: "loupe", AttrHostName: o.HostName}
	if o.Version != "" {
		attrs[AttrServiceVersion] = o.Version
	}
	maps.Copy(attrs, o.Resource)
	res := &resourcepb.Resource{}
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		res.Attributes = append(res.Attributes, strKV(k, attrs[k]))
	}
	return res
}

// Target returns the parsed target.
func (c *Client) Target() Target { return c.target }

// Send implements delivery.Client. It exports batch as log records, at most
// MaxRequestRecords per Export request (fewer when records with kernel
// signals would take a request past gRPC's default 4 MiB limit), in order;
// then, if due, the traffic metrics.
//
// A request the collector refuses with a retryable status (Unavailable,
// DeadlineExceeded, ...) fails it and every later record: failed is the
// tail from that request on, for the queue to retry. A request refused
// with a permanent status (InvalidArgument, Unauthenticated, ...) or a
// partial success counts its records as rejected and goes on. A logs
// request is all-or-nothing on the wire, so nothing finer is possible.
func (c *Client) Send(ctx context.Context, batch []flow.Record) ([]flow.Record, error) {
	for start := 0; start < len(batch); {
		end := start + requestRecords(batch[start:], c.opts.MaxRequestRecords)
		chunk := batch[start:end]
		req := encodedRequest(c.logs.build(chunk, c.opts.Now()))
		resp := new(collogspb.ExportLogsServiceResponse)
		rctx, cancel := c.rpcContext(ctx)
		err := c.conn.Invoke(rctx, collogspb.LogsService_Export_FullMethodName, req, resp, c.logsOpts...)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return batch[start:], fmt.Errorf("otlp export logs to %s: %w", c.target, ctx.Err())
		case err != nil && !Permanent(err):
			return batch[start:], fmt.Errorf("otlp export logs to %s: %w", c.target, err)
		case err != nil:
			c.reject(uint64(len(chunk)), "collector refused a logs request permanently", "records", len(chunk), "error", err)
		default:
			if ps := resp.GetPartialSuccess(); ps != nil && (ps.RejectedLogRecords > 0 || ps.ErrorMessage != "") {
				n := uint64(max(ps.RejectedLogRecords, 0))
				c.reject(min(n, uint64(len(chunk))), "collector rejected part of a logs request",
					"rejected", ps.RejectedLogRecords, "records", len(chunk), "message", ps.ErrorMessage)
			}
		}
		// Delivered or refused for good, the records are traffic that
		// happened: the metrics count each exactly once, here.
		if c.metrics != nil && c.metrics.add(chunk) {
			c.log.Warn("metric streams reached their cap; new interfaces are counted under "+AttrIfaceName+"=\""+OtherIface+"\"",
				"max_metric_streams", c.opts.MaxMetricStreams)
		}
		start = end
	}
	if c.metrics != nil && c.metrics.dirty && c.metricsDue() {
		c.exportMetrics(ctx)
	}
	return nil, nil
}

func (c *Client) metricsDue() bool {
	return c.opts.MetricsInterval < 0 || c.lastExp.IsZero() || c.opts.Now().Sub(c.lastExp) >= c.opts.MetricsInterval
}

// exportMetrics sends the cumulative totals. Its failure fails no record
// (the logs are delivered, and the next export carries the same totals),
// so it is logged, not returned.
func (c *Client) exportMetrics(ctx context.Context) {
	now := c.opts.Now()
	c.lastExp = now
	req := c.metrics.request(c.res, c.scope, now)
	rctx, cancel := c.rpcContext(ctx)
	defer cancel()
	resp, err := c.metrRPC.Export(rctx, req, c.callOpts...)
	if err != nil {
		c.metricsLog.warn(c.log, now, "metrics export failed; the next one carries the totals", "error", err)
		return
	}
	c.metrics.dirty = false
	if ps := resp.GetPartialSuccess(); ps != nil && (ps.RejectedDataPoints > 0 || ps.ErrorMessage != "") {
		c.metricsLog.warn(c.log, now, "collector rejected part of a metrics request",
			"rejected_data_points", ps.RejectedDataPoints, "message", ps.ErrorMessage)
	}
}

func (c *Client) rpcContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, c.md)
	}
	return context.WithTimeout(ctx, c.opts.Timeout)
}

func (c *Client) reject(n uint64, msg string, args ...any) {
	c.rejected.Add(n)
	c.rejectLog.warn(c.log, c.opts.Now(), msg, args...)
}

// Rejected implements delivery.Rejecter: records refused since the last
// call, by a permanent error status or a partial success.
func (c *Client) Rejected() uint64 { return c.rejected.Swap(0) }

// Connected implements delivery.Connector: whether the gRPC channel is
// ready. It is false before the first Send (the channel dials lazily).
func (c *Client) Connected() bool { return c.conn.GetState() == connectivity.Ready }

// Close implements delivery.Client. Totals counted since the last
// successful metrics export are sent once more, so a shutdown does not
// lose the last interval's metrics; it waits at most closeTimeout for
// them, because the agent's shutdown waits for Close.
func (c *Client) Close() error {
	if c.metrics != nil && c.metrics.dirty {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		c.exportMetrics(ctx)
		cancel()
	}
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("otlp close %s: %w", c.target, err)
	}
	return nil
}

// Permanent reports whether an Export error means the request will never
// be accepted, per the OTLP specification's table of gRPC codes: only
// Canceled, DeadlineExceeded, Aborted, OutOfRange, Unavailable and
// DataLoss are retryable, and ResourceExhausted when the server attaches
// RetryInfo (without it, it is usually a message over the server's size
// limit, which retrying cannot fix). Errors without a status (a context
// ending) are not permanent.
func Permanent(err error) bool {
	st, ok := status.FromError(err)
	if !ok || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch st.Code() {
	case codes.OK, codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		return false
	case codes.ResourceExhausted:
		for _, d := range st.Details() {
			if _, ok := d.(*errdetails.RetryInfo); ok {
				return false
			}
		}
	}
	return true
}

// warnLimiter logs a warning at most once per warnInterval, with the number
// of occurrences it suppressed in between.
type warnLimiter struct {
	last       time.Time
	suppressed int
}

func (w *warnLimiter) warn(log *slog.Logger, now time.Time, msg string, args ...any) {
	if !w.last.IsZero() && now.Sub(w.last) < warnInterval {
		w.suppressed++
		return
	}
	if w.suppressed > 0 {
		args = append(args, "suppressed_since_last", w.suppressed)
	}
	w.last, w.suppressed = now, 0
	log.Warn(msg, args...)
}
