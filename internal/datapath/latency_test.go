package datapath

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"loupe/internal/flow"
	"loupe/internal/hop"
)

// The latency capability through BPF_PROG_TEST_RUN: request stamps, the
// trace context in crafted header blocks (split into segments as a sender
// would), options, tunnels, bad input and its counters. BPF_PROG_TEST_RUN
// puts the whole frame in the skb's linear area (it cannot make a
// non-linear skb), so the scan's skb loads are exercised on linear data
// here and on real GSO/GRO buffers in the end-to-end test.

const (
	testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	testSpanID  = "00f067aa0ba902b7"
	testTP      = "00-" + testTraceID + "-" + testSpanID + "-01"
)

// latencySink collects what the reader hands it.
type latencySink struct {
	stamps   []hop.Stamp
	contexts []hop.Context
}

func (s *latencySink) Stamp(x hop.Stamp)     { s.stamps = append(s.stamps, x) }
func (s *latencySink) Context(x hop.Context) { s.contexts = append(s.contexts, x) }

type latencyRig struct {
	t  *testing.T
	dp *Datapath
	r  *LatencyReader
}

// everyRequest is the default sizes with every request stamped, with a
// context or without (the untraced sampling at 1 in 1).
func everyRequest() LatencySizes {
	s := DefaultLatencySizes()
	s.UntracedSampling = 1
	return s
}

func newLatencyRig(t *testing.T, sizes LatencySizes) *latencyRig {
	t.Helper()
	dp := loadForTest(t, Options{FlowBudget: 1024, RingBufSize: 1 << 16,
		Capabilities: []string{"flows", "latency", "dns", "handshake", "capture", "rules"}, Latency: sizes})
	r, err := dp.OpenLatency()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &latencyRig{t: t, dp: dp, r: r}
}

// read drains the ring.
func (g *latencyRig) read() *latencySink {
	g.t.Helper()
	var s latencySink
	if _, _, bad, err := g.r.Read(&s, 0); err != nil || bad != 0 {
		g.t.Fatalf("read latency ring: %v (%d bad records)", err, bad)
	}
	return &s
}

// readRecords drains the ring record by record: the records' types, and
// what they decode to.
func (g *latencyRig) readRecords() ([]int, *latencySink) {
	g.t.Helper()
	var (
		kinds []int
		s     latencySink
	)
	g.r.r.SetDeadline(time.Unix(1, 0))
	for {
		if err := g.r.r.ReadInto(&g.r.rec); err != nil {
			if errors.Is(err, errLatencyTimeout) {
				return kinds, &s
			}
			g.t.Fatal(err)
		}
		st, cx, kind, err := DecodeLatencyRecord(g.r.rec.RawSample)
		if err != nil {
			g.t.Fatal(err)
		}
		kinds = append(kinds, kind)
		if kind != latencyRecContext {
			s.Stamp(st)
		}
		if kind != latencyRecStamp {
			s.Context(cx)
		}
	}
}

func (g *latencyRig) counters() map[string]uint64 {
	g.t.Helper()
	cs, err := g.dp.LatencyCounters()
	if err != nil {
		g.t.Fatal(err)
	}
	m := map[string]uint64{}
	for _, c := range cs {
		if c.Value != 0 {
			m[c.Name] = c.Value
		}
	}
	return m
}

// scans is the number of scans in the table.
func (g *latencyRig) scans() int {
	g.t.Helper()
	n, err := g.dp.LatencyScans()
	if err != nil {
		g.t.Fatal(err)
	}
	return n
}

// checkCounters compares the non-zero counters with want, exactly.
func (g *latencyRig) checkCounters(want map[string]uint64) {
	g.t.Helper()
	got := g.counters()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		g.t.Errorf("counters %v, want %v", got, want)
	}
}

// httpConn sends TCP segments from a client port to server port 80.
type httpConn struct {
	client, server netip.AddrPort
	tcpOpts        []layers.TCPOption
	ipOpts         []layers.IPv4Option
	smac, dmac     []byte
}

func newHTTPConn(client string, port uint16) *httpConn {
	server := "192.0.2.80"
	if strings.Contains(client, ":") {
		server = "2001:db8::80"
	}
	return &httpConn{client: netip.AddrPortFrom(netip.MustParseAddr(client), port),
		server: netip.AddrPortFrom(netip.MustParseAddr(server), 80), smac: macA, dmac: macB}
}

// layers of a segment from the client, with payload.
func (c *httpConn) layers(seq uint32, payload []byte) []gopacket.SerializableLayer {
	tcp := &layers.TCP{SrcPort: layers.TCPPort(c.client.Port()), DstPort: layers.TCPPort(c.server.Port()),
		Seq: seq, Ack: 1, ACK: true, PSH: true, Window: 512, Options: c.tcpOpts}
	if c.client.Addr().Is4() {
		return []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: c.smac, DstMAC: c.dmac, EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, Options: c.ipOpts,
				SrcIP: c.client.Addr().AsSlice(), DstIP: c.server.Addr().AsSlice()},
			tcp, gopacket.Payload(payload)}
	}
	return []gopacket.SerializableLayer{
		&layers.Ethernet{SrcMAC: c.smac, DstMAC: c.dmac, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP,
			SrcIP: c.client.Addr().AsSlice(), DstIP: c.server.Addr().AsSlice()},
		tcp, gopacket.Payload(payload)}
}

