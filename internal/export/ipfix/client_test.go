package ipfix

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"loupe/internal/flow"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func mustAddr(s string) [16]byte { return netip.MustParseAddr(s).As16() }

// sampleRecords covers every template and every special case of the
// encoder: both directions, ICMP and ICMPv6, a non-IP flow, sampling 0,
// the AE flag, an IPv4 key cut short before its addresses, a decoded
// record and an estimate of each shape.
func sampleRecords() []flow.Record {
	base := func(k flow.Key, i int) flow.Record {
		k.SrcMAC = [6]byte{0x02, 0, 0, 0, 0, byte(i)}
		k.DstMAC = [6]byte{0x02, 0xff, 0, 0, 0, byte(i)}
		return flow.Record{
			Key: k, Iface: "eth0", Packets: uint64(10 + i), Bytes: uint64(1_000_000_000_000 + i),
			FirstSeen: t0.Add(time.Duration(i) * time.Millisecond), LastSeen: t0.Add(time.Duration(i)*time.Millisecond + 4*time.Second + 7*time.Millisecond),
			Sampling: uint32(i % 3), TCPFlags: uint16(0x100 | i), DSCP: uint8(i % 64),
			Segments: uint64(10+i) * 3, WireBytes: uint64(1_000_000_000_000+i) + 2*52*uint64(10+i),
		}
	}
	return []flow.Record{
		base(flow.Key{SrcAddr: mustAddr("::ffff:10.1.2.3"), DstAddr: mustAddr("::ffff:192.0.2.200"), IfIndex: 7, EtherType: flow.EtherTypeIPv4, SrcPort: 40000, DstPort: 443, Proto: 6, Direction: flow.Ingress, VlanID: 100}, 1),
		base(flow.Key{SrcAddr: mustAddr("2001:db8::1"), DstAddr: mustAddr("2001:db8:ffff::abcd"), IfIndex: 9, EtherType: flow.EtherTypeIPv6, SrcPort: 5353, DstPort: 53, Proto: 17, Direction: flow.Egress, VlanID: 4095}, 2),
		base(flow.Key{SrcAddr: mustAddr("::ffff:10.0.0.1"), DstAddr: mustAddr("::ffff:10.0.0.2"), IfIndex: 3, EtherType: flow.EtherTypeIPv4, SrcPort: 8, DstPort: 0, Proto: 1, Direction: flow.Egress}, 3),
		base(flow.Key{SrcAddr: mustAddr("fe80::1"), DstAddr: mustAddr("ff02::1"), IfIndex: 4, EtherType: flow.EtherTypeIPv6, SrcPort: 135, DstPort: 0, Proto: 58, Direction: flow.Ingress}, 4),
		base(flow.Key{IfIndex: 5, EtherType: 0x0806, Direction: flow.Ingress, VlanID: 7}, 5),
		base(flow.Key{IfIndex: 6, EtherType: flow.EtherTypeIPv4, Proto: 6, Direction: flow.Ingress}, 6), // cut short: no addresses
		base(flow.Key{SrcAddr: mustAddr("::ffff:203.0.113.9"), DstAddr: mustAddr("::ffff:198.51.100.1"), IfIndex: 1 << 31, EtherType: flow.EtherTypeIPv4, SrcPort: 65535, DstPort: 1, Proto: 132, Direction: flow.Egress}, 7),
		accurate(base(flow.Key{SrcAddr: mustAddr("::ffff:10.1.2.4"), DstAddr: mustAddr("::ffff:192.0.2.53"), IfIndex: 7, EtherType: flow.EtherTypeIPv4, SrcPort: 41000, DstPort: 53, Proto: 17, Direction: flow.Ingress}, 8), flow.Decoded),
		accurate(base(flow.Key{SrcAddr: mustAddr("::ffff:10.1.2.5"), DstAddr: mustAddr("::ffff:192.0.2.80"), IfIndex: 7, EtherType: flow.EtherTypeIPv4, SrcPort: 41001, DstPort: 80, Proto: 6, Direction: flow.Egress, VlanID: 12}, 9), flow.Estimated),
		accurate(base(flow.Key{SrcAddr: mustAddr("2001:db8::9"), DstAddr: mustAddr("2001:db8::443"), IfIndex: 9, EtherType: flow.EtherTypeIPv6, SrcPort: 50000, DstPort: 443, Proto: 6, Direction: flow.Ingress}, 10), flow.Estimated),
		accurate(base(flow.Key{IfIndex: 5, EtherType: 0x88cc, Direction: flow.Egress}, 11), flow.Estimated),
	}
}

