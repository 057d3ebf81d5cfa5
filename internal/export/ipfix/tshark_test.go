package ipfix

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/testutil"
	"loupe/internal/tunnel"
)

// peerRecords returns n records for the real-collector tests: IPv4 and
// IPv6 alternating, with ICMP/ICMPv6 every fifth, ARP every fiftieth,
// both directions, 64-bit byte counts, VLAN-tagged but every seventh, one
// in nine decoded from the sketch and one in eleven estimated (so in the
// estimate templates, ARP among them), and distinct values in every field.
// The packet count identifies a record (1..n).
func peerRecords(n int) []flow.Record {
	recs := numbered(n, true)
	for i := range recs {
		r := &recs[i]
		r.Direction = flow.Direction((i / 2) % 2)
		r.IfIndex = uint32(2 + i%3)
		r.Proto = 6
		r.TCPFlags = uint16(i) & 0x1ff
		if i%5 == 0 {
			r.Proto, r.SrcPort, r.DstPort, r.TCPFlags = 1, 8, uint16(i%16), 0
			if r.EtherType == flow.EtherTypeIPv6 {
				r.Proto, r.SrcPort = 58, 128
			}
		}
		if i%50 == 49 {
			r.Key = flow.Key{EtherType: 0x0806, IfIndex: r.IfIndex, Direction: r.Direction}
			r.TCPFlags = 0
		}
		r.SrcMAC = [6]byte{0x02, 0, 0, 0, byte(i >> 8), byte(i)}
		r.DstMAC = [6]byte{0x02, 0xee, 0, 0, byte(i >> 8), byte(i)}
		r.Bytes = 1<<33 + uint64(i)
		r.Segments = r.Packets + uint64(i%5)*1000
		r.WireBytes = r.Bytes + uint64(i%5)*66_000 + 1<<34
		if i%7 != 0 {
			r.VlanID = uint16(i*13%4095 + 1)
		}
		r.DSCP = uint8(i % 64)
		r.Sampling = uint32(1 + i%4)
		r.FirstSeen = t0.Add(time.Duration(i) * time.Millisecond)
		r.LastSeen = t0.Add(time.Second + time.Duration(2*i)*time.Millisecond)
		switch {
		case i%9 == 4:
			r.Accuracy = flow.Decoded
		case i%11 == 6:
			r.Accuracy, r.MaxErrorPackets, r.MaxErrorBytes = flow.Estimated, uint64(i)+3, 1<<35+uint64(i)
			r.ErrorConfidence = 1 - 1/float64(i+2)
		}
		// Kernel signals, DNS and tunnels on some, in extension
		// templates: RTT and retransmits; drops; a DNS exchange; VXLAN
		// over IPv6 and GRE over IPv4.
		switch i % 13 {
		case 2:
			r.SetRTT(uint64(i)*1000, uint64(i)*5000, uint64(i)*2000)
			r.SetRetransmits(uint64(i % 3))
		case 5:
			r.SetDrops(uint64(i), uint64(i)*40, flow.DropReasons{"NETFILTER_DROP": uint64(i) - 1, "NO_SOCKET": 1})
		case 8:
			r.SetDNS(&flow.DNSExchange{ID: uint16(i), QName: fmt.Sprintf("host%d.example.test", i), HasRcode: true, Rcode: 3,
				HasLatency: true, LatencyNs: uint64(i) * 10_000})
		case 11:
			if i%2 == 0 {
				r.SetTunnel(&tunnel.Info{Type: tunnel.VXLAN, ID: uint32(i), HasID: true, SrcAddr: netip.MustParseAddr("fd88::1"),
					DstAddr: netip.MustParseAddr("fd88::2"), SrcPort: uint16(50000 + i), DstPort: 4789})
			} else {
				r.SetTunnel(&tunnel.Info{Type: tunnel.GRE, ID: uint32(i) << 8, HasID: true, SrcAddr: netip.MustParseAddr("198.51.100.1"),
					DstAddr: netip.MustParseAddr("198.51.100.2")})
			}
		}
	}
	return recs
}

