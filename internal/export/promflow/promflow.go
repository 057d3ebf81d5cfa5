// Package promflow keeps traffic totals by interface and direction and
// exposes them as Prometheus counters.
//
// Labels are bounded by construction: one series per (interface, direction)
// that carried traffic, no per-flow labels. Series of interfaces that carried
// nothing for IdleTTL are dropped, so container churn does not accumulate
// series; past MaxSeries, new interfaces fold into iface="_other".
package promflow

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/flow"
)

// OtherIface is the label value new interfaces fold into past MaxSeries.
const OtherIface = "_other"

// Options bound the sink's series.
type Options struct {
	MaxSeries int           // default 4096
	IdleTTL   time.Duration // default 1h
	Now       func() time.Time
}

type seriesKey struct {
	iface string
	dir   flow.Direction
}

type totals struct {
	packets, bytes uint64
	updated        time.Time
}

// Sink is both an export.Sink and a prometheus.Collector.
type Sink struct {
	opts    Options
	packets *prometheus.Desc
	bytes   *prometheus.Desc
	folded  *prometheus.Desc

	mu       sync.Mutex
	series   map[seriesKey]*totals
	foldings uint64
}

// New creates the sink.
func New(opts Options) *Sink {
	if opts.MaxSeries <= 0 {
		opts.MaxSeries = 4096
	}
	if opts.IdleTTL <= 0 {
		opts.IdleTTL = time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	labels := []string{"iface", "direction"}
	return &Sink{
		opts:    opts,
		series:  make(map[seriesKey]*totals),
		packets: prometheus.NewDesc("loupe_traffic_packets_total", "Packets seen at the TC hooks, by interface and direction.", labels, nil),
		bytes:   prometheus.NewDesc("loupe_traffic_bytes_total", "Bytes (L2 length at the hook) seen at the TC hooks, by interface and direction.", labels, nil),
		folded:  prometheus.NewDesc("loupe_traffic_series_folded_total", "Records counted under iface=\"_other\" because the series cap was reached.", nil, nil),
	}
}

// Name implements export.Sink.
func (s *Sink) Name() string { return "prometheus" }

// Write implements export.Sink.
func (s *Sink) Write(_ context.Context, batch []flow.Record) error {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range batch {
		r := &batch[i]
		k := seriesKey{iface: r.Iface, dir: r.Direction}
		if k.iface == "" {
			k.iface = "ifindex_unknown"
		}
		t := s.series[k]
		if t == nil {
			if len(s.series) >= s.opts.MaxSeries {
				s.foldings++
				k.iface = OtherIface
				t = s.series[k]
			}
			if t == nil {
				t = &totals{}
				s.series[k] = t
			}
		}
		t.packets += r.Packets
		t.bytes += r.Bytes
		t.updated = now
	}
	return nil
}

// Flush implements export.Sink: it drops idle series.
func (s *Sink) Flush(context.Context) error {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.series {
		if now.Sub(t.updated) > s.opts.IdleTTL {
			delete(s.series, k)
		}
	}
	return nil
}

// Close implements export.Sink.
func (s *Sink) Close() error { return nil }

// Describe implements prometheus.Collector.
func (s *Sink) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.packets
	ch <- s.bytes
	ch <- s.folded
}

// Collect implements prometheus.Collector.
func (s *Sink) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.series {
		dir := k.dir.String()
		ch <- prometheus.MustNewConstMetric(s.packets, prometheus.CounterValue, float64(t.packets), k.iface, dir)
		ch <- prometheus.MustNewConstMetric(s.bytes, prometheus.CounterValue, float64(t.bytes), k.iface, dir)
	}
	ch <- prometheus.MustNewConstMetric(s.folded, prometheus.CounterValue, float64(s.foldings))
}
