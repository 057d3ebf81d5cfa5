package otlp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"loupe/internal/flow"
)

func newTestClient(t *testing.T, target string, opts Options) *Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.HostName == "" {
		opts.HostName = "node-1"
	}
	c, err := New(target, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestEveryRecordArrivesWithExactAttributes(t *testing.T) {
	col := startCollector(t, "", collectorConfig{})
	clock := &fakeClock{now: t0.Add(time.Hour)}
	c := newTestClient(t, col.target(), Options{
		Now: clock.Now, Version: "v1.2.3", Resource: map[string]string{"k8s.node.name": "n1"},
		DisableMetrics: true,
	})
	cases := testCases()
	failed, err := c.Send(context.Background(), records(cases))
	if err != nil || failed != nil {
		t.Fatalf("Send: failed %d, err %v", len(failed), err)
	}
	got := col.logRecords()
	if len(got) != len(cases) {
		t.Fatalf("collector received %d log records, sent %d", len(got), len(cases))
	}
	wantRes := map[string]any{"service.name": "loupe", "service.version": "v1.2.3", "host.name": "node-1", "k8s.node.name": "n1"}
	for i, tc := range cases {
		g := got[i]
		if d := diffMaps(g.attrs, tc.attrs); d != "" {
			t.Errorf("%s: attributes differ:%s", tc.name, d)
		}
		if d := diffMaps(g.resource, wantRes); d != "" {
			t.Errorf("%s: resource differs:%s", tc.name, d)
		}
		if g.scopeName != "loupe" || g.scopeVersion != "v1.2.3" {
			t.Errorf("%s: scope %q %q, want loupe v1.2.3", tc.name, g.scopeName, g.scopeVersion)
		}
		if g.eventName != "loupe.flow" {
			t.Errorf("%s: event name %q", tc.name, g.eventName)
		}
		if g.time != uint64(tc.rec.LastSeen.UnixNano()) {
			t.Errorf("%s: timestamp %d, want last_seen %d", tc.name, g.time, tc.rec.LastSeen.UnixNano())
		}
		if g.observed != uint64(t0.Add(time.Hour).UnixNano()) {
			t.Errorf("%s: observed timestamp %d, want the export time %d", tc.name, g.observed, t0.Add(time.Hour).UnixNano())
		}
		if g.body.Type() != pcommon.ValueTypeEmpty {
			t.Errorf("%s: body %v, want empty", tc.name, g.body.AsRaw())
		}
	}
	if n := c.Rejected(); n != 0 {
		t.Errorf("Rejected() = %d, want 0", n)
	}
	if !c.Connected() {
		t.Error("Connected() = false after a successful export")
	}
	if n := len(col.metrics.AllMetrics()); n != 0 {
		t.Errorf("DisableMetrics: the collector received %d metrics requests", n)
	}
}

// TestReusedBufferLeaksNothing sends records with many attributes and
// with few, in turn, through the same (reused) encoder buffer: no
// attribute of one may survive into the next.
func TestReusedBufferLeaksNothing(t *testing.T) {
	col := startCollector(t, "", collectorConfig{})
	c := newTestClient(t, col.target(), Options{DisableMetrics: true})
	cases := testCases()
	order := []int{0, 4, 3, 1, 4, 0}
	for _, i := range order {
		if failed, err := c.Send(context.Background(), []flow.Record{cases[i].rec}); err != nil || failed != nil {
			t.Fatalf("Send: failed %d, err %v", len(failed), err)
		}
	}
	got := col.logRecords()
	if len(got) != len(order) {
		t.Fatalf("collector received %d records, sent %d", len(got), len(order))
	}
	for j, i := range order {
		if d := diffMaps(got[j].attrs, cases[i].attrs); d != "" {
			t.Errorf("send %d (%s): attributes differ:%s", j, cases[i].name, d)
		}
	}
}

func TestLargeBatchIsSplitInOrder(t *testing.T) {
	col := startCollector(t, "", collectorConfig{})
	c := newTestClient(t, col.target(), Options{MaxRequestRecords: 3, DisableMetrics: true})
	batch := manyRecords(10, 2)
	if failed, err := c.Send(context.Background(), batch); err != nil || failed != nil {
		t.Fatalf("Send: failed %d, err %v", len(failed), err)
	}
	var sizes []int
	for _, ld := range col.logs.AllLogs() {
		sizes = append(sizes, ld.LogRecordCount())
	}
	if !reflect.DeepEqual(sizes, []int{3, 3, 3, 1}) {
		t.Fatalf("request sizes %v, want [3 3 3 1]", sizes)
	}
	got := col.logRecords()
	for i := range batch {
		if p := got[i].attrs["loupe.flow.packets"]; p != int64(i+1) {
			t.Fatalf("record %d arrived with packets %v, want %d (order lost)", i, p, i+1)
		}
	}
}

func TestMetricsAreCumulativeTotals(t *testing.T) {
	col := startCollector(t, "", collectorConfig{})
	clock := &fakeClock{now: t0}
	c := newTestClient(t, col.target(), Options{Now: clock.Now, MetricsInterval: -1})
	start := uint64(t0.UnixNano())

	clock.Add(time.Second)
	if failed, err := c.Send(context.Background(), records(testCases())); err != nil || failed != nil {
		t.Fatalf("Send: failed %d, err %v", len(failed), err)
	}
	want := map[string]int64{
		// loupe.network.io (bytes)
		"loupe.network.io By eth0/receive/tcp":                      1500,
		"loupe.network.io By veth1a2b/transmit/udp":                 276,
		"loupe.network.io By eth0/transmit/icmp":                    196,
		"loupe.network.io By br0/receive/ipv6-icmp":                 86,
		"loupe.network.io By eth0/receive/-":                        42,
		"loupe.network.io By -/transmit/sctp":                       900,
		"loupe.network.io By eth0/receive/gre":                      5000,
		"loupe.network.io By eth0/receive/udp":                      480,    // decoded: exact
		"loupe.network.io By veth1a2b/transmit/tcp":                 150000, // an estimate, summed as counted
		"loupe.network.packet.count {packet} eth0/receive/tcp":      10,
		"loupe.network.packet.count {packet} veth1a2b/transmit/udp": 3,
		"loupe.network.packet.count {packet} eth0/transmit/icmp":    2,
		"loupe.network.packet.count {packet} br0/receive/ipv6-icmp": 1,
		"loupe.network.packet.count {packet} eth0/receive/-":        1,
		"loupe.network.packet.count {packet} -/transmit/sctp":       5,
		"loupe.network.packet.count {packet} eth0/receive/gre":      4,
		"loupe.network.packet.count {packet} eth0/receive/udp":      6,
		"loupe.network.packet.count {packet} veth1a2b/transmit/tcp": 120,
	}
	checkPoints(t, col.lastMetrics(t), withWireMetrics(want), start, uint64(t0.Add(time.Second).UnixNano()))

	// A second batch adds to two streams and creates one.
	clock.Add(time.Second)
	second := []flow.Record{testCases()[0].rec, testCases()[0].rec, testCases()[4].rec}
	second[1].Packets, second[1].Bytes, second[1].Segments, second[1].WireBytes = 7, 700, 14, 770
	second[2].Iface = "eth1"
	if failed, err := c.Send(context.Background(), second); err != nil || failed != nil {
		t.Fatalf("Send: failed %d, err %v", len(failed), err)
	}
	want["loupe.network.io By eth0/receive/tcp"] = 1500 + 1500 + 700
	want["loupe.network.packet.count {packet} eth0/receive/tcp"] = 10 + 10 + 7
	want["loupe.network.io By eth1/receive/-"] = 42
	want["loupe.network.packet.count {packet} eth1/receive/-"] = 1
	checkPoints(t, col.lastMetrics(t), withWireMetrics(want), start, uint64(t0.Add(2*time.Second).UnixNano()))
	if n := len(col.metrics.AllMetrics()); n != 2 {
		t.Errorf("collector received %d metrics requests, want one per Send (2)", n)
	}
}

// checkPoints asserts the points of one metrics request: exactly the
// streams of want, with its values, cumulative and monotonic, starting at
// start and stamped now, under the client's resource and scope.
func checkPoints(t *testing.T, pts []point, want map[string]int64, start, now uint64) {
	t.Helper()
	got := map[string]int64{}
	for _, p := range pts {
		key := fmt.Sprintf("%s %s %s/%s/%s", p.metric, p.unit, attrOr(p.attrs, AttrIfaceName), attrOr(p.attrs, AttrIODirection), attrOr(p.attrs, AttrTransport))
		if _, dup := got[key]; dup {
			t.Errorf("stream %s sent twice", key)
		}
		got[key] = p.value
		if len(p.attrs) != 3-boolInt(p.attrs[AttrIfaceName] == nil)-boolInt(p.attrs[AttrTransport] == nil) {
			t.Errorf("stream %s has unexpected attributes %v", key, p.attrs)
		}
		if !p.cumulative || !p.monotonic {
			t.Errorf("stream %s: temporality %s, monotonic %v; want cumulative monotonic", key, p.temporalityName, p.monotonic)
		}
		if p.start != start || p.time != now {
			t.Errorf("stream %s: start %d time %d, want %d %d", key, p.start, p.time, start, now)
		}
		if p.scopeName != "loupe" || p.resource["service.name"] != "loupe" || p.resource["host.name"] != "node-1" {
			t.Errorf("stream %s: scope %q resource %v", key, p.scopeName, p.resource)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("metric points:\n got %v\nwant %v", got, want)
	}
}

func attrOr(m map[string]any, k string) string {
	if v, ok := m[k]; ok {
		return fmt.Sprint(v)
	}
	return "-"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestMetricsIntervalAndFinalExportOnClose(t *testing.T) {
	col := startCollector(t, "", collectorConfig{})
	clock := &fakeClock{now: t0}
	c, err := New(col.target(), Options{Now: clock.Now, MetricsInterval: 10 * time.Second, Logger: quietLogger(), HostName: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(recs []flow.Record) {
		t.Helper()
		if failed, err := c.Send(context.Background(), recs); err != nil || failed != nil {
			t.Fatalf("Send: failed %d, err %v", len(failed), err)
		}
	}
	rec := testCases()[0].rec // eth0/receive/tcp, 10 packets, 1500 bytes
	send([]flow.Record{rec})  // first Send exports
	clock.Add(9 * time.Second)
	send([]flow.Record{rec}) // within the interval: no export
	if n := len(col.metrics.AllMetrics()); n != 1 {
		t.Fatalf("%d metrics requests after two Sends 9 s apart, want 1", n)
	}
	clock.Add(time.Second)
	send([]flow.Record{rec}) // 10 s after the first export
	if n := len(col.metrics.AllMetrics()); n != 2 {
		t.Fatalf("%d metrics requests once the interval passed, want 2", n)
	}
	want := map[string]int64{"loupe.network.io By eth0/receive/tcp": 4500, "loupe.network.packet.count {packet} eth0/receive/tcp": 30}
	checkPoints(t, col.lastMetrics(t), withWireMetrics(want), uint64(t0.UnixNano()), uint64(t0.Add(10*time.Second).UnixNano()))

	clock.Add(time.Second)
	send([]flow.Record{rec}) // counted, not exported yet
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(col.metrics.AllMetrics()); n != 3 {
		t.Fatalf("%d metrics requests after Close, want 3 (Close exports the last totals)", n)
	}
	want = withWireMetrics(map[string]int64{"loupe.network.io By eth0/receive/tcp": 6000, "loupe.network.packet.count {packet} eth0/receive/tcp": 40})
	checkPoints(t, col.lastMetrics(t), want, uint64(t0.UnixNano()), uint64(t0.Add(11*time.Second).UnixNano()))
}

func TestMetricStreamsAreBounded(t *testing.T) {
	col := startCollector(t, "", collectorConfig{})
	c := newTestClient(t, col.target(), Options{MetricsInterval: -1, MaxMetricStreams: 3, DisableMetrics: false})
	// 8 records over eth0..eth3, directions alternating: streams in order
	// of arrival eth0/receive, eth1/transmit, eth2/receive, then full.
	batch := manyRecords(8, 4)
	if failed, err := c.Send(context.Background(), batch); err != nil || failed != nil {
		t.Fatalf("Send: failed %d, err %v", len(failed), err)
	}
	// Records i (packets i+1, bytes 100(i+1)): eth(i%4), direction i%2.
	// eth0/receive: 0,4 -> 1+5 ; eth1/transmit: 1,5 -> 2+6 ; eth2/receive: 2,6 -> 3+7
	// eth3/transmit: 3,7 -> folded into _other/transmit: 4+8.
	want := map[string]int64{
		"loupe.network.packet.count {packet} eth0/receive/tcp":    6,
		"loupe.network.packet.count {packet} eth1/transmit/tcp":   8,
		"loupe.network.packet.count {packet} eth2/receive/tcp":    10,
		"loupe.network.packet.count {packet} _other/transmit/tcp": 12,
		"loupe.network.io By eth0/receive/tcp":                    600,
		"loupe.network.io By eth1/transmit/tcp":                   800,
		"loupe.network.io By eth2/receive/tcp":                    1000,
		"loupe.network.io By _other/transmit/tcp":                 1200,
	}
	pts := col.lastMetrics(t)
	got := map[string]int64{}
	for _, p := range pts {
		got[fmt.Sprintf("%s %s %s/%s/%s", p.metric, p.unit, attrOr(p.attrs, AttrIfaceName), attrOr(p.attrs, AttrIODirection), attrOr(p.attrs, AttrTransport))] = p.value
	}
	if want = withWireMetrics(want); !reflect.DeepEqual(got, want) {
		t.Fatalf("points:\n got %v\nwant %v", got, want)
	}
}

// withWireMetrics adds to want, which lists the packet and byte sums of
// streams, their segment and wire-byte sums, for records whose segments
// are twice their packets and whose wire bytes are their bytes plus 10 a
// packet (testCases and manyRecords).
func withWireMetrics(want map[string]int64) map[string]int64 {
	out := maps.Clone(want)
	for k, v := range want {
		if stream, ok := strings.CutPrefix(k, MetricPackets+" {packet} "); ok {
			out[MetricSegments+" {segment} "+stream] = 2 * v
			out[MetricWireIO+" By "+stream] = want[MetricIO+" By "+stream] + 10*v
		}
	}
	return out
}

func TestCollectorDownThenUp(t *testing.T) {
	addr := freeAddr(t)
	c := newTestClient(t, "otlp://"+addr, Options{MetricsInterval: -1, Timeout: 5 * time.Second})
	batch := manyRecords(25, 2)
	failed, err := c.Send(context.Background(), batch)
	if len(failed) != len(batch) || &failed[0] != &batch[0] {
		t.Fatalf("collector down: failed %d records, want all %d (aliasing batch)", len(failed), len(batch))
	}
	if status.Code(err) != codes.Unavailable || Permanent(err) {
		t.Fatalf("collector down: err %v, want a retryable Unavailable", err)
	}
	if c.Rejected() != 0 || c.Connected() {
		t.Fatalf("collector down: rejected %d, connected %v", c.Rejected(), c.Connected())
	}

	col := startCollector(t, addr, collectorConfig{})
	// The channel reconnects on its own back-off (at most 5 s); retry the
	// way the queue would, bounded in count and time.
	deadline := time.Now().Add(30 * time.Second)
	attempts := 0
	for failed != nil {
		if attempts++; attempts > 300 || time.Now().After(deadline) {
			t.Fatalf("not delivered after %d attempts: %v", attempts, err)
		}
		time.Sleep(100 * time.Millisecond)
		failed, err = c.Send(context.Background(), failed)
	}
	got := col.logRecords()
	if len(got) != len(batch) {
		t.Fatalf("collector received %d records, want each of the %d exactly once", len(got), len(batch))
	}
	for i := range batch {
		if got[i].attrs["loupe.flow.bytes"] != int64(batch[i].Bytes) {
			t.Fatalf("record %d: bytes %v, want %d", i, got[i].attrs["loupe.flow.bytes"], batch[i].Bytes)
		}
	}
	var wantPackets int64
	for i := range batch {
		wantPackets += int64(batch[i].Packets)
	}
	var gotPackets int64
	for _, p := range col.lastMetrics(t) {
		if p.metric == MetricPackets {
			gotPackets += p.value
		}
	}
	if gotPackets != wantPackets {
		t.Fatalf("metrics count %d packets, want %d (each record once, failed attempts not counted)", gotPackets, wantPackets)
	}
	if !c.Connected() {
		t.Fatal("Connected() = false after delivery")
	}
}

func TestRefusedRecords(t *testing.T) {
	for _, tc := range []struct {
		name       string
		consumeErr error
		wantCode   codes.Code
		permanent  bool
	}{
		// The receiver turns a permanent consumer error without a status
		// into Internal, and passes a status through.
		{"permanent consumer error", permanentErr(errors.New("schema violation")), codes.Internal, true},
		{"invalid argument", status.Error(codes.InvalidArgument, "bad record"), codes.InvalidArgument, true},
		{"unauthenticated", status.Error(codes.Unauthenticated, "no token"), codes.Unauthenticated, true},
		// A plain consumer error is retryable: Unavailable.
		{"transient consumer error", errors.New("queue full"), codes.Unavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			col := startCollector(t, "", collectorConfig{logsErr: tc.consumeErr})
			c := newTestClient(t, col.target(), Options{MaxRequestRecords: 4, MetricsInterval: -1})
			batch := manyRecords(10, 1)
			failed, err := c.Send(context.Background(), batch)
			if tc.permanent {
				if err != nil || failed != nil {
					t.Fatalf("Send: failed %d, err %v; want rejected, not failed", len(failed), err)
				}
				if n := c.Rejected(); n != 10 {
					t.Fatalf("Rejected() = %d, want 10", n)
				}
				if n := c.Rejected(); n != 0 {
					t.Fatalf("second Rejected() = %d, want 0 (it resets)", n)
				}
				// Refused logs are still traffic: the metrics count them.
				var bytes int64
				for _, p := range col.lastMetrics(t) {
					if p.metric == MetricIO {
						bytes += p.value
					}
				}
				if bytes != 100*55 {
					t.Fatalf("metrics count %d bytes, want %d", bytes, 100*55)
				}
				return
			}
			if len(failed) != 10 || status.Code(err) != tc.wantCode {
				t.Fatalf("Send: failed %d, err %v; want all 10 failed with %v", len(failed), err, tc.wantCode)
			}
			if n := c.Rejected(); n != 0 {
				t.Fatalf("Rejected() = %d, want 0", n)
			}
			if n := len(col.metrics.AllMetrics()); n != 0 {
				t.Fatalf("%d metrics requests although no record was delivered", n)
			}
		})
	}
}

func TestCanceledContextFailsEverything(t *testing.T) {
	col := startCollector(t, "", collectorConfig{})
	c := newTestClient(t, col.target(), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	batch := manyRecords(5, 1)
	failed, err := c.Send(ctx, batch)
	if len(failed) != 5 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Send(canceled): failed %d, err %v; want 5 failed, context.Canceled", len(failed), err)
	}
	if n := len(col.logRecords()); n != 0 {
		t.Fatalf("collector received %d records from a canceled Send", n)
	}
}

// TestMetricsFailureFailsNoRecord sends to a collector with a logs pipeline
// only: its metrics export is refused (Unimplemented), which must neither
// fail nor reject a record, and is tried again at the next Send.
func TestMetricsFailureFailsNoRecord(t *testing.T) {
	col := startCollector(t, "", collectorConfig{noMetrics: true})
	c := newTestClient(t, col.target(), Options{MetricsInterval: -1})
	for range 2 {
		if failed, err := c.Send(context.Background(), manyRecords(6, 2)); err != nil || failed != nil {
			t.Fatalf("Send: failed %d, err %v", len(failed), err)
		}
	}
	if n := len(col.logRecords()); n != 12 {
		t.Fatalf("collector received %d records, want 12", n)
	}
	if n := c.Rejected(); n != 0 {
		t.Fatalf("Rejected() = %d: a metrics failure rejected records", n)
	}
	if !c.metrics.dirty {
		t.Fatal("totals marked exported although the export failed")
	}
}