func (c *httpConn) seg(t testing.TB, seq uint32, payload []byte) []byte {
	t.Helper()
	return frame(t, c.layers(seq, payload)...)
}

// tracedRequest is an HTTP request whose header block holds header (a whole
// line, without its CRLF) after pad bytes of other headers.
func tracedRequest(pad int, header string) []byte {
	var b bytes.Buffer
	b.WriteString("GET /api/items?id=7 HTTP/1.1\r\nHost: shop.example\r\n")
	for i := 0; b.Len() < pad; i++ {
		line := fmt.Sprintf("X-Filler-%03d: %s\r\n", i, strings.Repeat("v", 60))
		if rest := pad - b.Len(); rest < len(line) {
			// The last filler line takes exactly what is left (at
			// least a name and a colon).
			line = "F:" + strings.Repeat("w", max(rest-4, 0)) + "\r\n"
		}
		b.WriteString(line)
	}
	if header != "" {
		b.WriteString(header + "\r\n")
	}
	b.WriteString("Accept: */*\r\n\r\n")
	return b.Bytes()
}

// send sends payload as segments of at most mss bytes from seq, through
// the egress program, and returns their number.
func (g *latencyRig) send(c *httpConn, seq uint32, payload []byte, mss int) int {
	g.t.Helper()
	n := 0
	for off := 0; off < len(payload); off += mss {
		end := min(off+mss, len(payload))
		runProg(g.t, g.dp, flow.Egress, c.seg(g.t, seq+uint32(off), payload[off:end]))
		n++
	}
	return n
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// checkContext checks the one context of s: the ids, the source and the
// request's first sequence number.
func checkContext(t *testing.T, s *latencySink, src hop.Source, trace, span string, seq uint32) {
	t.Helper()
	if len(s.contexts) != 1 {
		t.Fatalf("%d contexts, want 1: %+v", len(s.contexts), s.contexts)
	}
	c := s.contexts[0]
	var wt [16]byte
	var ws [8]byte
	copy(wt[16-len(trace)/2:], mustHex(trace))
	copy(ws[8-len(span)/2:], mustHex(span))
	if c.Source != src || c.TraceID != wt || c.SpanID != ws || c.Seq != seq {
		t.Errorf("context %+v, want source %d trace %x span %x seq %d", c, src, wt, ws, seq)
	}
}

func TestLatencyTraceparentPositions(t *testing.T) {
	for _, pos := range []int{100, 2048, 7900} {
		t.Run(fmt.Sprint(pos), func(t *testing.T) {
			g := newLatencyRig(t, everyRequest())
			c := newHTTPConn("10.1.2.3", 40000)
			req := tracedRequest(pos, "traceparent: "+testTP)
			if i := bytes.Index(req, []byte("traceparent")); i < pos || i > pos+2 {
				t.Fatalf("traceparent at %d", i)
			}
			const seq = 1000
			segs := g.send(c, seq, req, 1448)
			kinds, s := g.readRecords()
			checkContext(t, s, hop.SourceTraceparent, testTraceID, testSpanID, seq)
			// The context goes in the stamp's record, with its time,
			// in whichever segment it was found.
			if fmt.Sprint(kinds) != fmt.Sprint([]int{latencyRecBoth}) || s.contexts[0].TimeNs != s.stamps[0].TimeNs {
				t.Errorf("records %v, times %d and %d: want one record of both", kinds, s.stamps[0].TimeNs, s.contexts[0].TimeNs)
			}
			if len(s.stamps) != 1 || s.stamps[0].Kind != hop.KindRequest || s.stamps[0].Seq != seq ||
				s.stamps[0].Len != uint32(min(1448, len(req))) || s.stamps[0].Tunneled {
				t.Errorf("stamps %+v, want one request stamp at %d of %d bytes", s.stamps, seq, min(1448, len(req)))
			}
			st := s.stamps[0]
			if st.Key.SrcPort != 40000 || st.Key.DstPort != 80 || st.Key.Direction != flow.Egress || st.Key.Proto != 6 {
				t.Errorf("stamp key %+v", st.Key)
			}
			g.checkCounters(map[string]uint64{"requests": 1, "found_traceparent": 1})
			t.Logf("%d bytes in %d segments", len(req), segs)
		})
	}
}

// TestLatencyScanReused: a request's first segment crossing a second hook
// on the same CPU is judged as at the first, not scanned again, and
// reported alike; another request, or the same bytes at another sequence
// number, is scanned.
func TestLatencyScanReused(t *testing.T) {
	onOneCPU(t)
	g := newLatencyRig(t, everyRequest())
	c := newHTTPConn("10.1.2.3", 40000)
	req := tracedRequest(100, "traceparent: "+testTP)
	seg := c.seg(t, 1000, req)
	runProg(t, g.dp, flow.Egress, seg)  // the pod's veth
	runProg(t, g.dp, flow.Ingress, seg) // another hook of the node
	runProg(t, g.dp, flow.Egress, c.seg(t, 1000+uint32(len(req)), req))
	untraced := tracedRequest(100, "")
	runProg(t, g.dp, flow.Egress, c.seg(t, 9000, untraced))
	runProg(t, g.dp, flow.Ingress, c.seg(t, 9000, untraced))
	kinds, s := g.readRecords()
	want := []int{latencyRecBoth, latencyRecBoth, latencyRecBoth, latencyRecStamp, latencyRecStamp}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("records %v, want %v", kinds, want)
	}
	for i, cx := range s.contexts {
		if cx.TraceID != [16]byte(mustHex(testTraceID)) || cx.SpanID != [8]byte(mustHex(testSpanID)) ||
			cx.Source != hop.SourceTraceparent || cx.Seq != s.stamps[i].Seq {
			t.Errorf("context %d: %+v", i, cx)
		}
	}
	g.checkCounters(map[string]uint64{"requests": 5, "found_traceparent": 3, "not_found": 2, "scan_reused": 2})
}