// tsharkExpect lists, per tshark EK field, the values the records must
// show, in record order (tshark flattens a packet's records field by field).
func tsharkExpect(recs []flow.Record) map[string][]string {
	want := map[string][]string{}
	add := func(k, v string) { want["cflow_cflow_"+k] = append(want["cflow_cflow_"+k], v) }
	ts := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000Z") }
	for i := range recs {
		r := &recs[i]
		ip := r.EtherType == flow.EtherTypeIPv4 || r.EtherType == flow.EtherTypeIPv6
		switch r.EtherType {
		case flow.EtherTypeIPv4:
			add("srcaddr", r.SrcIP().String())
			add("dstaddr", r.DstIP().String())
		case flow.EtherTypeIPv6:
			add("srcaddrv6", r.SrcIP().String())
			add("dstaddrv6", r.DstIP().String())
		}
		if ip {
			icmp := r.Proto == 1 || r.Proto == 58
			sp, dp := r.SrcPort, r.DstPort
			if icmp {
				sp, dp = 0, 0
			}
			add("srcport", strconv.Itoa(int(sp)))
			add("dstport", strconv.Itoa(int(dp)))
			add("protocol", strconv.Itoa(int(r.Proto)))
			add("tcpflags", fmt.Sprintf("0x%04x", r.TCPFlags))
			add("ip_dscp", strconv.Itoa(int(r.DSCP)))
			if r.EtherType == flow.EtherTypeIPv4 {
				code := uint16(0)
				if icmp {
					code = r.SrcPort<<8 | r.DstPort
				}
				add("icmp_type_code_ipv4", fmt.Sprintf("0x%04x", code))
			} else {
				t, c := 0, 0
				if icmp {
					t, c = int(r.SrcPort), int(r.DstPort)
				}
				add("icmp_ipv6_type", strconv.Itoa(t))
				add("icmp_ipv6_code", strconv.Itoa(c))
			}
		}
		add("octets", strconv.FormatUint(r.Bytes, 10))
		add("packets", strconv.FormatUint(r.Packets, 10))
		add("abstimestart", ts(r.FirstSeen))
		add("abstimeend", ts(r.LastSeen))
		in, out := r.IfIndex, uint32(0)
		if r.Direction == flow.Egress {
			in, out = 0, r.IfIndex
		}
		add("inputint", strconv.Itoa(int(in)))
		add("outputint", strconv.Itoa(int(out)))
		add("direction", strconv.Itoa(int(r.Direction)))
		add("srcmac", net.HardwareAddr(r.SrcMAC[:]).String())
		add("dstmac", net.HardwareAddr(r.DstMAC[:]).String())
		add("ethernet_type", strconv.Itoa(int(r.EtherType)))
		vin, vout := r.VlanID, uint16(0)
		if r.Direction == flow.Egress {
			vin, vout = 0, r.VlanID
		}
		add("vlanid", strconv.Itoa(int(vin)))
		add("post_vlanid", strconv.Itoa(int(vout)))
		add("dot1q_vlan_id", strconv.Itoa(int(r.VlanID)))
		// tshark does not know Loupe's elements: it shows their bytes, in
		// template order (sampling, segments, wire bytes, aggregate prefix,
		// accuracy, and an estimate's bounds and confidence).
		add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint32(nil, r.Sampling)))
		add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint64(nil, r.Segments)))
		add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint64(nil, r.WireBytes)))
		add("enterprise_private_entry", hexColons([]byte{r.AggPrefix}))
		add("enterprise_private_entry", hexColons([]byte{byte(r.Accuracy)}))
		if r.Accuracy == flow.Estimated {
			add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint64(nil, r.MaxErrorPackets)))
			add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint64(nil, r.MaxErrorBytes)))
			add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint64(nil, math.Float64bits(r.ErrorConfidence))))
		}
		// The fields present only where measured, in the extension
		// template's order: IANA's decoded, Loupe's as their bytes.
		u64 := func(v uint64) string { return hexColons(binary.BigEndian.AppendUint64(nil, v)) }
		h := r.Has
		if h&flow.HasRTT != 0 {
			add("enterprise_private_entry", u64(r.RTTMinNs))
			add("enterprise_private_entry", u64(r.RTTMaxNs))
			add("enterprise_private_entry", u64(r.RTTLastNs))
		}
		if h&flow.HasRetransmits != 0 {
			add("enterprise_private_entry", u64(r.Retransmits))
		}
		if h&flow.HasDrops != 0 {
			add("drop_packets", strconv.FormatUint(r.DropPackets, 10))
			add("drop_octets", strconv.FormatUint(r.DropBytes, 10))
		}
		if h&flow.HasDNSID != 0 {
			add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint16(nil, r.DNSID)))
			add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint16(nil, r.DNSRcode)))
			add("enterprise_private_entry", u64(r.DNSLatencyNs))
		}
		if h&flow.HasTunnelType != 0 {
			add("enterprise_private_entry", hexColons([]byte{byte(r.TunnelType)}))
			if r.TunnelType == tunnel.VXLAN {
				add("layer2_segment_id", strconv.FormatUint(1<<56|uint64(r.TunnelID), 10))
				add("enterprise_private_entry", hexColons(r.OuterSrcAddr.AsSlice()))
				add("enterprise_private_entry", hexColons(r.OuterDstAddr.AsSlice()))
				add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint16(nil, r.OuterSrcPort)))
				add("enterprise_private_entry", hexColons(binary.BigEndian.AppendUint16(nil, r.OuterDstPort)))
			} else {
				add("gre_key", strconv.FormatUint(uint64(r.TunnelID), 10))
				add("enterprise_private_entry", hexColons(r.OuterSrcAddr.AsSlice()))
				add("enterprise_private_entry", hexColons(r.OuterDstAddr.AsSlice()))
			}
		}
		if h&flow.HasDropReasons != 0 {
			add("enterprise_private_entry", hexColons([]byte(`{"NETFILTER_DROP":`+strconv.FormatUint(r.DropReasons["NETFILTER_DROP"], 10)+`,"NO_SOCKET":1}`)))
		}
		if h&flow.HasDNSQName != 0 {
			add("enterprise_private_entry", hexColons([]byte(r.DNSQName)))
		}
	}
	return want
}