// accurate gives r accuracy a, and an estimate bounds derived from its
// counts: a tenth of them, held with the confidence of a count-min sketch
// of 4 rows.
func accurate(r flow.Record, a flow.Accuracy) flow.Record {
	r.Accuracy = a
	if a == flow.Estimated {
		r.MaxErrorPackets, r.MaxErrorBytes, r.ErrorConfidence = r.Packets/10, r.Bytes/10, -math.Expm1(-4)
	}
	return r
}

// numbered returns n records, alternating IPv4 and IPv6 when mixed, each
// identified by its packet count (1..n).
func numbered(n int, mixed bool) []flow.Record {
	out := make([]flow.Record, n)
	for i := range out {
		r := &out[i]
		r.EtherType, r.Proto, r.IfIndex = flow.EtherTypeIPv4, 17, 2
		r.SrcAddr = mustAddr(fmt.Sprintf("::ffff:10.0.%d.%d", i/250, i%250+1))
		r.DstAddr = mustAddr("::ffff:10.9.9.9")
		if mixed && i%2 == 1 {
			r.EtherType = flow.EtherTypeIPv6
			r.SrcAddr = mustAddr(fmt.Sprintf("2001:db8::%x", i+1))
			r.DstAddr = mustAddr("2001:db8::9")
		}
		r.SrcPort, r.DstPort = uint16(10000+i), 4739
		r.Packets, r.Bytes = uint64(i+1), uint64(100*(i+1))
		r.FirstSeen, r.LastSeen = t0, t0.Add(time.Second)
		r.Sampling = 1
	}
	return out
}

// listenUDP is a collector socket on a free loopback port.
func listenUDP(t *testing.T, network, addr string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadBuffer(8 << 20)
	t.Cleanup(func() { c.Close() })
	return c
}

// readDatagrams reads exactly n datagrams, failing after 10 s.
func readDatagrams(t *testing.T, c *net.UDPConn, n int) [][]byte {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	buf := make([]byte, 65536)
	for len(out) < n {
		k, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", len(out), n, err)
		}
		out = append(out, append([]byte(nil), buf[:k]...))
	}
	return out
}

// assertNoMore fails if another datagram arrives within 100 ms.
func assertNoMore(t *testing.T, c *net.UDPConn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 65536)
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("unexpected extra datagram of %d bytes", n)
	}
}

