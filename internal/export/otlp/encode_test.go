package otlp

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"go.opentelemetry.io/collector/config/configgrpc"

	"loupe/internal/flow"
	"loupe/internal/tunnel"
)

// worstRecord has every attribute a record can carry at its longest: the
// longest interface name Linux allows (15), the longest IPv6 text, the
// largest counters.
func worstRecord() flow.Record {
	return flow.Record{
		Key: flow.Key{
			SrcAddr: addr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"), DstAddr: addr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffd"),
			SrcMAC: mac1, DstMAC: mac2, IfIndex: math.MaxUint32, EtherType: flow.EtherTypeIPv6,
			SrcPort: 65535, DstPort: 65535, Proto: flow.ProtoTCP, Direction: flow.Egress, VlanID: 4095,
		},
		Iface: strings.Repeat("v", 15), Packets: math.MaxInt64, Bytes: math.MaxInt64,
		Segments: math.MaxInt64, WireBytes: math.MaxInt64,
		FirstSeen: time.Unix(0, math.MaxInt64), LastSeen: time.Unix(0, math.MaxInt64),
		Sampling: math.MaxUint32, TCPFlags: 0x1ff, DSCP: 63,
		Accuracy: flow.Estimated, MaxErrorPackets: math.MaxInt64, MaxErrorBytes: math.MaxInt64, ErrorConfidence: 0.9816843611112658,
	}
}

func testEncoder(t testing.TB) *logEncoder {
	t.Helper()
	o := Options{HostName: strings.Repeat("h", 64), Version: "v1.0.0", Resource: map[string]string{"k8s.node.name": "n1"}}
	e, err := newLogEncoder(newResource(&o), &commonpb.InstrumentationScope{Name: ScopeName, Version: o.Version})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// worstSignals is worstRecord with every kernel signal, DNS and tunnel
// field at its longest, a DNS name of name bytes and the drop reasons
// given.
func worstSignals(name int, reasons flow.DropReasons) flow.Record {
	r := worstRecord()
	const big = math.MaxInt64
	r.SetRTT(big, big, big)
	r.SetHandshakeRTT(big)
	r.SetRetransmits(big)
	r.SetDrops(big, big, reasons)
	r.SetDNS(&flow.DNSExchange{ID: math.MaxUint16, QName: strings.Repeat("a", name), HasRcode: true, Rcode: 4095, HasLatency: true, LatencyNs: big})
	r.SetTunnel(&tunnel.Info{Type: tunnel.Geneve, ID: math.MaxUint32, HasID: true,
		SrcAddr: netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"), DstAddr: netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffd"),
		SrcPort: math.MaxUint16, DstPort: math.MaxUint16})
	return r
}

// TestRecordBound: recordBound bounds what a record encodes to, with and
// without signals, whatever its DNS name and drop reasons; and requests
// of the records requestRecords takes stay under gRPC's default 4 MiB.
func TestRecordBound(t *testing.T) {
	e := testEncoder(t)
	empty := len(e.build(nil, t0))
	many := flow.DropReasons{}
	for i := range 200 {
		many[fmt.Sprintf("SUBSYSTEM_DROP_REASON_%03d", i)] = math.MaxInt64
	}
	for _, r := range []flow.Record{worstRecord(), worstSignals(0, nil), worstSignals(300, flow.DropReasons{"NETFILTER_DROP": 1}),
		worstSignals(1000, many), worstK8s(worstRecord()), worstK8s(worstSignals(300, many))} {
		got := len(e.build([]flow.Record{r}, t0)) - empty
		if got > recordBound(&r) {
			t.Errorf("a record with a %d-byte name and %d reasons encodes to %d bytes, over its bound %d",
				len(r.DNSQName), len(r.DropReasons), got, recordBound(&r))
		}
		t.Logf("record with a %d-byte name and %d reasons: %d bytes, bound %d", len(r.DNSQName), len(r.DropReasons), got, recordBound(&r))
	}
	batch := make([]flow.Record, MaxRequestRecordsLimit)
	for i := range batch {
		batch[i] = worstSignals(64*4, flow.DropReasons{"NETFILTER_DROP": 1, "NO_SOCKET": 2, "TCP_CSUM": 3})
	}
	n := requestRecords(batch, MaxRequestRecordsLimit)
	if size := len(e.build(batch[:n], t0)); n == 0 || n == len(batch) || size >= 4<<20 {
		t.Fatalf("a request of %d records with signals encodes to %d bytes; want fewer than all, under 4 MiB", n, size)
	}
	plain := make([]flow.Record, MaxRequestRecordsLimit+1)
	for i := range plain {
		plain[i] = worstRecord()
	}
	if n := requestRecords(plain, MaxRequestRecordsLimit); n != MaxRequestRecordsLimit {
		t.Errorf("records without signals: %d in a request, want MaxRequestRecordsLimit (%d) as before", n, MaxRequestRecordsLimit)
	}
	if n := requestRecords(batch[:1], MaxRequestRecordsLimit); n != 1 {
		t.Errorf("one record: %d in a request", n)
	}
}

