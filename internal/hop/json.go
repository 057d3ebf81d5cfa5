package hop

import (
	"encoding/json"
	"strconv"
	"time"
)

// AppendJSON appends r as encoding/json writes it (the same bytes, the
// JSON names of Request, Hop and Point): the latency log encodes every
// record it stores, tens of thousands a second under load, and
// encoding/json's reflection cost more than matching the record did.
// TestAppendJSONMatchesMarshal holds the two together: a field added to
// the types must be added here.
func (r *Request) AppendJSON(b []byte) []byte {
	b = append(b, `{"trace_id":`...)
	b = appendJSONString(b, r.TraceID)
	b = append(b, `,"span_id":`...)
	b = appendJSONString(b, r.SpanID)
	if r.TraceSource != "" {
		b = append(b, `,"trace_source":`...)
		b = appendJSONString(b, r.TraceSource)
	}
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, r.Kind)
	b = append(b, `,"src_addr":"`...)
	b = r.SrcAddr.AppendTo(b) // digits, dots, colons: nothing to escape
	b = append(b, `","dst_addr":"`...)
	b = r.DstAddr.AppendTo(b)
	b = append(b, `","src_port":`...)
	b = strconv.AppendUint(b, uint64(r.SrcPort), 10)
	b = append(b, `,"dst_port":`...)
	b = strconv.AppendUint(b, uint64(r.DstPort), 10)
	b = append(b, `,"proto":`...)
	b = strconv.AppendUint(b, uint64(r.Proto), 10)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, uint64(r.Seq), 10)
	b = append(b, `,"time":`...)
	b = appendJSONTime(b, r.Time)
	if r.Node != "" {
		b = append(b, `,"node":`...)
		b = appendJSONString(b, r.Node)
	}
	b = append(b, `,"hops":`...)
	if r.Hops == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Hops {
			if i > 0 {
				b = append(b, ',')
			}
			b = r.Hops[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	if len(r.Path) > 0 {
		b = append(b, `,"path":[`...)
		for i := range r.Path {
			if i > 0 {
				b = append(b, ',')
			}
			b = r.Path[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	if r.BootID != "" {
		b = append(b, `,"boot_id":`...)
		b = appendJSONString(b, r.BootID)
	}
	if r.ClockOffsetNs != 0 {
		b = append(b, `,"clock_offset_ns":`...)
		b = strconv.AppendInt(b, r.ClockOffsetNs, 10)
	}
	if r.ClockSync {
		b = append(b, `,"clock_sync":true`...)
	}
	return append(b, '}')
}

func (h *Hop) appendJSON(b []byte) []byte {
	b = append(b, `{"from_iface":`...)
	b = appendJSONString(b, h.FromIface)
	b = append(b, `,"to_iface":`...)
	b = appendJSONString(b, h.ToIface)
	b = append(b, `,"direction":`...)
	b = appendJSONString(b, h.Direction)
	b = append(b, `,"latency_ns":`...)
	b = strconv.AppendInt(b, h.LatencyNs, 10)
	for _, f := range [...]struct{ name, v string }{
		{`,"from_node":`, h.FromNode}, {`,"to_node":`, h.ToNode}, {`,"from_pod":`, h.FromPod}, {`,"to_pod":`, h.ToPod},
	} {
		if f.v != "" {
			b = append(b, f.name...)
			b = appendJSONString(b, f.v)
		}
	}
	return append(b, '}')
}

func (p *Point) appendJSON(b []byte) []byte {
	b = append(b, `{"iface":`...)
	b = appendJSONString(b, p.Iface)
	b = append(b, `,"ifindex":`...)
	b = strconv.AppendUint(b, uint64(p.IfIndex), 10)
	if p.Kind != "" {
		b = append(b, `,"kind":`...)
		b = appendJSONString(b, p.Kind)
	}
	if p.Pod != "" {
		b = append(b, `,"pod":`...)
		b = appendJSONString(b, p.Pod)
	}
	b = append(b, `,"hook":`...)
	b = appendJSONString(b, p.Hook)
	b = append(b, `,"time_ns":`...)
	b = strconv.AppendUint(b, p.TimeNs, 10)
	if p.Tunneled {
		b = append(b, `,"tunneled":true`...)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, uint64(p.Seq), 10)
	b = append(b, `,"len":`...)
	b = strconv.AppendUint(b, uint64(p.Len), 10)
	return append(b, '}')
}

// appendJSONString appends s quoted. Interface, pod and node names are
// plain ASCII and go as they are; anything encoding/json would escape
// (quotes, control bytes, <, >, &, non-ASCII) goes through it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONTime appends t as time.Time's MarshalJSON does; a time it
// refuses (a year past 9999) has no record worth keeping, and goes as
// RFC 3339 all the same.
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
