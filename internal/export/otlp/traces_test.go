package otlp

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"loupe/internal/hop"
)

// spanRequest is a request timed at three hooks of node-a: 3 µs then 2 µs.
func spanRequest(trace string) *hop.Request {
	r := &hop.Request{
		TraceID: trace, SpanID: "b7ad6b7169203331", TraceSource: "traceparent", Kind: "request",
		SrcAddr: netip.MustParseAddr("10.1.0.2"), DstAddr: netip.MustParseAddr("10.2.0.2"), SrcPort: 40000, DstPort: 80, Proto: 6,
		Seq: 12345, Node: "node-a", ClockOffsetNs: 1_700_000_000_000_000_000,
		Path: []hop.Point{
			{Iface: "vethA", Kind: "veth", Hook: "ingress", TimeNs: 1000},
			{Iface: "vxlan0", Kind: "vxlan", Hook: "egress", TimeNs: 4000},
			{Iface: "eth0", Kind: "device", Hook: "egress", TimeNs: 6000, Tunneled: true},
		},
	}
	r.Hops = hop.Hops(r.Path)
	r.Time = r.Wall(r.Path[0])
	return r
}

// The collector's own OTLP receiver decodes the spans: on the request's
// trace, children of the caller's span, one per hop with its interfaces,
// direction and times.
func TestSpansThroughCollector(t *testing.T) {
	c := startCollector(t, "", collectorConfig{})
	e, err := NewSpanExporter(c.target(), Options{HostName: "node-a", Version: "test"}, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.Export(spanRequest("0af7651916cd43dd8448eb211c80319c"))
	e.Export(&hop.Request{Kind: "sampled", Hops: []hop.Hop{{FromIface: "a", ToIface: "b"}}}) // no trace: not sent
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	all := c.traces.AllTraces()
	if len(all) != 1 {
		t.Fatalf("%d trace requests, want 1", len(all))
	}
	td := all[0]
	if td.SpanCount() != 2 {
		t.Fatalf("%d spans, want 2", td.SpanCount())
	}
	rs := td.ResourceSpans().At(0)
	if h, _ := rs.Resource().Attributes().Get(AttrHostName); h.Str() != "node-a" {
		t.Errorf("host.name %q", h.Str())
	}
	spans := rs.ScopeSpans().At(0).Spans()
	wantNames := []string{"hop vethA -> vxlan0", "hop vxlan0 -> eth0"}
	wantTimes := [][2]uint64{{1_700_000_000_000_001_000, 1_700_000_000_000_004_000}, {1_700_000_000_000_004_000, 1_700_000_000_000_006_000}}
	for i := range spans.Len() {
		s := spans.At(i)
		if s.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || s.ParentSpanID().String() != "b7ad6b7169203331" {
			t.Errorf("span %d: trace %s parent %s", i, s.TraceID(), s.ParentSpanID())
		}
		if s.SpanID().IsEmpty() || s.Name() != wantNames[i] || s.Kind() != ptrace.SpanKindInternal {
			t.Errorf("span %d: id %s name %q kind %v", i, s.SpanID(), s.Name(), s.Kind())
		}
		if got := [2]uint64{uint64(s.StartTimestamp()), uint64(s.EndTimestamp())}; got != wantTimes[i] {
			t.Errorf("span %d: times %v, want %v", i, got, wantTimes[i])
		}
		a := s.Attributes().AsRaw()
		if a[AttrHopDirection] != "out" || a[AttrSrcAddr] != "10.1.0.2" || a[AttrDstPort] != int64(80) || a[AttrTCPSeq] != int64(12345) ||
			a[AttrHopFromNode] != "node-a" || a[AttrTraceSource] != "traceparent" {
			t.Errorf("span %d attributes %v", i, a)
		}
	}
	if a := spans.At(1).Attributes().AsRaw(); a[AttrHopFrom] != "vxlan0" || a[AttrHopTo] != "eth0" || a[AttrHopLatency] != int64(2000) {
		t.Errorf("second span attributes %v", a)
	}
	if st := e.Stats(); st.Requests != 1 || st.Queued != 0 || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A full queue drops and counts; a collector that is away keeps the queue
// for the next attempt.
func TestSpansQueueBounded(t *testing.T) {
	e, err := NewSpanExporter("otlp://"+freeAddr(t), Options{HostName: "h", Timeout: 300 * time.Millisecond}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for range 5 {
		e.Export(spanRequest("0af7651916cd43dd8448eb211c80319c"))
	}
	if err := e.Flush(context.Background()); err == nil {
		t.Fatal("flush to no collector succeeded")
	}
	if st := e.Stats(); st.Dropped != 2 || st.Queued != 3 || st.Requests != 0 {
		t.Errorf("stats %+v, want 2 dropped, 3 queued", st)
	}
}