// TestLatencyHeaderForms: names in any case, whitespace, B3 in both
// forms, and the values that are not ids.
func TestLatencyHeaderForms(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []string
		src     hop.Source
		trace   string
		span    string
		counter string
	}{
		{"mixed case", []string{"TraceParent:\t " + testTP + "  "}, hop.SourceTraceparent, testTraceID, testSpanID, "found_traceparent"},
		{"b3 single", []string{"b3: " + testTraceID + "-" + testSpanID + "-1-" + "05e3ac9a4f6e3b90"}, hop.SourceB3Single, testTraceID, testSpanID, "found_b3_single"},
		{"b3 single 64-bit", []string{"B3: a3ce929d0e0e4736-" + testSpanID}, hop.SourceB3Single, "a3ce929d0e0e4736", testSpanID, "found_b3_single"},
		{"b3 multi", []string{"X-B3-SpanId: " + testSpanID, "Other: 1", "X-B3-TraceId: " + testTraceID}, hop.SourceB3, testTraceID, testSpanID, "found_b3"},
		{"b3 trace alone", []string{"x-b3-traceid: " + testTraceID}, hop.SourceB3, testTraceID, "", "found_b3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newLatencyRig(t, everyRequest())
			g.send(newHTTPConn("10.1.2.3", 40001), 5, tracedRequest(300, strings.Join(tc.headers, "\r\n")), 1448)
			span := tc.span
			if span == "" {
				span = "00"
			}
			checkContext(t, g.read(), tc.src, tc.trace, span, 5)
			g.checkCounters(map[string]uint64{"requests": 1, tc.counter: 1})
		})
	}
}

func TestLatencyMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, header string
		malformed    uint64
	}{
		{"short trace id", "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", 1},
		{"upper case", "traceparent: 00-" + strings.ToUpper(testTraceID) + "-" + testSpanID + "-01", 1},
		{"zero trace id", "traceparent: 00-" + strings.Repeat("0", 32) + "-" + testSpanID + "-01", 1},
		{"version ff", "traceparent: ff-" + testTraceID + "-" + testSpanID + "-01", 1},
		{"trailing junk", "traceparent: " + testTP + "-extra", 1},
		{"oversized", "traceparent: " + strings.Repeat("0", 300), 1},
		{"b3 bad digit", "b3: " + testTraceID + "-00f067aa0ba902bz", 1},
		{"b3 sampling only", "b3: 1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newLatencyRig(t, everyRequest())
			g.send(newHTTPConn("10.1.2.3", 40002), 5, tracedRequest(200, tc.header), 1448)
			if s := g.read(); len(s.contexts) != 0 {
				t.Errorf("contexts %+v, want none", s.contexts)
			}
			want := map[string]uint64{"requests": 1, "not_found": 1}
			if tc.malformed > 0 {
				want["malformed"] = tc.malformed
			}
			g.checkCounters(want)
		})
	}
}

// TestLatencySplitHeader splits the request at every byte of the
// traceparent line and around it: the line is judged whole in the
// second segment.
func TestLatencySplitHeader(t *testing.T) {
	g := newLatencyRig(t, everyRequest())
	req := tracedRequest(500, "traceparent: "+testTP)
	at := bytes.Index(req, []byte("traceparent"))
	line := len("traceparent: "+testTP) + 2
	n := 0
	for split := at - 2; split <= at+line+1; split++ {
		c := newHTTPConn("10.1.2.3", uint16(41000+n))
		seq := uint32(7000 + n)
		runProg(t, g.dp, flow.Egress, c.seg(t, seq, req[:split]))
		runProg(t, g.dp, flow.Egress, c.seg(t, seq+uint32(split), req[split:]))
		s := g.read()
		if len(s.contexts) != 1 || s.contexts[0].Seq != seq || s.contexts[0].SpanID != [8]byte(mustHex(testSpanID)) {
			t.Errorf("split at %d of the line: contexts %+v", split-at, s.contexts)
		}
		n++
	}
	g.checkCounters(map[string]uint64{"requests": uint64(n), "found_traceparent": uint64(n)})
}

