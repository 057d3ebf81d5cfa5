package promflow

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"loupe/internal/flow"
)

// ipRec builds an IP flow record; the EtherType follows the address family.
func ipRec(iface string, dir flow.Direction, proto uint8, src, dst string, sport, dport uint16, packets, bytes uint64) flow.Record {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	et := uint16(flow.EtherTypeIPv6)
	if s.Is4() {
		et = flow.EtherTypeIPv4
	}
	return flow.Record{
		Iface: iface, Packets: packets, Bytes: bytes, Segments: 2 * packets, WireBytes: bytes + 10*packets,
		Key: flow.Key{Direction: dir, EtherType: et, Proto: proto, SrcAddr: s.As16(), DstAddr: d.As16(), SrcPort: sport, DstPort: dport},
	}
}

// rawRec builds a non-IP record. Records of both have twice as many
// segments as packets, and 10 wire bytes more a packet.
func rawRec(iface string, dir flow.Direction, etherType uint16, packets, bytes uint64) flow.Record {
	return flow.Record{Iface: iface, Packets: packets, Bytes: bytes, Segments: 2 * packets, WireBytes: bytes + 10*packets,
		Key: flow.Key{Direction: dir, EtherType: etherType}}
}

func write(t *testing.T, s *Sink, recs ...flow.Record) {
	t.Helper()
	if err := s.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
}

