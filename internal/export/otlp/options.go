package otlp

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"

	"loupe/internal/config/check"
	"loupe/internal/export/tlsconf"
)

// Defaults of Options.
const (
	DefaultTimeout           = 10 * time.Second
	DefaultMaxRequestRecords = 1000
	DefaultMetricsInterval   = 10 * time.Second
	DefaultMaxMetricStreams  = 1024

	// MaxRequestRecordsLimit bounds MaxRequestRecords so that one logs
	// request stays under gRPC's default 4 MiB receive limit, which
	// collectors keep unless configured otherwise: a record encodes to at
	// most maxRecordBytes (1 000; a test asserts it: 915 for an estimate
	// with every attribute at its longest), so 4 000 of them stay under
	// 3.5 MiB, leaving room for a large resource.
	MaxRequestRecordsLimit = 4000
)

// Compression values.
const (
	CompressionNone = "none"
	CompressionGzip = "gzip"
)

// Options configure a Client. The zero value is valid: plaintext gRPC, no
// compression, the defaults above.
type Options struct {
	// TLS is transport security, on if any of its settings is
	// (tlsconf.Config.On): a CA file or a client certificate never leads
	// to a silent plaintext connection.
	TLS tlsconf.Config

	// Headers are sent as gRPC metadata with every request (authentication
	// tokens: "authorization": "Bearer ..."). Keys are lowercased by gRPC.
	Headers map[string]string

	// Compression is "none" (default, "" too) or "gzip". Gzip cuts the
	// bytes on the wire several times (attribute keys repeat in every
	// record) for CPU on both ends.
	Compression string

	// Timeout bounds each Export RPC (default 10s), within the context
	// Send is given.
	Timeout time.Duration

	// MaxRequestRecords is the number of log records per Export request
	// (default 1000, at most MaxRequestRecordsLimit). A batch larger than
	// this is sent as several requests, in order. The client's encoding
	// buffers grow to this many records and are reused.
	MaxRequestRecords int

	// HostName is the resource's host.name (default: os.Hostname()).
	HostName string
	// Version, if set, is sent as the resource's service.version and the
	// instrumentation scope's version.
	Version string
	// Resource adds resource attributes (k8s.node.name, deployment...).
	// They override service.name and host.name if they name them.
	Resource map[string]string

	// DisableMetrics turns the aggregate traffic metrics off; only logs
	// are sent.
	DisableMetrics bool
	// MetricsInterval is the least time between two metrics exports
	// (default 10s); a negative value exports after every Send. Metrics
	// are cumulative, so a skipped export loses nothing: the next carries
	// the totals.
	MetricsInterval time.Duration
	// MaxMetricStreams bounds the (interface, direction, transport)
	// streams of each metric (default 1024). Past it, new interfaces are
	// counted under network.interface.name="_other".
	MaxMetricStreams int

	// Logger receives the client's logs (default slog.Default()), with
	// component=export.otlp.
	Logger *slog.Logger
	// Now is the clock (default time.Now); tests fix it.
	Now func() time.Time
}

func (o *Options) withDefaults() (Options, error) {
	v := *o
	if v.Timeout == 0 {
		v.Timeout = DefaultTimeout
	}
	if v.MaxRequestRecords == 0 {
		v.MaxRequestRecords = DefaultMaxRequestRecords
	}
	if v.MetricsInterval == 0 {
		v.MetricsInterval = DefaultMetricsInterval
	}
	if v.MaxMetricStreams == 0 {
		v.MaxMetricStreams = DefaultMaxMetricStreams
	}
	if v.Compression == "" {
		v.Compression = CompressionNone
	}
	if v.Logger == nil {
		v.Logger = slog.Default()
	}
	if v.Now == nil {
		v.Now = time.Now
	}
	if v.HostName == "" {
		h, err := os.Hostname()
		if err != nil {
			return v, fmt.Errorf("otlp: host name for the resource: %w (set HostName)", err)
		}
		v.HostName = h
	}
	var errs []error
	if v.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", v.Timeout))
	}
	if v.MaxRequestRecords < 0 || v.MaxRequestRecords > MaxRequestRecordsLimit {
		errs = append(errs, fmt.Errorf("max request records %d is not in 1-%d", v.MaxRequestRecords, MaxRequestRecordsLimit))
	}
	if v.MaxMetricStreams < 0 {
		errs = append(errs, fmt.Errorf("max metric streams %d is negative", v.MaxMetricStreams))
	}
	if v.Compression != CompressionNone && v.Compression != CompressionGzip {
		errs = append(errs, fmt.Errorf("compression %s is not none or gzip", check.Quote(v.Compression)))
	}
	for k, val := range v.Headers {
		if err := checkHeader(k, val); err != nil {
			errs = append(errs, err)
		}
	}
	if err := v.TLS.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("tls.%w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return v, fmt.Errorf("otlp options: %w", err)
	}
	return v, nil
}

// dialOptions turns the transport options into gRPC dial options.
func (o *Options) dialOptions() ([]grpc.DialOption, error) {
	creds := insecure.NewCredentials()
	if o.TLS.On() {
		cfg, err := o.TLS.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("otlp: %w", err)
		}
		creds = credentials.NewTLS(cfg)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent("loupe-otlp"),
		// gRPC's default reconnect back-off grows to 120 s: a collector
		// that restarts would get no data for two minutes after it is
		// back. The delivery queue already backs off between attempts, so
		// the channel only needs to try again soon.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, nil
}

// callOptions are the per-RPC options.
func (o *Options) callOptions() []grpc.CallOption {
	if o.Compression == CompressionGzip {
		return []grpc.CallOption{grpc.UseCompressor(gzip.Name)}
	}
	return nil
}

// checkHeader applies gRPC's metadata rules at start: a header gRPC refuses
// would fail every request with Internal, a permanent error, and every
// record would be rejected.
func checkHeader(k, v string) error {
	lk := strings.ToLower(k)
	if lk == "" || strings.HasPrefix(lk, "grpc-") {
		return fmt.Errorf("header %s: empty or reserved (grpc-) name", check.Quote(k))
	}
	for _, c := range lk {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("header %s: names take only letters, digits, '-', '_' and '.'", check.Quote(k))
		}
	}
	// The value is never shown: it is usually a secret.
	for _, c := range v {
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("header %s: the value must be printable ASCII", check.Quote(k))
		}
	}
	return nil
}
