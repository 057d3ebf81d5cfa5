package otlp

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
)

// logParts encodes r as a request of one log record and decodes it with
// protobuf-go: attribute key -> value, plus the record's own fields.
func logParts(t testing.TB, r *flow.Record) flowtest.Parts {
	t.Helper()
	wire := testEncoder(t).build([]flow.Record{*r}, t0)
	var req collogspb.ExportLogsServiceRequest
	if err := proto.Unmarshal(wire, &req); err != nil {
		t.Fatal(err)
	}
	lr := req.ResourceLogs[0].ScopeLogs[0].LogRecords[0]
	p := flowtest.Parts{
		flow.OTLPTimestamp:        fmt.Sprint(lr.TimeUnixNano),
		"observed_time_unix_nano": fmt.Sprint(lr.ObservedTimeUnixNano),
		"event_name":              lr.EventName,
	}
	for _, kv := range lr.Attributes {
		if _, dup := p[kv.Key]; dup {
			t.Fatalf("attribute %s twice", kv.Key)
		}
		p[kv.Key] = kv.Value.String()
	}
	return p
}

// TestLogsCoverage is the log records' field-coverage test: every field
// is in the attributes (or the timestamp) flow's registry names, and
// every attribute is registered.
func TestLogsCoverage(t *testing.T) {
	flowtest.Coverage{
		Encode: logParts,
		IDs:    func(f *flow.Field) []string { return f.Wire.OTLP },
		Other: map[string]string{
			"observed_time_unix_nano": "the export time",
			"event_name":              "loupe.flow, every record",
		},
	}.Check(t)
}

// TestAttributeNamesAreTheRegistrys ties the encoder's attribute slots to
// the registry: every slot's key is some field's OTLP attribute.
func TestAttributeNamesAreTheRegistrys(t *testing.T) {
	var registered []string
	for _, f := range flow.Fields() {
		registered = append(registered, f.Wire.OTLP...)
	}
	for i, k := range attrKeys {
		if !slices.Contains(registered, k) {
			t.Errorf("attribute slot %d (%s) is no field's attribute in flow's registry", i, k)
		}
	}
	for _, c := range []struct{ name, constant string }{{"packets", MetricPackets}, {"bytes", MetricIO}, {"segments", MetricSegments}, {"wire_bytes", MetricWireIO}} {
		f, _ := flow.FieldByName(c.name)
		if f.Wire.Metric == nil || f.Wire.Metric.OTLP != c.constant {
			t.Errorf("field %s: metric %+v, the package names it %s", c.name, f.Wire.Metric, c.constant)
		}
	}
}

// metricParts counts r alone and decodes the metrics request: one part per
// metric and stream.
func metricParts(t testing.TB, r *flow.Record) flowtest.Parts {
	t.Helper()
	m := newTrafficMetrics(t0, 10)
	m.add([]flow.Record{*r})
	req := m.request(nil, &commonpb.InstrumentationScope{Name: ScopeName}, t0.Add(time.Second))
	p := flowtest.Parts{}
	for _, mt := range req.ResourceMetrics[0].ScopeMetrics[0].Metrics {
		for _, dp := range mt.GetSum().DataPoints {
			var attrs []string
			for _, kv := range dp.Attributes {
				attrs = append(attrs, kv.Key+"="+kv.Value.GetStringValue())
			}
			p[mt.Name+"{"+strings.Join(attrs, ",")+"}"] = fmt.Sprint(dp.GetAsInt())
		}
	}
	return p
}

// TestMetricsCoverage is the traffic sums' field-coverage test. The sums
// aggregate: every counter is summed, and the exclusions are the fields
// they do not label by (they sum over them).
func TestMetricsCoverage(t *testing.T) {
	const summed = "summed over: streams are labelled by interface name, direction and transport only"
	excluded := map[string]string{
		"ifindex": summed + " (the name, not the index)", "src_mac": summed, "dst_mac": summed, "vlan_id": summed,
		"src_addr": summed, "dst_addr": summed, "src_port": summed, "dst_port": summed,
		"tcp_flags": "not a count: a union of flags does not add up", "dscp": summed,
		"sampling":         "not a count: the sums are of the counters as counted",
		"aggregate_prefix": summed + ": an aggregate's packets add to its interface's sums as a flow's do",
		"first_seen":       "the sums are cumulative since the exporter started", "last_seen": "the sums are cumulative since the exporter started",
		"eth_type@arp": "only IP versus non-IP shows (network.transport is set for IP flows)",
		"accuracy": "summed over: an estimate's counts add to the sums as counted, as sampled counts do unscaled; " +
			"a label would split every stream in up to three whose sum is what a dashboard wants",
		"max_error_packets": "not a count of traffic: a bound on an estimate's overcount (the log records carry it)",
		"max_error_bytes":   "not a count of traffic: a bound on an estimate's overcount (the log records carry it)",
		"error_confidence":  "not a count: a probability (the log records carry it)",
	}
	// The kernel signals, DNS and tunnels are not traffic: the log records
	// carry them, the Prometheus sink has their histograms and counters.
	for _, f := range flow.Fields() {
		if f.Presence != 0 {
			excluded[f.Name] = "not a traffic count: the log records carry it (and Prometheus its histograms and counters)"
		}
	}
	for _, name := range flow.K8sFieldNames() {
		excluded[name] = "summed over: the log records carry the names (and Prometheus labels by namespace and workload)"
	}
	flowtest.Coverage{Encode: metricParts, Excluded: excluded}.Check(t)
}