func flush(t *testing.T, s *Sink) {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// gather returns every sample of the sink as `name{l="v",...}` -> value,
// labels sorted by name.
func gather(t testing.TB, s *Sink) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			sort.Strings(ls)
			if h := m.GetHistogram(); h != nil {
				// A histogram as its exposition has it: _count, _sum and
				// a cumulative _bucket per bound.
				out[mf.GetName()+"_count{"+strings.Join(ls, ",")+"}"] = float64(h.GetSampleCount())
				out[mf.GetName()+"_sum{"+strings.Join(ls, ",")+"}"] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					le := append(slices.Clone(ls), fmt.Sprintf("le=%q", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))
					sort.Strings(le)
					out[mf.GetName()+"_bucket{"+strings.Join(le, ",")+"}"] = float64(b.GetCumulativeCount())
				}
				continue
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// sumOf adds the samples of one metric and counts them.
func sumOf(samples map[string]float64, name string) (sum float64, n int) {
	for k, v := range samples {
		if strings.HasPrefix(k, name+"{") {
			sum += v
			n++
		}
	}
	return sum, n
}

func fixedClock(t0 time.Time) (now func() time.Time, advance func(time.Duration)) {
	cur := t0
	return func() time.Time { return cur }, func(d time.Duration) { cur = cur.Add(d) }
}

func TestDefaultLabels(t *testing.T) {
	s := New(Options{})
	write(t, s,
		ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 40000, 443, 10, 1000),
		ipRec("eth0", flow.Egress, 6, "fd00::1", "fd00::2", 40001, 80, 5, 700), // same label set as IPv4 TCP
		ipRec("eth0", flow.Ingress, 17, "10.0.0.2", "10.0.0.1", 53, 40000, 2, 180),
		ipRec("eth0", flow.Ingress, 1, "10.0.0.2", "10.0.0.1", 0, 0, 3, 294),
		ipRec("eth0", flow.Ingress, 58, "fd00::2", "fd00::1", 135, 0, 1, 86),
		ipRec("eth0", flow.Egress, 132, "10.0.0.1", "10.0.0.2", 1, 2, 1, 100),
		ipRec("eth0", flow.Egress, 136, "10.0.0.1", "10.0.0.2", 1, 2, 1, 101),
		ipRec("eth0", flow.Egress, 99, "10.0.0.1", "10.0.0.2", 0, 0, 1, 102),
		rawRec("eth0", flow.Egress, 0x0806, 1, 42),
		rawRec("", flow.Ingress, 0x88cc, 4, 400), // interface name unknown, LLDP
	)
	want := `
# HELP loupe_traffic_bytes_total Bytes seen at the TC hooks (the L2 length of those buffers), by interface, direction, protocol and the configured keys.
# TYPE loupe_traffic_bytes_total counter
loupe_traffic_bytes_total{direction="egress",iface="eth0",proto="99"} 102
loupe_traffic_bytes_total{direction="egress",iface="eth0",proto="none"} 42
loupe_traffic_bytes_total{direction="egress",iface="eth0",proto="sctp"} 100
loupe_traffic_bytes_total{direction="egress",iface="eth0",proto="tcp"} 1700
loupe_traffic_bytes_total{direction="egress",iface="eth0",proto="udplite"} 101
loupe_traffic_bytes_total{direction="ingress",iface="eth0",proto="icmp"} 294
loupe_traffic_bytes_total{direction="ingress",iface="eth0",proto="icmpv6"} 86
loupe_traffic_bytes_total{direction="ingress",iface="eth0",proto="udp"} 180
loupe_traffic_bytes_total{direction="ingress",iface="unknown",proto="none"} 400
# HELP loupe_traffic_packets_total Packets seen at the TC hooks (buffers: a GSO/GRO super-packet counts once), by interface, direction, protocol and the configured keys.
# TYPE loupe_traffic_packets_total counter
loupe_traffic_packets_total{direction="egress",iface="eth0",proto="99"} 1
loupe_traffic_packets_total{direction="egress",iface="eth0",proto="none"} 1
loupe_traffic_packets_total{direction="egress",iface="eth0",proto="sctp"} 1
loupe_traffic_packets_total{direction="egress",iface="eth0",proto="tcp"} 15
loupe_traffic_packets_total{direction="egress",iface="eth0",proto="udplite"} 1
loupe_traffic_packets_total{direction="ingress",iface="eth0",proto="icmp"} 3
loupe_traffic_packets_total{direction="ingress",iface="eth0",proto="icmpv6"} 1
loupe_traffic_packets_total{direction="ingress",iface="eth0",proto="udp"} 2
loupe_traffic_packets_total{direction="ingress",iface="unknown",proto="none"} 4
# HELP loupe_traffic_segments_total Wire packets seen at the TC hooks (segments: a GSO/GRO super-packet counts as its segments), by interface, direction, protocol and the configured keys.
# TYPE loupe_traffic_segments_total counter
loupe_traffic_segments_total{direction="egress",iface="eth0",proto="99"} 2
loupe_traffic_segments_total{direction="egress",iface="eth0",proto="none"} 2
loupe_traffic_segments_total{direction="egress",iface="eth0",proto="sctp"} 2
loupe_traffic_segments_total{direction="egress",iface="eth0",proto="tcp"} 30
loupe_traffic_segments_total{direction="egress",iface="eth0",proto="udplite"} 2
loupe_traffic_segments_total{direction="ingress",iface="eth0",proto="icmp"} 6
loupe_traffic_segments_total{direction="ingress",iface="eth0",proto="icmpv6"} 2
loupe_traffic_segments_total{direction="ingress",iface="eth0",proto="udp"} 4
loupe_traffic_segments_total{direction="ingress",iface="unknown",proto="none"} 8
# HELP loupe_traffic_series Label sets of the loupe_traffic_*_total counters now (each counter has the same).
# TYPE loupe_traffic_series gauge
loupe_traffic_series 9
# HELP loupe_traffic_series_folded_total Records counted in the fold series (proto="other") because the series cap was reached.
# TYPE loupe_traffic_series_folded_total counter
loupe_traffic_series_folded_total 0
# HELP loupe_traffic_series_limit The cap on loupe_traffic_series (max_series); past it new label sets fold.
# TYPE loupe_traffic_series_limit gauge
loupe_traffic_series_limit 4096
# HELP loupe_traffic_wire_bytes_total Wire bytes seen at the TC hooks (the L2 length of those segments on the wire), by interface, direction, protocol and the configured keys.
# TYPE loupe_traffic_wire_bytes_total counter
loupe_traffic_wire_bytes_total{direction="egress",iface="eth0",proto="99"} 112
loupe_traffic_wire_bytes_total{direction="egress",iface="eth0",proto="none"} 52
loupe_traffic_wire_bytes_total{direction="egress",iface="eth0",proto="sctp"} 110
loupe_traffic_wire_bytes_total{direction="egress",iface="eth0",proto="tcp"} 1850
loupe_traffic_wire_bytes_total{direction="egress",iface="eth0",proto="udplite"} 111
loupe_traffic_wire_bytes_total{direction="ingress",iface="eth0",proto="icmp"} 324
loupe_traffic_wire_bytes_total{direction="ingress",iface="eth0",proto="icmpv6"} 96
loupe_traffic_wire_bytes_total{direction="ingress",iface="eth0",proto="udp"} 200
loupe_traffic_wire_bytes_total{direction="ingress",iface="unknown",proto="none"} 440
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "loupe_traffic_bytes_total", "loupe_traffic_packets_total",
		"loupe_traffic_segments_total", "loupe_traffic_series", "loupe_traffic_series_folded_total", "loupe_traffic_series_limit",
		"loupe_traffic_wire_bytes_total"); err != nil {
		t.Fatal(err)
	}
	// The registry accepts the collector as it is (consistent Describe).
	if problems, err := testutil.CollectAndLint(s); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
}

func TestEveryKey(t *testing.T) {
	groups, err := ParseGroups([]string{"lan=10.0.0.0/8,fd00::/8", "dns=10.0.0.53"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ParseKeys([]string{"dscp", "dst_group", "src_group", "dst_port", "src_port", "eth_type", "vlan_id"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Keys: keys, Groups: groups})
	tcp := ipRec("eth0", flow.Egress, 6, "10.1.2.3", "10.0.0.53", 40000, 53, 2, 200)
	tcp.DSCP, tcp.VlanID = 46, 100
	arp := rawRec("eth0", flow.Egress, 0x0806, 1, 42)
	arp.VlanID = 4095
	write(t, s,
		tcp,
		ipRec("eth0", flow.Ingress, 17, "fd00::9", "2001:db8::1", 5353, 5353, 1, 100),
		ipRec("eth0", flow.Ingress, 1, "192.0.2.1", "10.0.0.1", 8, 0, 1, 98), // ICMP type/code are not ports
		arp,
		rawRec("eth0", flow.Egress, 0x88cc, 1, 60),
	)
	got := gather(t, s)
	for _, want := range []string{
		`loupe_traffic_bytes_total{direction="egress",dscp="46",dst_group="dns",dst_port="53",eth_type="ipv4",iface="eth0",proto="tcp",src_group="lan",src_port="40000",vlan_id="100"}`,
		`loupe_traffic_bytes_total{direction="ingress",dscp="0",dst_group="other",dst_port="5353",eth_type="ipv6",iface="eth0",proto="udp",src_group="lan",src_port="5353",vlan_id="none"}`,
		`loupe_traffic_bytes_total{direction="ingress",dscp="0",dst_group="lan",dst_port="none",eth_type="ipv4",iface="eth0",proto="icmp",src_group="other",src_port="none",vlan_id="none"}`,
		`loupe_traffic_bytes_total{direction="egress",dscp="none",dst_group="none",dst_port="none",eth_type="arp",iface="eth0",proto="none",src_group="none",src_port="none",vlan_id="4095"}`,
		`loupe_traffic_bytes_total{direction="egress",dscp="none",dst_group="none",dst_port="none",eth_type="0x88cc",iface="eth0",proto="none",src_group="none",src_port="none",vlan_id="none"}`,
	} {
		if _, ok := got[want]; !ok {
			t.Errorf("missing %s", want)
		}
	}
	wantBytes := map[string]float64{"tcp": 200, "udp": 100, "icmp": 98}
	for k, v := range got {
		for proto, b := range wantBytes {
			if strings.HasPrefix(k, "loupe_traffic_bytes_total{") && strings.Contains(k, `proto="`+proto+`"`) && v != b {
				t.Errorf("%s = %v, want %v", k, v, b)
			}
		}
	}
	if sum, n := sumOf(got, "loupe_traffic_bytes_total"); sum != 500 || n != 5 {
		t.Errorf("bytes: %v over %d series, want 500 over 5\n%v", sum, n, got)
	}
	// Every counter has the same label sets: 6 packets, 12 segments, 560
	// wire bytes in all.
	for name, want := range map[string]float64{"loupe_traffic_packets_total": 6, "loupe_traffic_segments_total": 12, "loupe_traffic_wire_bytes_total": 560} {
		if sum, n := sumOf(got, name); sum != want || n != 5 {
			t.Errorf("%s: %v over %d series, want %v over 5", name, sum, n, want)
		}
	}
}

func TestFoldAtTheCap(t *testing.T) {
	s := New(Options{MaxSeries: 4, Keys: []Key{KeyDstPort}})
	// Room for 2 regular series: the other 2 are kept for the fold series.
	write(t, s,
		ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1000, 443, 1, 100),
		ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1001, 443, 2, 200), // same label set
		ipRec("eth0", flow.Ingress, 6, "10.0.0.2", "10.0.0.1", 443, 1000, 3, 300),
		ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1000, 80, 4, 400),  // folded
		ipRec("eth1", flow.Ingress, 17, "10.0.0.2", "10.0.0.1", 1, 2, 5, 500),    // folded
		ipRec("eth1", flow.Ingress, 17, "10.0.0.2", "10.0.0.1", 1, 2, 6, 600),    // folded again
		ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1002, 443, 7, 700), // existing: still its own
	)
	want := `
# HELP loupe_traffic_packets_total Packets seen at the TC hooks (buffers: a GSO/GRO super-packet counts once), by interface, direction, protocol and the configured keys.
# TYPE loupe_traffic_packets_total counter
loupe_traffic_packets_total{direction="egress",dst_port="443",iface="eth0",proto="tcp"} 10
loupe_traffic_packets_total{direction="egress",dst_port="other",iface="other",proto="other"} 4
loupe_traffic_packets_total{direction="ingress",dst_port="1000",iface="eth0",proto="tcp"} 3
loupe_traffic_packets_total{direction="ingress",dst_port="other",iface="other",proto="other"} 11
# HELP loupe_traffic_series Label sets of the loupe_traffic_*_total counters now (each counter has the same).
# TYPE loupe_traffic_series gauge
loupe_traffic_series 4
# HELP loupe_traffic_series_folded_total Records counted in the fold series (proto="other") because the series cap was reached.
# TYPE loupe_traffic_series_folded_total counter
loupe_traffic_series_folded_total 3
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want),
		"loupe_traffic_packets_total", "loupe_traffic_series", "loupe_traffic_series_folded_total"); err != nil {
		t.Fatal(err)
	}
}

