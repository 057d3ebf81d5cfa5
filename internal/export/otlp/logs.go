package otlp

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"loupe/internal/flow"
)

// maxRecordBytes bounds the encoded size of one log record without kernel
// signals, DNS or tunnel, attributes included (a test measures the worst
// case against it); recordBound bounds one with them.
const maxRecordBytes = 1000

// maxSignalBytes bounds what the attributes of the kernel signals, DNS and
// tunnel add to a record, but for the DNS name's bytes and the drop
// reasons' (recordBound); a test measures the worst case against it.
const maxSignalBytes = 800

// reasonBytes bounds what one drop reason adds to the drop reasons
// attribute, beyond its name's bytes.
const reasonBytes = 20

// recordBound bounds the encoded size of r's log record.
func recordBound(r *flow.Record) int {
	n := maxRecordBytes
	if r.Has != 0 {
		n += maxSignalBytes + len(r.DNSQName)
		for name := range r.DropReasons {
			n += len(name) + reasonBytes
		}
	}
	if r.K8s != nil {
		n += k8sBound(r.K8s)
	}
	return n
}

// maxRequestBytes bounds the records of one logs request: as many records
// without signals as MaxRequestRecordsLimit allows, under gRPC's default 4
// MiB receive limit; records with signals, which can be larger, fill it
// with fewer (requestRecords).
const maxRequestBytes = MaxRequestRecordsLimit * maxRecordBytes

// requestRecords is how many of recs (at least one, at most max) the next
// logs request takes: as many as fit in maxRequestBytes by recordBound.
func requestRecords(recs []flow.Record, max int) int {
	n, size := 0, 0
	for n < len(recs) && n < max {
		b := recordBound(&recs[n])
		if n > 0 && size+b > maxRequestBytes {
			break
		}
		size += b
		n++
	}
	return n
}

// Field numbers of the OTLP messages the encoder writes
// (opentelemetry/proto/{collector/logs,logs,common}/v1/*.proto).
const (
	fRequestResourceLogs = 1 // ExportLogsServiceRequest.resource_logs
	fResourceLogsRes     = 1 // ResourceLogs.resource
	fResourceLogsScope   = 2 // ResourceLogs.scope_logs
	fScopeLogsScope      = 1 // ScopeLogs.scope
	fScopeLogsRecords    = 2 // ScopeLogs.log_records
	fLogTime             = 1 // LogRecord.time_unix_nano (fixed64)
	fLogAttributes       = 6 // LogRecord.attributes
	fLogObserved         = 11
	fLogEventName        = 12
	fKeyValueKey         = 1
	fKeyValueValue       = 2
	fAnyString           = 1 // AnyValue.string_value
	fAnyInt              = 3 // AnyValue.int_value
	fAnyDouble           = 4 // AnyValue.double_value (fixed64)
	fAnyKVList           = 6 // AnyValue.kvlist_value
	fKVListValues        = 1 // KeyValueList.values
)

// logEncoder writes ExportLogsServiceRequests in protobuf wire format
// straight from flow records, into one buffer reused between requests.
//
// It does not fill the generated message structs and marshal them: with
// 20 attributes a record is some 60 nested messages, and protobuf-go's
// table-driven marshalling took 3.9 to 5.9 µs a record on this machine
// even with every struct reused (BenchmarkEncode of that first version),
// a whole core at 200 000 records/s. Writing the same bytes directly
// takes 0.3 to 0.5 µs and allocates nothing. The output is canonical: a
// test decodes it with protobuf-go and checks that marshalling the result
// gives back the same bytes.
type logEncoder struct {
	buf      []byte
	headroom int // bytes reserved before the records for the envelope
	// envelope fields that never change, pre-encoded with their tags
	resource, scope, eventName []byte
	keys                       [nAttrs][]byte // KeyValue.key field of each attribute
	k8s                        k8sKeys        // the Kubernetes names' (k8s.go)
}

func newLogEncoder(res *resourcepb.Resource, scope *commonpb.InstrumentationScope) (*logEncoder, error) {
	e := &logEncoder{}
	var err error
	if e.resource, err = appendMessageField(nil, fResourceLogsRes, res); err != nil {
		return nil, err
	}
	if e.scope, err = appendMessageField(nil, fScopeLogsScope, scope); err != nil {
		return nil, err
	}
	e.eventName = protowire.AppendString(protowire.AppendTag(nil, fLogEventName, protowire.BytesType), EventName)
	for i := range nAttrs {
		e.keys[i] = protowire.AppendString(protowire.AppendTag(nil, fKeyValueKey, protowire.BytesType), attrKeys[i])
	}
	e.k8s = newK8sKeys()
	// Two tags and two lengths (at most 10 bytes each) around them.
	e.headroom = len(e.resource) + len(e.scope) + 2*(1+protowire.SizeVarint(1<<63))
	return e, nil
}