// TestLatencyBlockEnd: the block's end cut between two segments, a short
// segment that only continues a line, and the end found in the next.
func TestLatencyBlockEnd(t *testing.T) {
	g := newLatencyRig(t, everyRequest())
	c := newHTTPConn("10.1.2.3", 40003)
	req := tracedRequest(100, "")
	parts := [][]byte{req[:len(req)-3], req[len(req)-3 : len(req)-1], req[len(req)-1:]} // "...\r\n\r" | "\n\r" | "\n"
	seq := uint32(100)
	for i, p := range parts {
		runProg(t, g.dp, flow.Egress, c.seg(t, seq, p))
		seq += uint32(len(p))
		if want := map[string]uint64{"requests": 1}; i < 2 {
			g.checkCounters(want)
		}
	}
	g.checkCounters(map[string]uint64{"requests": 1, "not_found": 1})
	// A header line cut in the middle of its name, continued by a segment
	// of two bytes, then the rest.
	c = newHTTPConn("10.1.2.3", 40004)
	req = tracedRequest(100, "traceparent: "+testTP)
	at := bytes.Index(req, []byte("traceparent")) + 5
	g.send(c, 1, req[:at], 1448)
	runProg(t, g.dp, flow.Egress, c.seg(t, 1+uint32(at), req[at:at+2]))
	runProg(t, g.dp, flow.Egress, c.seg(t, 1+uint32(at+2), req[at+2:]))
	checkContext(t, g.read(), hop.SourceTraceparent, testTraceID, testSpanID, 1)
}

func TestLatencyNotHTTP(t *testing.T) {
	g := newLatencyRig(t, everyRequest())
	c := newHTTPConn("10.1.2.3", 40005)
	// Binary data and text that is no request, to port 80.
	runProg(t, g.dp, flow.Egress, c.seg(t, 1, []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0, 0, 0x47, 0x45, 0x54, 0x20}))
	runProg(t, g.dp, flow.Egress, c.seg(t, 20, []byte("GETX / HTTP/1.1\r\n\r\n")))
	runProg(t, g.dp, flow.Egress, c.seg(t, 40, []byte("get / HTTP/1.1\r\n\r\n")))
	// A request whose next segment, awaited by the scan, is binary.
	req := tracedRequest(100, "")
	cut := len(req) - 10
	runProg(t, g.dp, flow.Egress, c.seg(t, 100, req[:cut]))
	runProg(t, g.dp, flow.Egress, c.seg(t, 100+uint32(cut), []byte{0x80, 0, 1, 2, 3, 4, 5, 6, 7, 8}))
	s := g.read()
	if len(s.stamps) != 1 || s.stamps[0].Seq != 100 || len(s.contexts) != 0 {
		t.Errorf("stamps %+v contexts %+v, want the one request's stamp", s.stamps, s.contexts)
	}
	g.checkCounters(map[string]uint64{"requests": 1, "not_http": 1})
}

func TestLatencyLimitAndOrder(t *testing.T) {
	g := newLatencyRig(t, LatencySizes{UntracedSampling: 1, ScanLimit: 1024, Scans: 64, RingSize: 1 << 16})
	g.send(newHTTPConn("10.1.2.3", 40006), 1, tracedRequest(2000, "traceparent: "+testTP), 1448)
	// A gap: the second segment skips 100 bytes.
	c := newHTTPConn("10.1.2.3", 40007)
	req := tracedRequest(800, "traceparent: "+testTP)
	runProg(t, g.dp, flow.Egress, c.seg(t, 1, req[:500]))
	runProg(t, g.dp, flow.Egress, c.seg(t, 1+600, req[600:]))
	// A retransmission of what was scanned changes nothing; the next
	// segment continues.
	c = newHTTPConn("10.1.2.3", 40008)
	runProg(t, g.dp, flow.Egress, c.seg(t, 1, req[:500]))
	runProg(t, g.dp, flow.Egress, c.seg(t, 1+200, req[200:500]))
	runProg(t, g.dp, flow.Egress, c.seg(t, 1+500, req[500:]))
	s := g.read()
	if len(s.contexts) != 1 || s.contexts[0].Key.SrcPort != 40008 {
		t.Errorf("contexts %+v, want the third request's", s.contexts)
	}
	g.checkCounters(map[string]uint64{"requests": 3, "scan_limit": 1, "scan_out_of_order": 1, "found_traceparent": 1})
}