// TestCapUnder100000Flows writes 100 000 distinct label sets, twice, in
// eviction-sized batches: the cap holds exactly, every record past it is
// counted as folded, and nothing is lost.
func TestCapUnder100000Flows(t *testing.T) {
	const (
		flows = 100_000
		max   = 1000
	)
	s := New(Options{MaxSeries: max, Keys: []Key{KeyDstPort}})
	recs := distinctFlows(flows)
	var packets, bytes float64
	for _, r := range recs {
		packets += float64(r.Packets)
		bytes += float64(r.Bytes)
	}
	for round := 1; round <= 2; round++ {
		for i := 0; i < flows; i += 65536 {
			write(t, s, recs[i:min(i+65536, flows)]...)
		}
		got := gather(t, s)
		p, np := sumOf(got, "loupe_traffic_packets_total")
		b, nb := sumOf(got, "loupe_traffic_bytes_total")
		if np != max || nb != max {
			t.Fatalf("round %d: %d packet series, %d byte series; want exactly %d", round, np, nb, max)
		}
		if p != packets*float64(round) || b != bytes*float64(round) {
			t.Fatalf("round %d: series sum to %v packets %v bytes; records %v, %v", round, p, b, packets*float64(round), bytes*float64(round))
		}
		// The first max-2 label sets have their own series; every other
		// record folds, in each round.
		wantFolded := float64(round * (flows - (max - 2)))
		if f := got["loupe_traffic_series_folded_total{}"]; f != wantFolded {
			t.Fatalf("round %d: folded %v, want %v", round, f, wantFolded)
		}
		if n := got["loupe_traffic_series{}"]; n != max {
			t.Fatalf("round %d: loupe_traffic_series %v, want %d", round, n, max)
		}
		var folds int
		for k := range got {
			if strings.HasPrefix(k, "loupe_traffic_packets_total{") && strings.Contains(k, `proto="other"`) {
				folds++
			}
		}
		if folds != 2 {
			t.Fatalf("round %d: %d fold series, want 2 (one per direction)", round, folds)
		}
	}
}

