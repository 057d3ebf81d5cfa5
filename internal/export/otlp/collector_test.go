package otlp

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// collector is the OpenTelemetry Collector's own OTLP receiver, run in
// this process on a loopback port: the real decoder every OTLP pipeline
// starts with, without a collector binary to install.
type collector struct {
	addr    string
	logs    *consumertest.LogsSink
	metrics *consumertest.MetricsSink
	traces  *consumertest.TracesSink
	stop    func()
}

// collectorConfig adjusts the receiver's gRPC server (TLS, metadata,
// message size) and may replace its consumers (to make it fail).
type collectorConfig struct {
	grpc        func(*configgrpc.ServerConfig)
	logsErr     error // the logs consumer returns it, if set
	logConsumer consumer.Logs
	noMetrics   bool // a logs-only receiver: no metrics service
}

// freeAddr returns a loopback address no one listens on now. Another
// process could take it before the receiver binds; startCollector fails
// loudly then, it does not retry elsewhere (some tests need the address
// before the collector starts).
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// startCollector starts a receiver on addr ("" picks a free port) and
// stops it in t.Cleanup (or earlier through stop).
func startCollector(t testing.TB, addr string, cc collectorConfig) *collector {
	t.Helper()
	if addr == "" {
		addr = freeAddr(t)
	}
	c := &collector{addr: addr, logs: new(consumertest.LogsSink), metrics: new(consumertest.MetricsSink), traces: new(consumertest.TracesSink)}
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.HTTP = configoptional.None[otlpreceiver.HTTPConfig]()
	g := cfg.Protocols.GRPC.GetOrInsertDefault()
	g.NetAddr.Endpoint = addr
	if cc.grpc != nil {
		cc.grpc(g)
	}
	var logsConsumer consumer.Logs = c.logs
	switch {
	case cc.logConsumer != nil:
		logsConsumer = cc.logConsumer
	case cc.logsErr != nil:
		logsConsumer = consumertest.NewErr(cc.logsErr)
	}
	ctx := context.Background()
	set := receivertest.NewNopSettings(f.Type())
	// The factory shares one receiver (one gRPC server) between the
	// signals created from the same config.
	lr, err := f.CreateLogs(ctx, set, cfg, logsConsumer)
	if err != nil {
		t.Fatal(err)
	}
	comps := []component.Component{lr}
	if !cc.noMetrics {
		mr, err := f.CreateMetrics(ctx, set, cfg, c.metrics)
		if err != nil {
			t.Fatal(err)
		}
		comps = append(comps, mr)
		tr, err := f.CreateTraces(ctx, set, cfg, c.traces)
		if err != nil {
			t.Fatal(err)
		}
		comps = append(comps, tr)
	}
	host := componenttest.NewNopHost()
	for _, comp := range comps {
		if err := comp.Start(ctx, host); err != nil {
			t.Fatalf("start OTLP receiver on %s: %v", addr, err)
		}
	}
	var once sync.Once
	c.stop = func() {
		once.Do(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, comp := range comps {
				if err := comp.Shutdown(sctx); err != nil {
					t.Errorf("shutdown receiver: %v", err)
				}
			}
		})
	}
	t.Cleanup(c.stop)
	return c
}

func (c *collector) target() string { return "otlp://" + c.addr }

// received is one log record as the collector decoded it, with its
// resource and scope.
type received struct {
	resource                map[string]any
	scopeName, scopeVersion string
	eventName               string
	time, observed          uint64
	body                    pcommon.Value
	attrs                   map[string]any
}

// logRecords flattens every log record the collector consumed, in order.
func (c *collector) logRecords() []received {
	var out []received
	for _, ld := range c.logs.AllLogs() {
		out = append(out, flattenLogs(ld)...)
	}
	return out
}

func flattenLogs(ld plog.Logs) []received {
	var out []received
	for i := range ld.ResourceLogs().Len() {
		rl := ld.ResourceLogs().At(i)
		res := rl.Resource().Attributes().AsRaw()
		for j := range rl.ScopeLogs().Len() {
			sl := rl.ScopeLogs().At(j)
			for k := range sl.LogRecords().Len() {
				lr := sl.LogRecords().At(k)
				out = append(out, received{
					resource:     res,
					scopeName:    sl.Scope().Name(),
					scopeVersion: sl.Scope().Version(),
					eventName:    lr.EventName(),
					time:         uint64(lr.Timestamp()),
					observed:     uint64(lr.ObservedTimestamp()),
					body:         lr.Body(),
					attrs:        lr.Attributes().AsRaw(),
				})
			}
		}
	}
	return out
}

// point is one data point of a cumulative sum as the collector decoded it.
type point struct {
	metric, unit    string
	attrs           map[string]any
	value           int64
	start, time     uint64
	cumulative      bool
	monotonic       bool
	resource        map[string]any
	scopeName       string
	temporalityName string
}

// lastMetrics returns the points of the last metrics request consumed.
func (c *collector) lastMetrics(t testing.TB) []point {
	t.Helper()
	all := c.metrics.AllMetrics()
	if len(all) == 0 {
		t.Fatal("the collector received no metrics")
	}
	return flattenMetrics(t, all[len(all)-1])
}

func flattenMetrics(t testing.TB, md pmetric.Metrics) []point {
	t.Helper()
	var out []point
	for i := range md.ResourceMetrics().Len() {
		rm := md.ResourceMetrics().At(i)
		for j := range rm.ScopeMetrics().Len() {
			sm := rm.ScopeMetrics().At(j)
			for k := range sm.Metrics().Len() {
				m := sm.Metrics().At(k)
				if m.Type() != pmetric.MetricTypeSum {
					t.Fatalf("metric %s is a %v, want a sum", m.Name(), m.Type())
				}
				s := m.Sum()
				for p := range s.DataPoints().Len() {
					dp := s.DataPoints().At(p)
					if dp.ValueType() != pmetric.NumberDataPointValueTypeInt {
						t.Fatalf("metric %s holds %v values, want int", m.Name(), dp.ValueType())
					}
					out = append(out, point{
						metric: m.Name(), unit: m.Unit(),
						attrs: dp.Attributes().AsRaw(), value: dp.IntValue(),
						start: uint64(dp.StartTimestamp()), time: uint64(dp.Timestamp()),
						cumulative:      s.AggregationTemporality() == pmetric.AggregationTemporalityCumulative,
						monotonic:       s.IsMonotonic(),
						resource:        rm.Resource().Attributes().AsRaw(),
						scopeName:       sm.Scope().Name(),
						temporalityName: s.AggregationTemporality().String(),
					})
				}
			}
		}
	}
	return out
}

// permanentErr marks err the way a collector component refuses data for
// good.
func permanentErr(err error) error { return consumererror.NewPermanent(err) }