// TestLatencyFirstSegmentResent: a request's first segment sent again
// after the rest passed the hook starts a scan that awaits bytes gone by;
// the connection's next request gives it up and counts it, and is scanned
// itself. The first segment sent again while its own scan still awaits the
// next one is the same request: not counted, found once.
func TestLatencyFirstSegmentResent(t *testing.T) {
	g := newLatencyRig(t, LatencySizes{UntracedSampling: 1, ScanLimit: 16 << 10, Scans: 64, RingSize: 1 << 16})
	req := tracedRequest(800, "traceparent: "+testTP)
	n := uint32(len(req))
	c := newHTTPConn("10.1.2.3", 40020)
	runProg(t, g.dp, flow.Egress, c.seg(t, 1, req[:500]))
	runProg(t, g.dp, flow.Egress, c.seg(t, 1+500, req[500:]))
	runProg(t, g.dp, flow.Egress, c.seg(t, 1, req[:500])) // sent again: its scan awaits 501
	if got := g.scans(); got != 1 {
		t.Fatalf("%d scans in the table after the resent first segment, want 1", got)
	}
	runProg(t, g.dp, flow.Egress, c.seg(t, 1+n, req)) // the next request, whole
	if got := g.scans(); got != 0 {
		t.Errorf("%d scans in the table after the next request, want 0", got)
	}
	// Sent again before its rest: the same scan, started again.
	c = newHTTPConn("10.1.2.3", 40021)
	runProg(t, g.dp, flow.Egress, c.seg(t, 1, req[:500]))
	runProg(t, g.dp, flow.Egress, c.seg(t, 1, req[:500]))
	runProg(t, g.dp, flow.Egress, c.seg(t, 1+500, req[500:]))
	s := g.read()
	var ports []uint16
	for _, x := range s.contexts {
		ports = append(ports, x.Key.SrcPort)
	}
	if fmt.Sprint(ports) != "[40020 40020 40021]" || s.contexts[1].Seq != 1+n {
		t.Errorf("contexts %+v, want 40020's two requests and 40021's", s.contexts)
	}
	g.checkCounters(map[string]uint64{"requests": 5, "found_traceparent": 3, "scan_abandoned": 1})
}

// TestLatencyFlood starts more scans than the table holds; each is then
// continued: every one is either found or counted as forgotten.
func TestLatencyFlood(t *testing.T) {
	const scans, conns = 32, 300
	g := newLatencyRig(t, LatencySizes{UntracedSampling: 1, Scans: scans, ScanLimit: 16 << 10, RingSize: 1 << 20})
	req := tracedRequest(600, "traceparent: "+testTP)
	cut := 400
	for i := range conns {
		c := newHTTPConn("10.1.2.3", uint16(20000+i))
		runProg(t, g.dp, flow.Egress, c.seg(t, 1, req[:cut]))
	}
	for i := range conns {
		c := newHTTPConn("10.1.2.3", uint16(20000+i))
		runProg(t, g.dp, flow.Egress, c.seg(t, 1+uint32(cut), req[cut:]))
	}
	s := g.read()
	m := g.counters()
	if m["requests"] != conns || m["found_traceparent"]+m["scan_evicted"] != conns || m["scan_evicted"] < conns-2*scans {
		t.Errorf("counters %v: want %d requests, each found or evicted, at least %d evicted", m, conns, conns-2*scans)
	}
	if uint64(len(s.contexts)) != m["found_traceparent"] {
		t.Errorf("%d contexts, %d found", len(s.contexts), m["found_traceparent"])
	}
	n, err := g.dp.LatencyScans()
	if err != nil || n > scans {
		t.Errorf("%d scans in the table (%v), at most %d", n, err, scans)
	}
}

func TestLatencyOptions(t *testing.T) {
	g := newLatencyRig(t, everyRequest())
	c := newHTTPConn("10.1.2.3", 40009)
	opt := append(mustHex(testTraceID), mustHex(testSpanID)...)
	c.tcpOpts = []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
		{OptionType: 25, OptionLength: 26, OptionData: opt}}
	g.send(c, 9, tracedRequest(100, ""), 1448)
	checkContext(t, g.read(), hop.SourceTCPOption, testTraceID, testSpanID, 9)

	c = newHTTPConn("10.1.2.3", 40010)
	c.ipOpts = []layers.IPv4Option{{OptionType: 1}, {OptionType: 136, OptionLength: 10, OptionData: mustHex("0102030405060708")}}
	g.send(c, 11, tracedRequest(100, ""), 1448)
	checkContext(t, g.read(), hop.SourceIPOption, "0102030405060708", "00", 11)
	g.checkCounters(map[string]uint64{"requests": 2, "found_tcp_option": 1, "found_ip_option": 1, "not_found": 2})
}