// distinctFlows returns n records with distinct (iface, direction, proto,
// dst_port) label sets; record i has i%7+1 packets of 100 bytes each.
func distinctFlows(n int) []flow.Record {
	out := make([]flow.Record, n)
	protos := []uint8{6, 17}
	for i := range out {
		v := i
		dir := flow.Direction(v % 2)
		v /= 2
		port := uint16(v % 65536)
		v /= 65536
		proto := protos[v%2]
		v /= 2
		iface := fmt.Sprintf("eth%d", v)
		pk := uint64(i%7 + 1)
		out[i] = ipRec(iface, dir, proto, "10.0.0.1", "10.0.0.2", 1, port, pk, pk*100)
	}
	return out
}

func TestIdleSeriesExpire(t *testing.T) {
	now, advance := fixedClock(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC))
	s := New(Options{MaxSeries: 4, IdleTTL: time.Minute, Now: now, Logger: slog.New(slog.DiscardHandler)})
	write(t, s,
		ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 1, 100),
		ipRec("veth1", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 2, 200),
		ipRec("veth2", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 3, 300), // folded
	)
	advance(30 * time.Second)
	write(t, s, ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 1, 100))
	advance(31 * time.Second) // veth1 and the fold series idle 61 s, eth0 31 s
	flush(t, s)
	want := `
# HELP loupe_traffic_bytes_total Bytes seen at the TC hooks (the L2 length of those buffers), by interface, direction, protocol and the configured keys.
# TYPE loupe_traffic_bytes_total counter
loupe_traffic_bytes_total{direction="egress",iface="eth0",proto="tcp"} 200
# HELP loupe_traffic_series Label sets of the loupe_traffic_*_total counters now (each counter has the same).
# TYPE loupe_traffic_series gauge
loupe_traffic_series 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "loupe_traffic_bytes_total", "loupe_traffic_series"); err != nil {
		t.Fatal(err)
	}
	// Freed room goes to new label sets again; a label set that comes
	// back starts from zero (a counter reset to Prometheus), and the fold
	// series can still be created when the cap is reached again.
	write(t, s,
		ipRec("veth2", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 4, 400),
		ipRec("veth1", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 5, 500), // folded
	)
	want = `