// TestRequestsFitTheDefaultMessageLimit proves the bound behind
// MaxRequestRecordsLimit: a request of that many worst-case records, with
// a 64-byte host name, stays under gRPC's default 4 MiB receive limit.
func TestRequestsFitTheDefaultMessageLimit(t *testing.T) {
	e := testEncoder(t)
	one := len(e.build([]flow.Record{worstRecord()}, t0))
	empty := len(e.build(nil, t0))
	perRecord := one - empty
	if perRecord > maxRecordBytes {
		t.Fatalf("a worst-case record encodes to %d bytes, over maxRecordBytes %d", perRecord, maxRecordBytes)
	}
	batch := make([]flow.Record, MaxRequestRecordsLimit)
	for i := range batch {
		batch[i] = worstRecord()
	}
	size := len(e.build(batch, t0))
	if size >= 4<<20 {
		t.Fatalf("%d worst-case records encode to %d bytes, over gRPC's 4 MiB default", len(batch), size)
	}
	t.Logf("worst-case record %d bytes; %d of them %d bytes (%.2f MiB)", perRecord, len(batch), size, float64(size)/(1<<20))
}

// TestOversizedRequestIsRefusedNotRetried runs the collector's receiver
// with a 1 MiB message limit: a request over it is refused with
// ResourceExhausted and no RetryInfo, which retrying cannot fix, so its
// records are rejected; a smaller MaxRequestRecords gets them through.
func TestOversizedRequestIsRefusedNotRetried(t *testing.T) {
	col := startCollector(t, "", collectorConfig{grpc: func(g *configgrpc.ServerConfig) { g.MaxRecvMsgSizeMiB = 1 }})
	batch := make([]flow.Record, 4000)
	for i := range batch {
		batch[i] = worstRecord()
	}
	big := newTestClient(t, col.target(), Options{MaxRequestRecords: 4000, DisableMetrics: true})
	failed, err := big.Send(context.Background(), batch)
	if failed != nil || err != nil || big.Rejected() != 4000 {
		t.Fatalf("4000 records in one request over a 1 MiB limit: failed %d, err %v; want 4000 rejected", len(failed), err)
	}
	small := newTestClient(t, col.target(), Options{MaxRequestRecords: 500, DisableMetrics: true})
	if failed, err := small.Send(context.Background(), batch); failed != nil || err != nil {
		t.Fatalf("500 records a request: failed %d, err %v", len(failed), err)
	}
	if n := len(col.logRecords()); n != 4000 {
		t.Fatalf("collector received %d records, want the 4000 of the small requests", n)
	}
}

// TestBuildDoesNotAllocate guards the encoder's design: once the first
// request has grown the buffer, building a request of 1000 records
// allocates nothing.
func TestBuildDoesNotAllocate(t *testing.T) {
	e := testEncoder(t)
	batch := records(testCases())
	for len(batch) < 1000 {
		batch = append(batch, batch[:min(len(batch), 1000-len(batch))]...)
	}
	e.build(batch, t0)
	allocs := testing.AllocsPerRun(20, func() { e.build(batch, t0) })
	if allocs != 0 {
		t.Fatalf("build of %d records: %.1f allocations, want 0", len(batch), allocs)
	}
}