func TestLatencyIPv6(t *testing.T) {
	g := newLatencyRig(t, everyRequest())
	c := newHTTPConn("2001:db8::1", 40011)
	g.send(c, 77, tracedRequest(2500, "traceparent: "+testTP), 1428)
	s := g.read()
	checkContext(t, s, hop.SourceTraceparent, testTraceID, testSpanID, 77)
	if s.contexts[0].Key.EtherType != 0x86dd || s.contexts[0].Key.SrcAddr != c.client.Addr().As16() {
		t.Errorf("context key %+v", s.contexts[0].Key)
	}
}

// TestLatencyTunnels: the request inside VXLAN and Geneve, keyed by the
// inner packet and marked tunnelled, the same context and stamps as the
// bare segments at another hook.
func TestLatencyTunnels(t *testing.T) {
	req := tracedRequest(1000, "traceparent: "+testTP)
	for _, tc := range []struct {
		name  string
		wrap  func(inner []byte) []byte
		inner bool
	}{
		{"vxlan", func(in []byte) []byte { return udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x08, 42), in) }, true},
		{"vxlan-linux-v6", func(in []byte) []byte { return udpTunnel(t, true, 50000, portVXLANLinux, vxlanHeader(0x08, 42), in) }, true},
		{"geneve", func(in []byte) []byte {
			return udpTunnel(t, false, 50000, portGeneve, geneveHeader(0, etherTypeTEB, 7, nil), in)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newLatencyRig(t, everyRequest())
			c := newHTTPConn("10.1.2.3", 40012)
			for off := 0; off < len(req); off += 1400 {
				end := min(off+1400, len(req))
				runProg(t, g.dp, flow.Egress, tc.wrap(c.seg(t, 3+uint32(off), req[off:end])))
			}
			s := g.read()
			checkContext(t, s, hop.SourceTraceparent, testTraceID, testSpanID, 3)
			if !s.contexts[0].Tunneled || len(s.stamps) != 1 || !s.stamps[0].Tunneled || s.stamps[0].Seq != 3 ||
				s.stamps[0].Len != uint32(min(1400, len(req))) {
				t.Errorf("context %+v stamps %+v: want tunnelled, one request stamp of the first segment at 3", s.contexts[0], s.stamps)
			}
			k := s.stamps[0].Key
			if k.SrcPort != 40012 || k.DstPort != 80 || k.SrcAddr != c.client.Addr().As16() {
				t.Errorf("stamp key %+v: want the inner packet's", k)
			}
		})
	}
}

// TestLatencySampling: 1 in 4 segments, decided alike at two hooks (the
// segments cross them with other MACs, the other direction's program,
// and one of them inside VXLAN).
func TestLatencySampling(t *testing.T) {
	g := newLatencyRig(t, LatencySizes{UntracedSampling: 1, Sampling: 4, ScanLimit: 16 << 10, Scans: 64, RingSize: 1 << 20})
	c := newHTTPConn("10.1.2.3", 40013)
	other := newHTTPConn("10.1.2.3", 40013)
	other.smac, other.dmac = macOuterA, macOuterB
	const segs = 400
	payload := bytes.Repeat([]byte("body"), 250)
	for i := range segs {
		seq := uint32(i * len(payload))
		runProg(t, g.dp, flow.Egress, c.seg(t, seq, payload))
		runProg(t, g.dp, flow.Ingress, other.seg(t, seq, payload))
		runProg(t, g.dp, flow.Egress, udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x08, 42), other.seg(t, seq, payload)))
	}
	s := g.read()
	byHook := map[string][]uint32{}
	for _, st := range s.stamps {
		if st.Kind != hop.KindSampled || st.Len != uint32(len(payload)) {
			t.Fatalf("stamp %+v", st)
		}
		h := fmt.Sprint(st.Key.Direction, st.Tunneled)
		byHook[h] = append(byHook[h], st.Seq)
	}
	if len(byHook) != 3 {
		t.Fatalf("stamps of %d hooks, want 3", len(byHook))
	}
	var first []uint32
	for h, seqs := range byHook {
		if first == nil {
			first = seqs
		}
		if fmt.Sprint(seqs) != fmt.Sprint(first) {
			t.Errorf("hook %s kept %v, another %v", h, seqs, first)
		}
	}
	if n := len(first); n < segs/8 || n > segs/2 {
		t.Errorf("%d of %d segments sampled at 1 in 4", n, segs)
	}
	g.checkCounters(map[string]uint64{"sampled": uint64(3 * len(first))})
}

