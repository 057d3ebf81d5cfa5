package datapath

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/dns/dnsmessage"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// sigConn is a UDP or TCP connection between a client and a server, for
// the tests of the signals at the TC hook (DNS, the handshake).
type sigConn struct {
	client, server netip.AddrPort
	tcp            bool
}

func dnsConn(client string, port uint16, server string, tcp bool) sigConn {
	return sigConn{client: netip.AddrPortFrom(netip.MustParseAddr(client), port),
		server: netip.AddrPortFrom(netip.MustParseAddr(server), 53), tcp: tcp}
}

// seg is one packet of the connection, the client's (toServer) or the
// server's; TCP segments take flags ("S", "SA", "A", "PA") and numbers.
func (c sigConn) seg(t testing.TB, toServer bool, flags string, seq, ack uint32, payload []byte) []byte {
	t.Helper()
	src, dst := c.client, c.server
	smac, dmac := macA, macB
	if !toServer {
		src, dst = dst, src
		smac, dmac = macB, macA
	}
	var l4 gopacket.SerializableLayer = &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	proto := layers.IPProtocolUDP
	if c.tcp {
		proto = layers.IPProtocolTCP
		l4 = &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), Seq: seq, Ack: ack,
			SYN: strings.Contains(flags, "S"), ACK: strings.Contains(flags, "A"), PSH: strings.Contains(flags, "P"),
			FIN: strings.Contains(flags, "F"), Window: 512}
	}
	if src.Addr().Is4() {
		return frame(t, &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()},
			l4, gopacket.Payload(payload))
	}
	return frame(t, &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()},
		l4, gopacket.Payload(payload))
}

// msg is a DNS message of the connection: over TCP, after its length.
func (c sigConn) msg(t testing.TB, toServer bool, m []byte) []byte {
	t.Helper()
	if c.tcp {
		m = append(binary.BigEndian.AppendUint16(nil, uint16(len(m))), m...)
	}
	return c.seg(t, toServer, "PA", 1000, 2000, m)
}