// hexColons formats bytes as tshark shows an unknown element: 00:0a:...
func hexColons(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(parts, ":")
}

// tshark is a live capture on lo, printing EK JSON per packet.
type tshark struct {
	lines chan map[string]json.RawMessage
	probe *net.UDPConn // sends the start and end markers
	port  int          // the marker port
}

// startTshark captures filter plus UDP markers on lo, decoding decodeAs
// (e.g. "udp.port==P,cflow"), and returns once tshark has seen a marker:
// from then on nothing sent is missed.
func startTshark(t *testing.T, filter, decodeAs string) *tshark {
	t.Helper()
	testutil.RequirePrivileged(t) // capturing on lo needs CAP_NET_RAW
	bin := testutil.RequirePeer(t, "tshark")
	mark := listenUDP(t, "udp4", "127.0.0.1:0") // bound, so markers draw no ICMP errors
	port := mark.LocalAddr().(*net.UDPAddr).Port
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-i", "lo", "-l", "-n", "-B", "16", "-T", "ek",
		"-f", fmt.Sprintf("(%s) or udp port %d", filter, port), "-d", decodeAs)
	// tshark captures through a dumpcap child: stop the whole process
	// group, or a killed tshark leaves dumpcap capturing.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ts := &tshark{lines: make(chan map[string]json.RawMessage, 4096), port: port}
	go func() {
		defer close(ts.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var pkt struct {
				Layers map[string]json.RawMessage `json:"layers"`
			}
			if json.Unmarshal(sc.Bytes(), &pkt) == nil && pkt.Layers != nil {
				ts.lines <- pkt.Layers
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("tshark stderr: %s", stderr.String())
		}
	})
	ts.probe, err = net.DialUDP("udp4", nil, mark.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.probe.Close() })
	for i := 0; ; i++ { // at most 30 s
		if i == 300 {
			t.Fatalf("tshark captured no marker: %s", stderr.String())
		}
		_, _ = ts.probe.Write([]byte("start"))
		select {
		case l, ok := <-ts.lines:
			if !ok {
				t.Fatalf("tshark exited: %s", stderr.String())
			}
			if ts.isMarker(l, "start") {
				return ts
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (ts *tshark) isMarker(l map[string]json.RawMessage, what string) bool {
	var udp struct {
		Port string `json:"udp_udp_dstport"`
	}
	var data struct {
		Data string `json:"data_data_data"`
	}
	_ = json.Unmarshal(l["udp"], &udp)
	_ = json.Unmarshal(l["data"], &data)
	return udp.Port == strconv.Itoa(ts.port) && strings.ReplaceAll(data.Data, ":", "") == fmt.Sprintf("%x", what)
}

// collect returns the cflow layers of every packet until the end marker.
func (ts *tshark) collect(t *testing.T) []map[string]json.RawMessage {
	t.Helper()
	if _, err := ts.probe.Write([]byte("end")); err != nil {
		t.Fatal(err)
	}
	var out []map[string]json.RawMessage
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-ts.lines:
			if !ok {
				t.Fatal("tshark exited before the end marker")
			}
			if ts.isMarker(l, "end") {
				return out
			}
			if c, ok := l["cflow"]; ok {
				var f map[string]json.RawMessage
				if err := json.Unmarshal(c, &f); err != nil {
					t.Fatal(err)
				}
				out = append(out, f)
			}
		case <-deadline:
			t.Fatalf("no end marker after %d cflow packets", len(out))
		}
	}
}

// values reads an EK field, a string or an array of strings or booleans.
func values(raw json.RawMessage) []string {
	var list []any
	if json.Unmarshal(raw, &list) != nil {
		var one any
		_ = json.Unmarshal(raw, &one)
		list = []any{one}
	}
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = fmt.Sprint(v)
	}
	return out
}