// TestLatencyUntracedSampling: a request with a trace context is stamped
// whatever the untraced sampling, in one record with its context, and with
// its first segment's time when the context is in a later one; a request
// without one is stamped for 1 in N requests only, the same requests at
// every hook, and the others counted.
func TestLatencyUntracedSampling(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		s := DefaultLatencySizes()
		s.UntracedSampling = 0
		g := newLatencyRig(t, s)
		c := newHTTPConn("10.1.2.3", 40020)
		g.send(c, 1000, tracedRequest(100, ""), 1448)  // untraced, one segment
		g.send(c, 5000, tracedRequest(3000, ""), 1448) // untraced, three
		g.send(c, 9000, tracedRequest(100, "traceparent: "+testTP), 1448)
		// The context in the second segment: the record comes with it,
		// but carries the first segment's time.
		req := tracedRequest(2048, "traceparent: "+testTP)
		runProg(t, g.dp, flow.Egress, c.seg(t, 20000, req[:1448]))
		between := hop.MonotonicNow()
		runProg(t, g.dp, flow.Egress, c.seg(t, 20000+1448, req[1448:]))
		kinds, got := g.readRecords()
		if fmt.Sprint(kinds) != fmt.Sprint([]int{latencyRecBoth, latencyRecBoth}) {
			t.Fatalf("records %v, want the two traced requests' stamps and contexts", kinds)
		}
		if st := got.stamps[0]; st.Seq != 9000 || st.Len != uint32(len(tracedRequest(100, "traceparent: "+testTP))) {
			t.Errorf("first stamp %+v, want the request at 9000", st)
		}
		if st := got.stamps[1]; st.Seq != 20000 || st.Len != 1448 || st.TimeNs >= between || got.contexts[1].Seq != 20000 {
			t.Errorf("second stamp %+v (context %+v), want the first segment's at 20000, 1448 bytes, before %d", st, got.contexts[1], between)
		}
		g.checkCounters(map[string]uint64{"requests": 4, "found_traceparent": 2, "not_found": 2, "untraced_skipped": 2})
	})
	// A context that says its trace is not sampled counts as none: the
	// request is stamped only if the untraced sampling keeps it, and the
	// context is not reported (no span is to hang off a trace the backend
	// does not record).
	unsampled := []string{
		"traceparent: 00-" + testTraceID + "-" + testSpanID + "-00",
		"b3: " + testTraceID + "-" + testSpanID + "-0",
	}
	t.Run("unsampled", func(t *testing.T) {
		for _, every := range []bool{false, true} {
			s := DefaultLatencySizes()
			s.UntracedSampling = 0
			if every {
				s.UntracedSampling = 1
			}
			g := newLatencyRig(t, s)
			c := newHTTPConn("10.1.2.3", 40022)
			for i, h := range unsampled {
				g.send(c, uint32(1000+10000*i), tracedRequest(100, h), 1448)
			}
			// The sampled form of each, for contrast: always stamped.
			g.send(c, 30000, tracedRequest(100, "traceparent: "+testTP), 1448)
			g.send(c, 40000, tracedRequest(100, "b3: "+testTraceID+"-"+testSpanID+"-1"), 1448)
			kinds, got := g.readRecords()
			want := []int{latencyRecBoth, latencyRecBoth}
			counters := map[string]uint64{"requests": 4, "found_traceparent": 2, "found_b3_single": 2, "unsampled_skipped": 2}
			if every {
				want = append([]int{latencyRecStamp, latencyRecStamp}, want...)
				delete(counters, "unsampled_skipped")
			}
			if fmt.Sprint(kinds) != fmt.Sprint(want) {
				t.Fatalf("untraced sampling %d: records %v, want %v", s.UntracedSampling, kinds, want)
			}
			if len(got.contexts) != 2 {
				t.Errorf("%d contexts, want the 2 of the sampled traces", len(got.contexts))
			}
			for _, cx := range got.contexts {
				if cx.TraceID != [16]byte(mustHex(testTraceID)) || cx.Seq < 30000 {
					t.Errorf("context %+v: want trace id %s, of a sampled trace's request", cx, testTraceID)
				}
			}
			g.checkCounters(counters)
		}
	})
	t.Run("1in4", func(t *testing.T) {
		onOneCPU(t) // the second hook takes the first's verdict: scan_reused
		s := DefaultLatencySizes()
		s.UntracedSampling = 4
		g := newLatencyRig(t, s)
		c := newHTTPConn("10.1.2.3", 40021)
		other := newHTTPConn("10.1.2.3", 40021)
		other.smac, other.dmac = macOuterA, macOuterB
		const requests = 200
		req := tracedRequest(100, "")
		for i := range requests {
			seq := uint32(i * len(req))
			runProg(t, g.dp, flow.Egress, c.seg(t, seq, req))
			runProg(t, g.dp, flow.Ingress, other.seg(t, seq, req))
		}
		got := g.read()
		byHook := map[flow.Direction][]uint32{}
		for _, st := range got.stamps {
			byHook[st.Key.Direction] = append(byHook[st.Key.Direction], st.Seq)
		}
		kept := byHook[flow.Egress]
		if fmt.Sprint(byHook[flow.Ingress]) != fmt.Sprint(kept) {
			t.Errorf("egress kept %v, ingress %v: want the same requests", kept, byHook[flow.Ingress])
		}
		if n := len(kept); n < requests/8 || n > requests/2 {
			t.Errorf("%d of %d requests stamped at 1 in 4", n, requests)
		}
		g.checkCounters(map[string]uint64{"requests": 2 * requests, "not_found": 2 * requests,
			"untraced_skipped": uint64(2 * (requests - len(kept))), "scan_reused": requests})
	})
}