// dnsMsg builds a DNS message with one question for name (A, IN) and
// answers A records of the same name, compressed: each answer's name is a
// pointer to the question's.
func dnsMsg(t testing.TB, id uint16, response bool, rcode dnsmessage.RCode, name string, answers int) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, Response: response, RCode: rcode, RecursionDesired: true})
	b.EnableCompression()
	n := dnsmessage.MustNewName(name)
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: n, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	if err := b.StartAnswers(); err != nil {
		t.Fatal(err)
	}
	for i := range answers {
		if err := b.AResource(dnsmessage.ResourceHeader{Name: n, Class: dnsmessage.ClassINET, TTL: 60},
			dnsmessage.AResource{A: [4]byte{10, 0, 0, byte(7 + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// rawDNS is a DNS header (id, flags, counts) followed by body.
func rawDNS(id, flags, qd, an uint16, body ...byte) []byte {
	h := binary.BigEndian.AppendUint16(nil, id)
	h = binary.BigEndian.AppendUint16(h, flags)
	h = binary.BigEndian.AppendUint16(h, qd)
	h = binary.BigEndian.AppendUint16(h, an)
	h = append(h, 0, 0, 0, 0)
	return append(h, body...)
}

// sigTest runs crafted packets through a datapath with the DNS and
// handshake capabilities on, and drains their results as the flows unit
// would at an eviction: rotate, then drain.
type sigTest struct {
	t  *testing.T
	dp *Datapath
}

func newSigTest(t *testing.T, o Options) sigTest {
	t.Helper()
	testutil.RequirePrivileged(t)
	if o.Capabilities == nil {
		o.Capabilities = []string{"flows", "dns", "handshake"}
	}
	o.FlowBudget, o.RingBufSize = 256, 1<<16
	return sigTest{t: t, dp: loadForTest(t, o)}
}

// run runs each frame through the program of dir.
func (s sigTest) run(dir flow.Direction, frames ...[]byte) {
	s.t.Helper()
	for _, f := range frames {
		if ret := runProg(s.t, s.dp, dir, f); ret != tcxNext {
			s.t.Fatalf("return %d, want TCX_NEXT", int32(ret))
		}
	}
}

func (s sigTest) dns(timeout time.Duration) map[flow.Key]DNSResult {
	s.t.Helper()
	drainAll(s.t, s.dp)
	m, err := s.dp.DrainDNS(timeout)
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

func (s sigTest) counters(read func() ([]Counter, error)) map[string]uint64 {
	s.t.Helper()
	cs, err := read()
	if err != nil {
		s.t.Fatal(err)
	}
	m := map[string]uint64{}
	for _, c := range cs {
		m[c.Name] = c.Value
	}
	return m
}

// checkCounters compares the counters named in want, and requires every
// other one to be 0.
func checkCounters(t *testing.T, got, want map[string]uint64) {
	t.Helper()
	for name, v := range got {
		if v != want[name] {
			t.Errorf("counter %s = %d, want %d (all: %v)", name, v, want[name], got)
		}
	}
}

// resultOf finds the result of the flow from src in direction dir.
func resultOf[V any](m map[flow.Key]V, src netip.AddrPort, dir flow.Direction) (V, bool) {
	for k, v := range m {
		if k.SrcAddr == src.Addr().As16() && k.SrcPort == src.Port() && k.Direction == dir {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// TestDNSExchanges: a query on egress and its response on ingress, over
// UDP and TCP, IPv4 and IPv6, with names of several lengths and response
// codes, answers compressed. The query's flow gets its id and name; the
// response's flow its id, name, code and a latency no longer than the time
// between the two runs; every counter says what was sent.
func TestDNSExchanges(t *testing.T) {
	s := newSigTest(t, Options{})
	long63 := strings.Repeat("a", 63)
	cases := []struct {
		name      string
		conn      sigConn
		qname     string
		rcode     dnsmessage.RCode
		answers   int
		want      string // the dotted name the drain gives
		truncated bool
	}{
		{"udp4 noerror", dnsConn("10.1.2.3", 40001, "192.0.2.53", false), "name.test.", dnsmessage.RCodeSuccess, 2, "name.test", false},
		{"udp4 nxdomain", dnsConn("10.1.2.3", 40002, "192.0.2.53", false), "nosuch.test.", dnsmessage.RCodeNameError, 0, "nosuch.test", false},
		{"udp6 servfail", dnsConn("2001:db8::1", 40003, "2001:db8::53", false), "x.example.", dnsmessage.RCodeServerFailure, 0, "x.example", false},
		{"tcp4 refused", dnsConn("10.1.2.3", 40004, "192.0.2.53", true), "name.test.", dnsmessage.RCodeRefused, 1, "name.test", false},
		{"tcp6 noerror", dnsConn("2001:db8::1", 40005, "2001:db8::53", true), "a.b.c.test.", dnsmessage.RCodeSuccess, 3, "a.b.c.test", false},
		// 1 + 62 + 1 = 64 bytes in wire format: exactly what is kept.
		{"name of 64 bytes", dnsConn("10.1.2.3", 40006, "192.0.2.53", false), strings.Repeat("a", 62) + ".", dnsmessage.RCodeSuccess, 1, strings.Repeat("a", 62), false},
		// 65 bytes: cut inside the label.
		{"name of 65 bytes", dnsConn("10.1.2.3", 40007, "192.0.2.53", false), long63 + ".", dnsmessage.RCodeSuccess, 1, long63 + "...", true},
		// 66 bytes: the cut falls after the second label's length.
		{"name cut at a label", dnsConn("10.1.2.3", 40008, "192.0.2.53", true), strings.Repeat("a", 62) + ".b.", dnsmessage.RCodeSuccess, 1, strings.Repeat("a", 62) + "...", true},
		// 255 bytes, the longest a name can be.
		{"name of 255 bytes", dnsConn("2001:db8::1", 40009, "2001:db8::53", false), long63 + "." + long63 + "." + long63 + "." + strings.Repeat("a", 61) + ".", dnsmessage.RCodeNameError, 0, long63 + "...", true},
		{"root", dnsConn("10.1.2.3", 40010, "192.0.2.53", false), ".", dnsmessage.RCodeSuccess, 0, ".", false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.t = t
			id := uint16(0x1000 + i)
			query := c.conn.msg(t, true, dnsMsg(t, id, false, 0, c.qname, 0))
			resp := dnsMsg(t, id, true, c.rcode, c.qname, c.answers)
			if c.answers > 0 && !strings.Contains(string(resp), "\xc0\x0c") {
				t.Fatalf("the response's answers are not compressed: % x", resp)
			}
			before := time.Now()
			s.run(flow.Egress, query)
			time.Sleep(time.Millisecond)
			s.run(flow.Ingress, c.conn.msg(t, false, resp))
			elapsed := time.Since(before)
			got := s.dns(time.Hour)
			if len(got) != 2 {
				t.Fatalf("%d results, want 2 (the query's flow, the response's): %+v", len(got), got)
			}
			q, ok := resultOf(got, c.conn.client, flow.Egress)
			want := DNSResult{ID: id, QName: c.want, QNameTruncated: c.truncated, TCP: c.conn.tcp}
			if !ok || q != want {
				t.Errorf("query's flow: %+v (found %v), want %+v", q, ok, want)
			}
			r, ok := resultOf(got, c.conn.server, flow.Ingress)
			if !ok || r.Latency < time.Millisecond || r.Latency > elapsed {
				t.Errorf("response's flow: %+v (found %v), want a latency from 1ms to %v", r, ok, elapsed)
			}
			want.Response, want.Rcode, want.Matched, want.Latency = true, uint8(c.rcode), true, r.Latency
			if r != want {
				t.Errorf("response's flow: %+v, want %+v", r, want)
			}
		})
	}
	s.t = t
	trunc := uint64(0)
	for _, c := range cases {
		if c.truncated {
			trunc += 2 // the query's name and the response's question
		}
	}
	checkCounters(t, s.counters(s.dp.DNSCounters), map[string]uint64{
		"queries": uint64(len(cases)), "responses": uint64(len(cases)), "matched": uint64(len(cases)), "name_truncated": trunc,
	})
	st, err := s.dp.DNSStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Rcodes[0] != 6 || st.Rcodes[2] != 1 || st.Rcodes[3] != 2 || st.Rcodes[5] != 1 || st.Latency.Count != uint64(len(cases)) ||
		st.Latency.SumNs < uint64(len(cases))*uint64(time.Millisecond) {
		t.Errorf("stats: rcodes %v, latency %+v", st.Rcodes, st.Latency)
	}
	if n, err := s.dp.DNSPending(); err != nil || n != 0 {
		t.Errorf("pending queries: %d, %v; want none left", n, err)
	}
}

// TestDNSUnmatchedAndTimeouts: a response whose query was never seen is
// recorded with its own question's name, unmatched; a query without a
// response is a timeout on its flow once the timeout passed, and its late
// response is unmatched; a query sent again keeps its first time; a
// question that is a compression pointer leaves the name out.
func TestDNSUnmatchedAndTimeouts(t *testing.T) {
	s := newSigTest(t, Options{})
	c := dnsConn("10.1.2.3", 41000, "192.0.2.53", false)

	// A response alone.
	s.run(flow.Ingress, c.msg(t, false, dnsMsg(t, 7, true, dnsmessage.RCodeNameError, "alone.test.", 1)))
	got := s.dns(time.Hour)
	r, ok := resultOf(got, c.server, flow.Ingress)
	if want := (DNSResult{ID: 7, QName: "alone.test", Response: true, Rcode: 3}); !ok || r != want || len(got) != 1 {
		t.Fatalf("unmatched response: %+v, want %+v only", got, want)
	}

	// A query, sent twice, with no response: not a timeout before its
	// time, one after.
	q := c.msg(t, true, dnsMsg(t, 8, false, 0, "slow.test.", 0))
	s.run(flow.Egress, q, q)
	got = s.dns(time.Hour)
	if r, _ := resultOf(got, c.client, flow.Egress); r.Timeout || r.QName != "slow.test" {
		t.Fatalf("query: %+v", got)
	}
	time.Sleep(20 * time.Millisecond)
	got = s.dns(10 * time.Millisecond)
	r, ok = resultOf(got, c.client, flow.Egress)
	if want := (DNSResult{ID: 8, QName: "slow.test", Timeout: true}); !ok || r != want || len(got) != 1 {
		t.Fatalf("timed-out query: %+v, want %+v only", got, want)
	}
	// Its late response finds no query.
	s.run(flow.Ingress, c.msg(t, false, dnsMsg(t, 8, true, 0, "slow.test.", 1)))
	if r, _ := resultOf(s.dns(time.Hour), c.server, flow.Ingress); r.Matched || !r.Response {
		t.Fatalf("late response: %+v, want unmatched", r)
	}

	// A response whose question's name points at itself.
	s.run(flow.Ingress, c.msg(t, false, rawDNS(9, 0x8180, 1, 0, 0xc0, 0x0c, 0, 1, 0, 1)))
	r, _ = resultOf(s.dns(time.Hour), c.server, flow.Ingress)
	if want := (DNSResult{ID: 9, Response: true}); r != want {
		t.Fatalf("response with a pointer for a question: %+v, want %+v", r, want)
	}
	checkCounters(t, s.counters(s.dp.DNSCounters), map[string]uint64{
		"queries": 2, "repeated": 1, "responses": 3, "unmatched": 3, "name_bad": 1,
	})
}

// TestDNSMalformed: messages cut short, bad lengths, a query without its
// question, a label running past the message, and TCP segments that hold
// more than one message or only the start of one. Each is counted as what
// it is; nothing of it is recorded as an exchange unless it is one.
func TestDNSMalformed(t *testing.T) {
	s := newSigTest(t, Options{})
	udp := dnsConn("10.1.2.3", 42000, "192.0.2.53", false)
	tcp := dnsConn("10.1.2.3", 42001, "192.0.2.53", true)
	query := dnsMsg(t, 21, false, 0, "ok.test.", 0)
	withLen := func(m []byte, n int) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(n)), m...) }

	s.run(flow.Egress,
		udp.seg(t, true, "", 0, 0, query[:11]),                       // a header cut short
		udp.seg(t, true, "", 0, 0, nil),                              // no payload at all
		udp.seg(t, true, "", 0, 0, rawDNS(22, 0x0100, 0, 0)),         // a query without a question
		udp.seg(t, true, "", 0, 0, rawDNS(23, 0x0100, 1, 0, 5, 'a')), // a label past the message
		tcp.seg(t, true, "PA", 1, 1, withLen(query, 10)),             // a TCP length under a header
		tcp.seg(t, true, "PA", 1, 1, []byte{0, 40, 1}),               // a TCP segment shorter than a header
		tcp.seg(t, true, "A", 1, 1, nil),                             // an ACK: not a message, not counted
	)
	checkCounters(t, s.counters(s.dp.DNSCounters), map[string]uint64{
		"not_parsed_short": 3, "not_parsed_malformed": 2, "queries": 1, "name_bad": 1,
	})
	got := s.dns(time.Hour)
	if r, ok := resultOf(got, udp.client, flow.Egress); !ok || r != (DNSResult{ID: 23}) || len(got) != 1 {
		t.Fatalf("results %+v, want only the query whose name is bad (id 23, no name)", got)
	}

	// Two messages in one segment: the first is read, the rest counted.
	// A message longer than its segment: its start is read.
	two := append(withLen(query, len(query)), withLen(query, len(query))...)
	long := withLen(query, len(query)+100)
	s.run(flow.Egress, tcp.seg(t, true, "PA", 1, 1, two))
	s.run(flow.Egress, dnsConn("10.1.2.3", 42002, "192.0.2.53", true).seg(t, true, "PA", 1, 1, long))
	got = s.dns(time.Hour)
	for _, port := range []uint16{42001, 42002} {
		r, ok := resultOf(got, netip.AddrPortFrom(tcp.client.Addr(), port), flow.Egress)
		if want := (DNSResult{ID: 21, QName: "ok.test", TCP: true}); !ok || r != want {
			t.Errorf("port %d: %+v, want %+v", port, r, want)
		}
	}
	c := s.counters(s.dp.DNSCounters)
	if c["tcp_rest_not_parsed"] != 1 || c["queries"] != 3 {
		t.Errorf("counters %v: want tcp_rest_not_parsed 1, queries 3", c)
	}
}

// TestDNSTablesFull: past the pending table's bound a query is counted and
// not timed; past the per-flow table's, a result is counted and lost.
func TestDNSTablesFull(t *testing.T) {
	s := newSigTest(t, Options{DNS: DNSSizes{Pending: 2, Flows: 2}})
	for port := uint16(43000); port < 43003; port++ {
		c := dnsConn("10.1.2.3", port, "192.0.2.53", false)
		s.run(flow.Egress, c.msg(t, true, dnsMsg(t, port, false, 0, "full.test.", 0)))
	}
	if got := s.dns(time.Hour); len(got) != 2 {
		t.Errorf("%d results, want 2 (the table's bound)", len(got))
	}
	checkCounters(t, s.counters(s.dp.DNSCounters), map[string]uint64{"queries": 3, "pending_full": 1, "results_full": 1})
}

// TestDNSName: the wire format's labels become a dotted name, escaped.
func TestDNSName(t *testing.T) {
	for _, c := range []struct {
		wire      []byte
		truncated bool
		want      string
	}{
		{[]byte{0}, false, "."},
		{[]byte("\x04name\x04test\x00"), false, "name.test"},
		{[]byte("\x03a.b\x02\\\x01\x00"), false, `a\.b.\\\001`},
		{[]byte("\x04name\x04te"), true, "name.te..."},
		{[]byte("\x04name\x04"), true, "name..."},
		{[]byte("\x02_x\x01*\x00"), false, "_x.*"},
	} {
		if got := DNSName(c.wire, c.truncated); got != c.want {
			t.Errorf("DNSName(%q, %v) = %q, want %q", c.wire, c.truncated, got, c.want)
		}
	}
	if RcodeName(3) != "NXDOMAIN" || RcodeName(0) != "NOERROR" || RcodeName(12) != "RCODE12" || RcodeName(99) != "RCODE99" {
		t.Errorf("rcode names: %s %s %s %s", RcodeName(3), RcodeName(0), RcodeName(12), RcodeName(99))
	}
}

// TestTCSignalsNeedFlows: DNS and the handshake key their results by flow
// and swap with the flow tables; without flows they are refused, and a
// datapath without them has no results to drain.
func TestTCSignalsNeedFlows(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, caps := range [][]string{{"dns"}, {"handshake"}, {"capture", "dns"}} {
		if _, err := Load(Options{FlowBudget: 16, Capabilities: caps}); err == nil || !strings.Contains(err.Error(), "need flows") {
			t.Errorf("%v: err %v, want a refusal", caps, err)
		}
	}
	dp := loadForTest(t, Options{FlowBudget: 16, RingBufSize: 1 << 16, Capabilities: []string{"flows", "capture"}})
	if _, err := dp.DrainDNS(time.Second); err == nil {
		t.Error("DrainDNS without the dns capability: no error")
	}
	if _, err := dp.DrainHandshakes(); err == nil {
		t.Error("DrainHandshakes without the handshake capability: no error")
	}
}
