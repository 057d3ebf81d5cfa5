package otlp

import (
	"cmp"
	"slices"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"loupe/internal/flow"
)

// streamKey identifies one stream of the traffic metrics. ip is false for
// non-IP flows (ARP...), which carry no network.transport.
type streamKey struct {
	iface string
	dir   flow.Direction
	proto uint8
	ip    bool
}

// streamTotals are a stream's sums of the record's counters, in the order
// of flow.Record.Counters.
type streamTotals [flow.NumCounters]uint64

// trafficMetrics keeps cumulative traffic totals by stream, the state
// behind the loupe.network.* sums: one sum per counter field of
// flow.Fields, named by flow's registry (Wire.Metric), so a counter added
// to the table is summed here too. Cumulative (not delta) temporality is
// what makes the metrics robust to a lost export: the next one carries the
// totals, and a backend computes rates from any two.
type trafficMetrics struct {
	start      uint64 // StartTimeUnixNano of every point: the client's start
	maxStreams int
	streams    map[streamKey]*streamTotals
	folded     uint64 // records counted under OtherIface
	dirty      bool   // totals changed since the last successful export
}

func newTrafficMetrics(start time.Time, maxStreams int) *trafficMetrics {
	return &trafficMetrics{
		start:      unixNano(start),
		maxStreams: maxStreams,
		streams:    make(map[streamKey]*streamTotals),
	}
}

// add counts records into the totals. It reports whether a record had to
// be folded into OtherIface for the first time, so the client can warn
// once.
func (m *trafficMetrics) add(batch []flow.Record) (startedFolding bool) {
	for i := range batch {
		r := &batch[i]
		k := streamKey{iface: r.Iface, dir: r.Direction}
		if networkType(r.EtherType) != "" {
			k.ip, k.proto = true, r.Proto
		}
		t := m.streams[k]
		if t == nil {
			if len(m.streams) >= m.maxStreams {
				// Bounded: past the cap only OtherIface streams are
				// added, at most one per direction and transport.
				k.iface = OtherIface
				if m.folded == 0 {
					startedFolding = true
				}
				m.folded++
				t = m.streams[k]
			}
			if t == nil {
				t = &streamTotals{}
				m.streams[k] = t
			}
		}
		c := r.Counters()
		for i := range c {
			t[i] += c[i]
		}
		m.dirty = true
	}
	return startedFolding
}

// request builds an export request of the current totals. Metrics are
// exported at most every few seconds, so it allocates freely.
func (m *trafficMetrics) request(res *resourcepb.Resource, scope *commonpb.InstrumentationScope, now time.Time) *colmetricspb.ExportMetricsServiceRequest {
	keys := make([]streamKey, 0, len(m.streams))
	for k := range m.streams {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b streamKey) int {
		return cmp.Or(cmp.Compare(a.iface, b.iface), cmp.Compare(a.dir, b.dir),
			compareBool(a.ip, b.ip), cmp.Compare(a.proto, b.proto))
	})
	ts := unixNano(now)
	counters := flow.CounterFields()
	points := make([][]*metricspb.NumberDataPoint, len(counters))
	for c := range points {
		points[c] = make([]*metricspb.NumberDataPoint, len(keys))
	}
	for i, k := range keys {
		t := m.streams[k]
		attrs := streamAttrs(k)
		for c := range points {
			points[c][i] = &metricspb.NumberDataPoint{
				Attributes: attrs, StartTimeUnixNano: m.start, TimeUnixNano: ts,
				Value: &metricspb.NumberDataPoint_AsInt{AsInt: int64(t[c])},
			}
		}
	}
	metrics := make([]*metricspb.Metric, len(counters))
	for c, f := range counters {
		mt := f.Wire.Metric
		metrics[c] = &metricspb.Metric{
			Name: mt.OTLP, Unit: mt.OTLPUnit, Description: mt.Help + ", by interface, direction and transport.",
			Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{
				DataPoints:             points[c],
				AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
				IsMonotonic:            true,
			}},
		}
	}
	return &colmetricspb.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		Resource:     res,
		ScopeMetrics: []*metricspb.ScopeMetrics{{Scope: scope, Metrics: metrics}},
	}}}
}

func streamAttrs(k streamKey) []*commonpb.KeyValue {
	attrs := make([]*commonpb.KeyValue, 0, 3)
	if k.iface != "" { // as in the logs: no name, no attribute
		attrs = append(attrs, strKV(AttrIfaceName, k.iface))
	}
	attrs = append(attrs, strKV(AttrIODirection, IODirection(k.dir)))
	if k.ip {
		attrs = append(attrs, strKV(AttrTransport, Transport(k.proto)))
	}
	return attrs
}

func strKV(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