// TestDecodeLatencyRecord: the field-by-field decoder reads every field of
// the three record kinds where the generated type puts it.
func TestDecodeLatencyRecord(t *testing.T) {
	if latencyRecordSize != 104 {
		t.Fatalf("struct latency_event is %d bytes, want 104", latencyRecordSize)
	}
	ev := loupeLatencyEvent{Time: 123456789, Seq: 0xdeadbeef, Len: 1448, Kind: 1, Tunneled: 1,
		TraceId: [16]uint8(mustHex(testTraceID)), SpanId: [8]uint8(mustHex(testSpanID))}
	ev.Key = loupeFlowKey{SrcAddr: [16]uint8{15: 1}, DstAddr: [16]uint8{15: 2}, SrcMac: [6]uint8{2, 0, 0, 0, 0, 1},
		Ifindex: 7, EthType: 0x0800, SrcPort: 40000, DstPort: 80, VlanId: 5, Proto: 6, Direction: 1, AggPrefix: 24}
	var want flow.Key
	keyFromBPF(&want, &ev.Key)
	for _, rec := range []uint8{latencyRecStamp, latencyRecContext, latencyRecBoth} {
		ev.Record, ev.Source = rec, 0
		if rec == latencyRecBoth {
			// The stamp's kind where a stamp has it, the context's source
			// in its own byte.
			ev.Source = uint8(hop.SourceB3)
		}
		var b bytes.Buffer
		if err := binary.Write(&b, binary.NativeEndian, &ev); err != nil {
			t.Fatal(err)
		}
		st, cx, kind, err := DecodeLatencyRecord(b.Bytes())
		if err != nil || kind != int(rec) {
			t.Fatalf("record %d: kind %d, %v", rec, kind, err)
		}
		switch rec {
		case latencyRecStamp:
			if (st != hop.Stamp{TimeNs: 123456789, Key: want, Tunneled: true, Seq: 0xdeadbeef, Len: 1448, Kind: hop.KindRequest}) {
				t.Errorf("stamp %+v", st)
			}
		case latencyRecContext:
			if (cx != hop.Context{TimeNs: 123456789, Key: want, Tunneled: true, Seq: 0xdeadbeef, Source: hop.SourceTraceparent,
				TraceID: ev.TraceId, SpanID: ev.SpanId}) {
				t.Errorf("context %+v", cx)
			}
		case latencyRecBoth:
			if (st != hop.Stamp{TimeNs: 123456789, Key: want, Tunneled: true, Seq: 0xdeadbeef, Len: 1448, Kind: hop.KindRequest}) {
				t.Errorf("both: stamp %+v", st)
			}
			if (cx != hop.Context{TimeNs: 123456789, Key: want, Tunneled: true, Seq: 0xdeadbeef, Source: hop.SourceB3,
				TraceID: ev.TraceId, SpanID: ev.SpanId}) {
				t.Errorf("both: context %+v", cx)
			}
		}
	}
	if _, _, _, err := DecodeLatencyRecord(make([]byte, 103)); err == nil {
		t.Error("a short record decoded")
	}
	if _, _, _, err := DecodeLatencyRecord(make([]byte, 104)); err == nil {
		t.Error("a record of type 0 decoded")
	}
}

// TestLatencyRingWakesPastAQuarter: a record does not wake the ring's reader
// until a quarter of the ring is unread (latency_wake_bytes); past it, the
// next record does. A reader that was woken per record would return at
// the first.
func TestLatencyRingWakesPastAQuarter(t *testing.T) {
	sizes := everyRequest()
	sizes.RingSize = os.Getpagesize()
	g := newLatencyRig(t, sizes)
	req := tracedRequest(100, "traceparent: "+testTP)
	send := func(port uint16) { runProg(t, g.dp, flow.Egress, newHTTPConn("10.1.2.3", port).seg(t, 1, req)) }

	send(30000)
	type result struct {
		sink  latencySink
		stamp int
		err   error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.stamp, _, _, r.err = g.r.Read(&r.sink, time.Minute)
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("the reader was woken by one record of %d bytes (%d stamps, %v)", latencyRecordSize, r.stamp, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	// To a quarter of the ring: every request makes one record of
	// latencyRecordSize bytes and the ring's 8-byte header; the last one
	// takes the unread bytes past the quarter.
	n := 1
	for ; n*(latencyRecordSize+8) < sizes.RingSize/4; n++ {
		send(uint16(30000 + n))
	}
	select {
	case r := <-done:
		if r.err != nil || r.stamp != n {
			t.Errorf("read %d stamps (%v), want the %d requests'", r.stamp, r.err, n)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%d records (%d bytes) did not wake the reader", n, n*(latencyRecordSize+8))
	}
}