// TestEncodingIsCanonicalProtobuf decodes the hand-written encoding with
// protobuf-go and the generated OTLP types: it must parse with no unknown
// field, hold the resource, scope and record count it was given, and
// marshal back to the very same bytes, i.e. be what protobuf-go itself
// would have sent for those messages.
func TestEncodingIsCanonicalProtobuf(t *testing.T) {
	e := testEncoder(t)
	batches := map[string][]flow.Record{"empty": nil, "worst case": {worstRecord()}, "cases": records(testCases())}
	for _, tc := range testCases() {
		batches[tc.name] = []flow.Record{tc.rec}
	}
	long := worstRecord()
	long.Iface = strings.Repeat("x", 20000) // a length of 3 bytes: the slow path of patchLength
	batches["long interface name"] = []flow.Record{long, worstRecord()}
	zero := flow.Record{Key: flow.Key{EtherType: 0x0806}} // zero times: fields left out
	batches["zero record"] = []flow.Record{zero, zero}
	for name, batch := range batches {
		wire := append([]byte(nil), e.build(batch, t0)...)
		var req collogspb.ExportLogsServiceRequest
		if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(wire, &req); err != nil {
			t.Fatalf("%s: protobuf-go cannot parse the request: %v", name, err)
		}
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, wire) {
			t.Fatalf("%s: protobuf-go re-encodes the %d-byte request as %d different bytes", name, len(wire), len(again))
		}
		if len(req.ResourceLogs) != 1 || len(req.ResourceLogs[0].ScopeLogs) != 1 {
			t.Fatalf("%s: %d resource logs", name, len(req.ResourceLogs))
		}
		rl := req.ResourceLogs[0]
		o := Options{HostName: strings.Repeat("h", 64), Version: "v1.0.0", Resource: map[string]string{"k8s.node.name": "n1"}}
		if !proto.Equal(rl.Resource, newResource(&o)) {
			t.Fatalf("%s: resource %v", name, rl.Resource)
		}
		sl := rl.ScopeLogs[0]
		if sl.Scope.GetName() != "loupe" || sl.Scope.GetVersion() != "v1.0.0" || len(sl.LogRecords) != len(batch) {
			t.Fatalf("%s: scope %v with %d records, want loupe v1.0.0 with %d", name, sl.Scope, len(sl.LogRecords), len(batch))
		}
		for i, lr := range sl.LogRecords {
			if lr.EventName != EventName || lr.ObservedTimeUnixNano != uint64(t0.UnixNano()) || lr.TimeUnixNano != unixNano(batch[i].LastSeen) {
				t.Fatalf("%s: record %d: event %q observed %d time %d", name, i, lr.EventName, lr.ObservedTimeUnixNano, lr.TimeUnixNano)
			}
			if lr.Attributes[0].Key != AttrIfaceName && batch[i].Iface != "" {
				t.Fatalf("%s: record %d: first attribute %q", name, i, lr.Attributes[0].Key)
			}
		}
	}
}

func TestPatchLength(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 16383, 16384, 70000} {
		b := append([]byte{0xAA}, 0, 0) // a byte before, then the reserved length
		for i := range n {
			b = append(b, byte(i))
		}
		b = patchLength(b, 3)
		v, m := protowire.ConsumeBytes(b[1:])
		if m != len(b)-1 || len(v) != n || b[0] != 0xAA {
			t.Fatalf("n=%d: consumed %d of %d bytes, value of %d", n, m, len(b)-1, len(v))
		}
		for i := range v {
			if v[i] != byte(i) {
				t.Fatalf("n=%d: byte %d is %d after the move", n, i, v[i])
			}
		}
	}
}

// worstK8s is r with Kubernetes names of the longest a name can be (253
// bytes, a DNS subdomain), a workload of a kind the conventions do not
// name (the longest key).
func worstK8s(r flow.Record) flow.Record {
	long := strings.Repeat("n", 253)
	end := flow.K8sEnd{Kind: flow.K8sExternal, Namespace: long, Pod: long, Workload: long, WorkloadKind: long, Service: long, Node: long}
	r.K8s = &flow.K8s{Src: end, Dst: end, IfacePod: long, IfaceNamespace: long}
	return r
}