# HELP loupe_traffic_bytes_total Bytes seen at the TC hooks (the L2 length of those buffers), by interface, direction, protocol and the configured keys.
# TYPE loupe_traffic_bytes_total counter
loupe_traffic_bytes_total{direction="egress",iface="eth0",proto="tcp"} 200
loupe_traffic_bytes_total{direction="egress",iface="other",proto="other"} 500
loupe_traffic_bytes_total{direction="egress",iface="veth2",proto="tcp"} 400
# HELP loupe_traffic_series Label sets of the loupe_traffic_*_total counters now (each counter has the same).
# TYPE loupe_traffic_series gauge
loupe_traffic_series 3
# HELP loupe_traffic_series_folded_total Records counted in the fold series (proto="other") because the series cap was reached.
# TYPE loupe_traffic_series_folded_total counter
loupe_traffic_series_folded_total 2
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want),
		"loupe_traffic_bytes_total", "loupe_traffic_series", "loupe_traffic_series_folded_total"); err != nil {
		t.Fatal(err)
	}
	// The ingress fold series was never used: its room is still kept.
	write(t, s, ipRec("veth3", flow.Ingress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 1, 1))
	if n := testutil.CollectAndCount(s, "loupe_traffic_bytes_total"); n != 4 {
		t.Fatalf("%d series, want 4", n)
	}
	if got := gather(t, s)[`loupe_traffic_bytes_total{direction="ingress",iface="other",proto="other"}`]; got != 1 {
		t.Fatalf("ingress fold series has %v bytes, want 1", got)
	}
}

func TestInvalidDirection(t *testing.T) {
	s := New(Options{})
	bad := ipRec("eth0", 7, 6, "10.0.0.1", "10.0.0.2", 1, 2, 1, 100)
	good := ipRec("eth0", flow.Ingress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 2, 50)
	err := s.Write(context.Background(), []flow.Record{bad, good, bad})
	if err == nil || !strings.Contains(err.Error(), "2 records with an invalid direction") {
		t.Fatalf("err = %v", err)
	}
	got := gather(t, s)
	if sum, n := sumOf(got, "loupe_traffic_bytes_total"); sum != 50 || n != 1 {
		t.Fatalf("bytes %v over %d series, want 50 over 1", sum, n)
	}
}

// TestConcurrentScrape runs Collect while Write runs (go test -race).
func TestConcurrentScrape(t *testing.T) {
	s := New(Options{Keys: []Key{KeyDstPort}})
	recs := distinctFlows(5000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			write(t, s, recs...)
		}
	}()
	for range 20 {
		testutil.CollectAndCount(s)
	}
	<-done
	var want float64
	for _, r := range recs {
		want += float64(r.Bytes) * 20
	}
	if sum, _ := sumOf(gather(t, s), "loupe_traffic_bytes_total"); sum != want {
		t.Fatalf("bytes %v, want %v", sum, want)
	}
}