func appendMessageField(b []byte, num protowire.Number, m proto.Message) ([]byte, error) {
	enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("otlp: encode %T: %w", m, err)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, enc), nil
}

// build encodes batch, observed at now, as one request. The bytes are
// valid until the next build.
//
// The records are written first, after room for the envelope
// (request > ResourceLogs > resource, ScopeLogs > scope), whose lengths are
// only known once they are; the envelope is then written just before them.
func (e *logEncoder) build(batch []flow.Record, now time.Time) []byte {
	if cap(e.buf) < e.headroom {
		e.buf = make([]byte, 0, e.headroom+len(batch)*maxRecordBytes)
	}
	b := e.buf[:e.headroom]
	observed := unixNano(now)
	for i := range batch {
		b = e.appendRecord(b, &batch[i], observed)
	}
	records := len(b) - e.headroom

	scopeLogsLen := len(e.scope) + records
	resourceLogsLen := len(e.resource) + 1 + protowire.SizeVarint(uint64(scopeLogsLen)) + scopeLogsLen
	var h1buf, h2buf [16]byte
	h1 := protowire.AppendTag(h1buf[:0], fRequestResourceLogs, protowire.BytesType)
	h1 = protowire.AppendVarint(h1, uint64(resourceLogsLen))
	h2 := protowire.AppendTag(h2buf[:0], fResourceLogsScope, protowire.BytesType)
	h2 = protowire.AppendVarint(h2, uint64(scopeLogsLen))
	start := e.headroom - len(h1) - len(e.resource) - len(h2) - len(e.scope)
	w := start
	w += copy(b[w:], h1)
	w += copy(b[w:], e.resource)
	w += copy(b[w:], h2)
	copy(b[w:], e.scope)
	e.buf = b
	return b[start:]
}

// appendRecord appends one ScopeLogs.log_records field. The attributes it
// writes, and when, are the contract docs/exporters/otlp.md documents.
func (e *logEncoder) appendRecord(b []byte, r *flow.Record, observed uint64) []byte {
	b = protowire.AppendTag(b, fScopeLogsRecords, protowire.BytesType)
	// A record is over 127 bytes (its keys alone are) and, with interface
	// names of at most 15 bytes, under maxRecordBytes: its length takes
	// two bytes. Reserve them; patchLength handles the other cases.
	b = append(b, 0, 0)
	start := len(b)

	// Zero scalars are left out, as protobuf-go leaves them out.
	if ts := unixNano(r.LastSeen); ts != 0 {
		b = protowire.AppendTag(b, fLogTime, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, ts)
	}
	if r.Iface != "" {
		b = appendStr(b, e.keys[aIface], r.Iface)
	}
	b = appendStr(b, e.keys[aDirection], IODirection(r.Direction))
	ip := networkType(r.EtherType) != ""
	if ip {
		b = appendStr(b, e.keys[aNetType], networkType(r.EtherType))
		b = appendStr(b, e.keys[aTransport], Transport(r.Proto))
		var tmp [48]byte
		ports := r.PortKind()
		if a := r.SrcIP(); a.IsValid() {
			b = appendStr(b, e.keys[aSrcAddr], a.AppendTo(tmp[:0]))
		}
		if ports == flow.TransportPorts {
			b = e.appendInt(b, aSrcPort, int64(r.SrcPort))
		}
		if a := r.DstIP(); a.IsValid() {
			b = appendStr(b, e.keys[aDstAddr], a.AppendTo(tmp[:0]))
		}
		if ports == flow.TransportPorts {
			b = e.appendInt(b, aDstPort, int64(r.DstPort))
		}
		b = e.appendInt(b, aProto, int64(r.Proto))
		if ports == flow.ICMPTypeCode {
			b = e.appendInt(b, aICMPType, int64(r.SrcPort))
			b = e.appendInt(b, aICMPCode, int64(r.DstPort))
		}
	}
	b = e.appendInt(b, aPackets, int64(r.Packets))
	b = e.appendInt(b, aBytes, int64(r.Bytes))
	b = e.appendInt(b, aSegments, int64(r.Segments))
	b = e.appendInt(b, aWireBytes, int64(r.WireBytes))
	b = e.appendInt(b, aStart, int64(unixNano(r.FirstSeen)))
	if ip {
		if r.IsTCP() {
			b = e.appendInt(b, aTCPFlags, int64(r.TCPFlags))
		}
		b = e.appendInt(b, aDSCP, int64(r.DSCP))
	}
	b = e.appendInt(b, aSampling, int64(r.Sampling))
	b = e.appendInt(b, aIfIndex, int64(r.IfIndex))
	var mac [17]byte
	b = appendStr(b, e.keys[aSrcMAC], appendMAC(mac[:0], r.SrcMAC))
	b = appendStr(b, e.keys[aDstMAC], appendMAC(mac[:0], r.DstMAC))
	b = e.appendInt(b, aEthType, int64(r.EtherType))
	b = e.appendInt(b, aVlanID, int64(r.VlanID))
	if r.AggPrefix != 0 {
		b = e.appendInt(b, aAggPrefix, int64(r.AggPrefix))
	}
	// Always, as in JSON: a query for exact records needs no "absent".
	b = appendStr(b, e.keys[aAccuracy], r.Accuracy.String())
	if r.Estimated() {
		// int_value is signed: a bound past 2^63 - 1 bytes, more than
		// any link carries in an eviction interval, is sent as that.
		b = e.appendInt(b, aMaxErrPkts, int64(min(r.MaxErrorPackets, math.MaxInt64)))
		b = e.appendInt(b, aMaxErrByts, int64(min(r.MaxErrorBytes, math.MaxInt64)))
		b = e.appendDouble(b, aErrConf, r.ErrorConfidence)
	}
	if r.Has != 0 {
		b = e.appendSignals(b, r)
	}
	if r.K8s != nil {
		b = e.appendK8s(b, r.K8s)
	}
	if observed != 0 {
		b = protowire.AppendTag(b, fLogObserved, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, observed)
	}
	b = append(b, e.eventName...)
	return patchLength(b, start)
}