// assertTshark compares what tshark decoded with recs, field by field and
// record by record, and the headers' sequence numbers and domain.
func assertTshark(t *testing.T, pkts []map[string]json.RawMessage, recs []flow.Record, domain uint32) {
	t.Helper()
	want := tsharkExpect(recs)
	got := map[string][]string{}
	seq := 0
	for i, p := range pkts {
		for k := range want {
			if v, ok := p[k]; ok {
				got[k] = append(got[k], values(v)...)
			}
		}
		// Over TCP a frame can hold several messages: one header each.
		seqs, doms, counts := values(p["cflow_cflow_sequence"]), values(p["cflow_cflow_od_id"]), 0
		if raw, ok := p["cflow_cflow_packets"]; ok {
			counts = len(values(raw))
		}
		if len(seqs) == 1 && seqs[0] != strconv.Itoa(seq) {
			t.Errorf("packet %d: sequence %s, want %d", i, seqs[0], seq)
		}
		for _, d := range doms {
			if d != strconv.Itoa(int(domain)) {
				t.Errorf("packet %d: observation domain %s", i, d)
			}
		}
		seq += counts
	}
	if seq != len(recs) {
		t.Errorf("tshark decoded %d records, %d sent", seq, len(recs))
	}
	for k, w := range want {
		g := got[k]
		if len(g) != len(w) {
			t.Errorf("%s: %d values, want %d", k, len(g), len(w))
			continue
		}
		for i := range w {
			if g[i] != w[i] {
				t.Errorf("%s: value %d is %s, want %s", k, i, g[i], w[i])
				break
			}
		}
	}
}

// TestTsharkDecodesUDP has tshark decode 500 records (IPv4, IPv6, ICMP,
// ARP) sent over UDP in MTU-sized messages, field by field.
func TestTsharkDecodesUDP(t *testing.T) {
	col := listenUDP(t, "udp4", "127.0.0.1:0") // bound and never read: the capture is the collector
	port := col.LocalAddr().(*net.UDPAddr).Port
	ts := startTshark(t, fmt.Sprintf("udp port %d", port), fmt.Sprintf("udp.port==%d,cflow", port))
	c := newClient(t, fmt.Sprintf("ipfix+udp://127.0.0.1:%d", port), Options{ObservationDomain: 4242})
	recs := peerRecords(500)
	send(t, c, recs)
	pkts := ts.collect(t)
	if len(pkts) < 2 {
		t.Fatalf("%d messages: the records were not split", len(pkts))
	}
	assertTshark(t, pkts, recs, 4242)
}

// TestTsharkDecodesTCP is the same over TCP, through a collector that
// reads and discards the stream.
func TestTsharkDecodesTCP(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, conn)
			conn.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	ts := startTshark(t, fmt.Sprintf("tcp port %d", port), fmt.Sprintf("tcp.port==%d,cflow", port))
	c := newClient(t, fmt.Sprintf("ipfix+tcp://127.0.0.1:%d", port), Options{ObservationDomain: 7})
	recs := peerRecords(500)
	send(t, c, recs)
	pkts := ts.collect(t)
	assertTshark(t, pkts, recs, 7)
}