// TestFoldWarning: the operator is told when folding starts, then at most
// once a minute while it goes on, with the numbers.
func TestFoldWarning(t *testing.T) {
	var logs strings.Builder
	now, advance := fixedClock(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC))
	s := New(Options{MaxSeries: 2, Now: now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	r := ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 1, 100)
	flush(t, s)
	if logs.Len() != 0 {
		t.Fatalf("warned before folding: %s", logs.String())
	}
	write(t, s, r, r, r)
	flush(t, s)
	advance(59 * time.Second)
	write(t, s, r)
	flush(t, s) // within the minute: no second warning
	advance(time.Second)
	flush(t, s)
	flush(t, s) // nothing new folded: no third warning
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d warnings, want 2:\n%s", len(lines), logs.String())
	}
	for i, want := range []string{
		"component=promflow max_series=2 series=1 folded_records=3 folded_since_last_warning=3",
		"component=promflow max_series=2 series=1 folded_records=4 folded_since_last_warning=1",
	} {
		if !strings.Contains(lines[i], "level=WARN") || !strings.Contains(lines[i], want) {
			t.Errorf("warning %d: %s\nwant %s", i, lines[i], want)
		}
	}
}

// TestInterfaceChurnPastTheCap: interface names are interned for the map
// key; the names of folded or expired label sets must not accumulate.
func TestInterfaceChurnPastTheCap(t *testing.T) {
	now, advance := fixedClock(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC))
	s := New(Options{MaxSeries: 10, IdleTTL: time.Minute, Now: now, Logger: slog.New(slog.DiscardHandler)})
	for round := range 50 {
		if round > 0 {
			advance(2 * time.Minute)
			flush(t, s) // the previous round expires, fold series included
			if len(s.series) != 0 || len(s.ifaces) != 0 || len(s.ifaceName) != 0 {
				t.Fatalf("round %d: %d series, %d names, %d ids after expiry", round, len(s.series), len(s.ifaces), len(s.ifaceName))
			}
		}
		batch := make([]flow.Record, 200)
		for i := range batch {
			batch[i] = ipRec(fmt.Sprintf("veth%d_%d", round, i), flow.Direction(i%2), 6, "10.0.0.1", "10.0.0.2", 1, 2, 1, uint64(round+1))
		}
		write(t, s, batch...)
		// 200 names interned, 8 in use.
		flush(t, s)
		if len(s.ifaces) != 8 || len(s.ifaceName) != 8 {
			t.Fatalf("round %d: %d interned names (%d ids) for %d series", round, len(s.ifaces), len(s.ifaceName), len(s.series))
		}
	}
	// The last round's series: 8 own, 2 fold, with this round's bytes.
	got := gather(t, s)
	if sum, n := sumOf(got, "loupe_traffic_bytes_total"); sum != 200*50 || n != 10 {
		t.Fatalf("last round: %v bytes over %d series, want %d over 10", sum, n, 200*50)
	}
	if f := got["loupe_traffic_series_folded_total{}"]; f != 50*(200-8) {
		t.Fatalf("folded %v, want %d", f, 50*(200-8))
	}
}

// TestCapOfOne: with max_series 1 the only series is the fold series, and
// it folds the direction too.
func TestCapOfOne(t *testing.T) {
	s := New(Options{MaxSeries: 1, Logger: slog.New(slog.DiscardHandler)})
	write(t, s,
		ipRec("eth0", flow.Egress, 6, "10.0.0.1", "10.0.0.2", 1, 2, 1, 100),
		ipRec("eth0", flow.Ingress, 17, "10.0.0.2", "10.0.0.1", 1, 2, 2, 200),
		rawRec("eth1", flow.Ingress, 0x0806, 3, 300),
	)
	want := `
# HELP loupe_traffic_packets_total Packets seen at the TC hooks (buffers: a GSO/GRO super-packet counts once), by interface, direction, protocol and the configured keys.
# TYPE loupe_traffic_packets_total counter
loupe_traffic_packets_total{direction="other",iface="other",proto="other"} 6
# HELP loupe_traffic_series Label sets of the loupe_traffic_*_total counters now (each counter has the same).
# TYPE loupe_traffic_series gauge
loupe_traffic_series 1
# HELP loupe_traffic_series_folded_total Records counted in the fold series (proto="other") because the series cap was reached.
# TYPE loupe_traffic_series_folded_total counter
loupe_traffic_series_folded_total 3
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want),
		"loupe_traffic_packets_total", "loupe_traffic_series", "loupe_traffic_series_folded_total"); err != nil {
		t.Fatal(err)
	}
}