// appendSignals appends the attributes of the kernel signals, DNS and
// tunnel that r has (a measured 0 included). Integers above 2^63 - 1, which
// no measurement reaches, are sent as that (int_value is signed).
func (e *logEncoder) appendSignals(b []byte, r *flow.Record) []byte {
	h := r.Has
	u := func(b []byte, attr int, bit flow.Presence, v uint64) []byte {
		if !h.Any(bit) {
			return b
		}
		return e.appendInt(b, attr, int64(min(v, math.MaxInt64)))
	}
	b = u(b, aRTTMin, flow.HasRTTMin, r.RTTMinNs)
	b = u(b, aRTTMax, flow.HasRTTMax, r.RTTMaxNs)
	b = u(b, aRTTLast, flow.HasRTTLast, r.RTTLastNs)
	b = u(b, aHandshakeRTT, flow.HasHandshakeRTT, r.HandshakeRTTNs)
	b = u(b, aRetransmits, flow.HasRetransmits, r.Retransmits)
	b = u(b, aDropPackets, flow.HasDropPackets, r.DropPackets)
	b = u(b, aDropBytes, flow.HasDropBytes, r.DropBytes)
	if h.Any(flow.HasDropReasons) {
		b = e.appendReasons(b, r.DropReasons)
	}
	b = u(b, aDNSID, flow.HasDNSID, uint64(r.DNSID))
	if h.Any(flow.HasDNSQName) {
		b = appendStr(b, e.keys[aDNSQName], r.DNSQName)
	}
	if h.Any(flow.HasDNSRcode) {
		b = appendStr(b, e.keys[aDNSRcode], flow.RcodeName(r.DNSRcode))
	}
	b = u(b, aDNSLatency, flow.HasDNSLatency, r.DNSLatencyNs)
	if h.Any(flow.HasTunnelType) {
		b = appendStr(b, e.keys[aTunnelType], r.TunnelType.String())
	}
	b = u(b, aTunnelID, flow.HasTunnelID, uint64(r.TunnelID))
	var tmp [48]byte
	if h.Any(flow.HasOuterSrcAddr) && r.OuterSrcAddr.IsValid() {
		b = appendStr(b, e.keys[aOuterSrcAddr], r.OuterSrcAddr.AppendTo(tmp[:0]))
	}
	if h.Any(flow.HasOuterDstAddr) && r.OuterDstAddr.IsValid() {
		b = appendStr(b, e.keys[aOuterDstAddr], r.OuterDstAddr.AppendTo(tmp[:0]))
	}
	b = u(b, aOuterSrcPort, flow.HasOuterSrcPort, uint64(r.OuterSrcPort))
	return u(b, aOuterDstPort, flow.HasOuterDstPort, uint64(r.OuterDstPort))
}