func newClient(t *testing.T, target string, opts Options) *Client {
	t.Helper()
	c, err := New(target, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c *Client, batch []flow.Record) {
	t.Helper()
	failed, err := c.Send(context.Background(), batch)
	if err != nil || len(failed) != 0 {
		t.Fatalf("Send: %d failed, %v", len(failed), err)
	}
}

func TestEveryFieldDecodes(t *testing.T) {
	col := listenUDP(t, "udp4", "127.0.0.1:0")
	clock := &fakeClock{now: t0.Add(90 * time.Second)}
	// One message for all of them: on loopback, 9000 bytes are one
	// datagram.
	c := newClient(t, "ipfix+udp://"+col.LocalAddr().String(), Options{ObservationDomain: 77, MTU: 9000, Now: clock.Now})
	recs := sampleRecords()
	send(t, c, recs)

	d := newDecoder()
	msgs := readDatagrams(t, col, 1)
	m, err := d.decode(msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if m.domain != 77 || m.seq != 0 || m.exportTime != uint32(t0.Unix()+90) {
		t.Fatalf("header: domain %d seq %d export time %d", m.domain, m.seq, m.exportTime)
	}
	if fmt.Sprint(m.templates) != "[256 257 258 259 260 261]" {
		t.Fatalf("templates %v", m.templates)
	}
	if len(m.records) != len(recs) {
		t.Fatalf("%d records decoded, %d sent", len(m.records), len(recs))
	}
	for i := range recs {
		tpl, want := expectFields(&recs[i])
		got := m.records[i]
		if got.template != tpl || !maps.Equal(got.fields, want) {
			t.Errorf("record %d: template %d fields\n got %v\nwant %d %v", i, got.template, got.fields, tpl, want)
		}
	}
	// Spot checks against literal values, so that the expectation above
	// is not just the encoder's logic restated.
	for k, v := range map[string]string{"sourceIPv4Address": "10.1.2.3", "destinationIPv4Address": "192.0.2.200", "ingressInterface": "7", "egressInterface": "0",
		"tcpControlBits": "257", "octetDeltaCount": "1000000000001", "flowStartMilliseconds": strconv.FormatInt(t0.UnixMilli()+1, 10),
		"flowEndMilliseconds": strconv.FormatInt(t0.UnixMilli()+4008, 10), "loupeSamplingRate": "1", "ethernetType": "2048",
		"vlanId": "100", "postVlanId": "0", "dot1qVlanId": "100", "loupeSegmentDeltaCount": "33", "loupeWireOctetDeltaCount": "1000000001145"} {
		if got := m.records[0].fields[k]; got != v {
			t.Errorf("record 0 %s = %s, want %s", k, got, v)
		}
	}
	if f := m.records[2].fields; f["icmpTypeCodeIPv4"] != "2048" || f["sourceTransportPort"] != "0" || f["egressInterface"] != "3" || f["flowDirection"] != "1" {
		t.Errorf("ICMP echo request record: %v", f)
	}
	if f := m.records[3].fields; f["icmpTypeCodeIPv6"] != "34560" || f["sourceIPv6Address"] != "fe80::1" {
		t.Errorf("ICMPv6 neighbor solicitation record: %v", f)
	}
	if f := m.records[5].fields; f["sourceIPv4Address"] != "0.0.0.0" {
		t.Errorf("cut-short IPv4 record: %v", f)
	}
	if f := m.records[1].fields; f["vlanId"] != "0" || f["postVlanId"] != "4095" || f["dot1qVlanId"] != "4095" {
		t.Errorf("tagged egress record: %v", f)
	}
	if m.records[4].template != 258 || m.records[4].fields["ethernetType"] != "2054" || m.records[4].fields["vlanId"] != "7" {
		t.Errorf("ARP record: %+v", m.records[4])
	}
	assertNoMore(t, col)
}

// TestTemplatesMatchEncoder checks each template's declared record length
// against what the encoder writes.
func TestTemplatesMatchEncoder(t *testing.T) {
	recs := sampleRecords()
	for _, r := range recs {
		ti := templateIndex(&r)
		got := len(appendRecord(nil, ti, templates()[ti].recordLen, &r))
		if got != templates()[ti].recordLen {
			t.Errorf("template %d: %d bytes encoded, %d declared", ti, got, templates()[ti].recordLen)
		}
	}
	for i, set := range templateSets(templates(), testPEN) {
		if want := []int{356, 428}[i]; len(set) != want {
			t.Errorf("template set %d is %d bytes, documented as %d", i, len(set), want)
		}
	}
	for i, want := range []int{101, 125, 83, 125, 149, 107} {
		if n := templates()[i].recordLen; n != want {
			t.Errorf("template %d: records of %d bytes, documented as %d", templates()[i].id, n, want)
		}
	}
}

// TestSplitsWithinMTU sends 500 mixed records in one batch and checks
// that they arrive in order, in messages no larger than the MTU, each as
// full as the MTU allows, with sequence numbers counting data records.
func TestSplitsWithinMTU(t *testing.T) {
	for _, mtu := range []int{512, 1400, 9000} {
		t.Run(strconv.Itoa(mtu), func(t *testing.T) {
			col := listenUDP(t, "udp6", "[::1]:0")
			// No refresh within the test's messages: only the first carries
			// templates (TestTemplateRefresh tests the refresh).
			c := newClient(t, "ipfix+udp://"+col.LocalAddr().String(), Options{MTU: mtu, TemplateRefreshMessages: 1000, Now: (&fakeClock{now: t0}).Now})
			recs := numbered(500, true)
			send(t, c, recs)

			// Expected layout, computed from the sizes: 16-byte header,
			// 784 bytes of templates (two sets, 356 and 428 bytes) in the
			// first message only, a 4-byte set header at each change of
			// template, records of 101 (IPv4) and 125 (IPv6) bytes. Under
			// 16 + 784 + 4 + 149 = 953 bytes (the largest record, an IPv6
			// estimate) the templates go first in messages of their own,
			// one set each.
			var sizes []int
			size, cur := 16+784, -1
			tplMsgs := 0
			if mtu < 953 {
				sizes, size, tplMsgs = []int{16 + 356, 16 + 428}, 16, 2
			}
			for i := range recs {
				ti := i % 2
				need := []int{101, 125}[ti]
				if ti != cur {
					need += 4
				}
				if size+need > mtu {
					sizes = append(sizes, size)
					size, cur = 16, -1
					need = []int{101, 125}[ti] + 4
				}
				size += need
				cur = ti
			}
			sizes = append(sizes, size)

			d := newDecoder()
			next := 0
			for i, b := range readDatagrams(t, col, len(sizes)) {
				if len(b) > mtu || len(b) != sizes[i] {
					t.Fatalf("message %d: %d bytes, want %d (MTU %d)", i, len(b), sizes[i], mtu)
				}
				m, err := d.decode(b)
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if m.seq != uint32(next) {
					t.Fatalf("message %d: sequence %d, want %d", i, m.seq, next)
				}
				switch {
				case i < tplMsgs:
					if len(m.templates) != 3 || len(m.records) != 0 {
						t.Fatalf("message %d: templates %v and %d records, want 3 templates alone", i, m.templates, len(m.records))
					}
				case (i == 0) != (len(m.templates) == 6):
					t.Fatalf("message %d: templates %v", i, m.templates)
				}
				for _, r := range m.records {
					if r.fields["packetDeltaCount"] != strconv.Itoa(next+1) {
						t.Fatalf("message %d: record %s where %d was due", i, r.fields["packetDeltaCount"], next+1)
					}
					next++
				}
			}
			if next != len(recs) {
				t.Fatalf("%d records decoded, %d sent", next, len(recs))
			}
			assertNoMore(t, col)
		})
	}
}

// TestTemplateRefresh drives the UDP template refresh with a fake clock:
// templates go with the first message, then after TemplateRefresh, and
// every TemplateRefreshMessages messages.
func TestTemplateRefresh(t *testing.T) {
	col := listenUDP(t, "udp4", "127.0.0.1:0")
	clock := &fakeClock{now: t0}
	c := newClient(t, "ipfix+udp://"+col.LocalAddr().String(), Options{TemplateRefresh: time.Minute, TemplateRefreshMessages: 4, Now: clock.Now})
	rec := numbered(1, false)
	// step: how far the clock moves before each one-message Send.
	steps := []time.Duration{0, time.Second, time.Second, 59 * time.Second, time.Second, 0, 0, 0, 0, 0, time.Minute, 0}
	want := []bool{true, false, false, true, false, false, false, false, true, false, true, false}
	for _, s := range steps {
		clock.now = clock.now.Add(s)
		send(t, c, rec)
	}
	d := newDecoder()
	for i, b := range readDatagrams(t, col, len(steps)) {
		m, err := d.decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(m.templates) > 0; got != want[i] {
			t.Errorf("message %d: templates sent %v, want %v", i, got, want[i])
		}
		if m.seq != uint32(i) || len(m.records) != 1 {
			t.Errorf("message %d: sequence %d, %d records", i, m.seq, len(m.records))
		}
	}
}

// TestUDPPortUnreachable sends to a port nobody listens on: the ICMP port
// unreachable comes back as ECONNREFUSED on a later write, whose records
// are reported failed, and the next message after it carries templates.
func TestUDPPortUnreachable(t *testing.T) {
	col := listenUDP(t, "udp4", "127.0.0.1:0")
	addr := col.LocalAddr().String()
	col.Close()
	c := newClient(t, "ipfix+udp://"+addr, Options{Now: (&fakeClock{now: t0}).Now})
	batch := numbered(3, false)
	// On loopback the ICMP port unreachable is there when the write
	// returns: the very first Send knows its message was refused.
	failed, err := c.Send(context.Background(), batch)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err %v, want ECONNREFUSED", err)
	}
	if len(failed) != len(batch) || &failed[0] != &batch[0] {
		t.Fatalf("failed: %d records, want the whole batch", len(failed))
	}
	if c.Connected() || c.Unreachable() != 1 {
		t.Fatalf("after a refused write: connected %v, unreachable %d; want false, 1", c.Connected(), c.Unreachable())
	}
	col2 := listenUDP(t, "udp4", addr)
	send(t, c, batch)
	m, err := newDecoder().decode(readDatagrams(t, col2, 1)[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(m.templates) != 6 || len(m.records) != 3 || !c.Connected() {
		t.Fatalf("after recovery: templates %v, %d records, connected %v", m.templates, len(m.records), c.Connected())
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		target string
		opts   Options
		ok     bool
	}{
		{"ipfix+udp://127.0.0.1:4739", Options{}, true},
		{"ipfix+udp://127.0.0.1:4739", Options{MTU: 511}, false},
		{"ipfix+udp://127.0.0.1:4739", Options{MTU: 65536}, false},
		{"ipfix+tcp://127.0.0.1:4739", Options{MTU: 65535}, true},
		{"ipfix+udp://127.0.0.1:4739", Options{TemplateRefresh: -1}, false},
		{"ipfix+udp://127.0.0.1", Options{}, false},
	} {
		_, err := New(tc.target, tc.opts)
		if (err == nil) != tc.ok {
			t.Errorf("New(%q, %+v): %v", tc.target, tc.opts, err)
		}
	}
	c, err := New("ipfix+tcp://[::1]:4739", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o := c.opts; o.MTU != 8192 || o.ObservationDomain != 1 || o.EnterpriseNumber != 32473 || o.TemplateRefresh != time.Minute || o.TemplateRefreshMessages != 100 {
		t.Fatalf("TCP defaults: %+v", o)
	}
	c, _ = New("ipfix+udp://[::1]:4739", Options{})
	if c.opts.MTU != 1400 {
		t.Fatalf("UDP MTU default %d", c.opts.MTU)
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]string{
		"ipfix+udp://127.0.0.1:4739":       "udp 127.0.0.1:4739",
		"ipfix+tcp://[2001:db8::1]:4739":   "tcp [2001:db8::1]:4739",
		"IPFIX+UDP://collector.example:99": "udp collector.example:99",
		"ipfix+udp://127.0.0.1":            "error",
		"ipfix+udp://127.0.0.1:0":          "error",
		"ipfix+udp://127.0.0.1:70000":      "error",
		"ipfix+sctp://127.0.0.1:4739":      "error",
		"udp://127.0.0.1:4739":             "error",
		"ipfix+udp://:4739":                "error",
		"ipfix+udp://u@127.0.0.1:4739":     "error",
		"ipfix+udp://127.0.0.1:4739/x":     "error",
		"ipfix+udp://127.0.0.1:4739?a=b":   "error",
	} {
		got := "error"
		if tg, err := ParseTarget(in); err == nil {
			got = tg.Network + " " + tg.Address
		}
		if got != want {
			t.Errorf("ParseTarget(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestExtensionTemplates: a record with fields present only where measured
// goes in an extension template, which is sent once, in a message of its
// own just before the first record that needs it, and with every refresh
// after; a record too large for any message is not sent, and counted.
func TestExtensionTemplates(t *testing.T) {
	col := listenUDP(t, "udp4", "127.0.0.1:0")
	clock := &fakeClock{now: t0}
	c := newClient(t, "ipfix+udp://"+col.LocalAddr().String(), Options{TemplateRefresh: time.Hour, TemplateRefreshMessages: 1000, Now: clock.Now})
	rtt := numbered(2, false)
	for i := range rtt {
		rtt[i].SetRTT(1000, 3000, 2000)
		rtt[i].SetRetransmits(0)
	}
	dns := numbered(1, true)
	dns[0].SetDNS(&flow.DNSExchange{ID: 9, QName: "a.test", HasRcode: true, Rcode: 3})
	huge := numbered(1, false)
	huge[0].SetDNS(&flow.DNSExchange{ID: 10, QName: strings.Repeat("x", 2000)})

	send(t, c, numbered(1, false))   // 1: the six templates and a record
	send(t, c, rtt[:1])              // 2: template 262; 3: its record
	send(t, c, rtt[1:])              // 4: a record of 262 alone
	send(t, c, append(dns, huge...)) // 5: templates 263 and 264; 6: the DNS record (the huge one is not sent)
	if n := c.Rejected(); n != 1 {
		t.Errorf("rejected %d records, want 1 (a 2000-byte name at MTU 1400)", n)
	}
	clock.now = clock.now.Add(2 * time.Hour)
	// 7: the refresh: every template, 262 to 264 too, which with a record
	// no longer fit one message of 1400 bytes (1 260 bytes of templates):
	// they go alone; 8: the record.
	send(t, c, rtt[:1])

	d := newDecoder()
	want := []struct {
		templates string
		records   []uint16 // their templates
	}{
		{"[256 257 258 259 260 261]", []uint16{256}},
		{"[262]", nil}, {"[]", []uint16{262}}, {"[]", []uint16{262}},
		{"[263 264]", nil}, {"[]", []uint16{263}},
		{"[256 257 258 259 260 261 262 263 264]", nil}, {"[]", []uint16{262}},
	}
	for i, b := range readDatagrams(t, col, len(want)) {
		m, err := d.decode(b)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		var tpls []uint16
		for _, r := range m.records {
			tpls = append(tpls, r.template)
		}
		if fmt.Sprint(m.templates) != want[i].templates || fmt.Sprint(tpls) != fmt.Sprint(want[i].records) {
			t.Errorf("message %d: templates %v, records of %v; want %s and %v", i, m.templates, tpls, want[i].templates, want[i].records)
		}
		for _, r := range m.records {
			if r.template == 262 && (r.fields["loupeRttLastNanoseconds"] != "2000" || r.fields["loupeRetransmittedSegmentDeltaCount"] != "0") {
				t.Errorf("message %d: RTT record %v", i, r.fields)
			}
			if r.template == 263 && (r.fields["loupeDnsQueryName"] != "a.test" || r.fields["loupeDnsResponseCode"] != "3" ||
				r.fields["loupeDnsLatencyNanoseconds"] != "" || r.fields["sourceIPv4Address"] != "10.0.0.1") {
				t.Errorf("message %d: DNS record %v (no latency: no element)", i, r.fields)
			}
		}
	}
	assertNoMore(t, col)
}