// appendReasons appends the drop reasons as one attribute whose value is a
// map (kvlist_value): reason name -> packets, names sorted.
func (e *logEncoder) appendReasons(b []byte, reasons flow.DropReasons) []byte {
	var buf [16]string
	names := reasons.AppendNames(buf[:0])
	entry := func(name string, v uint64) int { // one KeyValue of the list
		any := 1 + protowire.SizeVarint(uint64(min(v, math.MaxInt64)))
		return 1 + protowire.SizeBytes(len(name)) + 1 + protowire.SizeBytes(any)
	}
	list := 0
	for _, n := range names {
		list += 1 + protowire.SizeBytes(entry(n, reasons[n]))
	}
	anyLen := 1 + protowire.SizeBytes(list)
	key := e.keys[aDropReasons]
	b = append(b, tagAttributes)
	b = appendVarint(b, uint64(len(key)+1+protowire.SizeBytes(anyLen)))
	b = append(b, key...)
	b = append(b, tagKeyValueValue)
	b = appendVarint(b, uint64(anyLen))
	b = append(b, tagAnyKVList)
	b = appendVarint(b, uint64(list))
	for _, n := range names {
		v := int64(min(reasons[n], math.MaxInt64))
		b = append(b, tagKVListValues)
		b = appendVarint(b, uint64(entry(n, reasons[n])))
		b = append(b, tagKeyValueKey)
		b = appendVarint(b, uint64(len(n)))
		b = append(b, n...)
		b = append(b, tagKeyValueValue)
		b = appendVarint(b, uint64(1+protowire.SizeVarint(uint64(v))))
		b = append(b, tagAnyInt)
		b = appendVarint(b, uint64(v))
	}
	return b
}

// patchLength writes the length of b[start:] into the two bytes reserved
// before start, moving the content if the length needs another size.
func patchLength(b []byte, start int) []byte {
	n := len(b) - start
	size := protowire.SizeVarint(uint64(n))
	if size != 2 {
		if size > 2 {
			b = append(b, make([]byte, size-2)...)
		}
		copy(b[start-2+size:], b[start:start+n])
		b = b[:start-2+size+n]
	}
	protowire.AppendVarint(b[start-2:start-2], uint64(n))
	return b
}

// appendStr appends a string attribute: LogRecord.attributes { key, value
// { string_value } }. The value is a string or the bytes of one.
func appendStr[S string | []byte](b []byte, key []byte, v S) []byte {
	anyLen := 1 + protowire.SizeVarint(uint64(len(v))) + len(v)
	kvLen := len(key) + 1 + protowire.SizeVarint(uint64(anyLen)) + anyLen
	b = append(b, tagAttributes)
	b = appendVarint(b, uint64(kvLen))
	b = append(b, key...)
	b = append(b, tagKeyValueValue)
	b = appendVarint(b, uint64(anyLen))
	b = append(b, tagAnyString)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendInt appends an integer attribute: { key, value { int_value } }.
func (e *logEncoder) appendInt(b []byte, attr int, v int64) []byte {
	key := e.keys[attr]
	anyLen := 1 + protowire.SizeVarint(uint64(v))
	kvLen := len(key) + 1 + protowire.SizeVarint(uint64(anyLen)) + anyLen
	b = append(b, tagAttributes)
	b = appendVarint(b, uint64(kvLen))
	b = append(b, key...)
	b = append(b, tagKeyValueValue)
	b = appendVarint(b, uint64(anyLen))
	b = append(b, tagAnyInt)
	return appendVarint(b, uint64(v))
}

// appendDouble appends a floating-point attribute: { key, value {
// double_value } }.
func (e *logEncoder) appendDouble(b []byte, attr int, v float64) []byte {
	key := e.keys[attr]
	const anyLen = 1 + 8
	kvLen := len(key) + 1 + 1 + anyLen
	b = append(b, tagAttributes)
	b = appendVarint(b, uint64(kvLen))
	b = append(b, key...)
	b = append(b, tagKeyValueValue, anyLen, tagAnyDouble)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

// One-byte tags of the attribute fields (field numbers under 16).
const (
	tagAttributes    = fLogAttributes<<3 | byte(protowire.BytesType)
	tagKeyValueValue = fKeyValueValue<<3 | byte(protowire.BytesType)
	tagAnyString     = fAnyString<<3 | byte(protowire.BytesType)
	tagAnyInt        = fAnyInt<<3 | byte(protowire.VarintType)
	tagAnyDouble     = fAnyDouble<<3 | byte(protowire.Fixed64Type)
	tagAnyKVList     = fAnyKVList<<3 | byte(protowire.BytesType)
	tagKVListValues  = fKVListValues<<3 | byte(protowire.BytesType)
	tagKeyValueKey   = fKeyValueKey<<3 | byte(protowire.BytesType)
)

// appendVarint is protowire.AppendVarint in a form the compiler inlines:
// the values here are mostly under 128, and the call was a third of the
// encoder's time.
func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// unixNano is t in Unix nanoseconds, 0 for the zero time (whose UnixNano
// is undefined), which OTLP reads as "unknown".
func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}
