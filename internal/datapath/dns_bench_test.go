package datapath

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// BenchmarkTCSignals times one run of the entry program (BPF_PROG_TEST_RUN,
// repeated in the kernel) with DNS and the handshake RTT off and on, on the
// packets each looks at and on those it does not: a 64-byte UDP datagram
// (the flood), a TCP data segment, a pure ACK (the handshake looks its
// connection up), a DNS query and response, a SYN. flows-only is the build
// of flows alone; the other rows run the build with every capability, with
// flows alone on ("all-build") or with the signals. A repeated packet hits
// the same entries: after the first run the query is a repetition, the
// response unmatched, the SYN a retransmission; each is what a packet of
// its kind costs at most, give or take a table insert.
//
//	go test -run '^$' -bench TCSignals ./internal/datapath
func BenchmarkTCSignals(b *testing.B) {
	if testing.Short() {
		b.Skip("loads BPF programs")
	}
	udp := dnsConn("10.1.2.3", 40000, "192.0.2.9", false)
	udp.server = netip.AddrPortFrom(udp.server.Addr(), 9000) // not DNS
	tcp := tcpConn("10.1.2.3", 40001, "192.0.2.80")
	dns := dnsConn("10.1.2.3", 40002, "192.0.2.53", false)
	packets := []struct {
		name  string
		frame []byte
	}{
		{"udp64", udp.seg(b, true, "", 0, 0, make([]byte, 64-42))},
		{"tcp-data", tcp.seg(b, true, "PA", 1, 1, make([]byte, 100))},
		{"tcp-ack", tcp.seg(b, true, "A", 1, 1, nil)},
		{"tcp-syn", tcp.seg(b, true, "S", 1, 0, nil)},
		{"dns-query", dns.msg(b, true, dnsMsg(b, 1, false, 0, "bench.name.test.", 0))},
		{"dns-response", dns.msg(b, false, dnsMsg(b, 1, true, dnsmessage.RCodeSuccess, "bench.name.test.", 1))},
	}
	for _, tc := range []struct {
		name string
		caps []string
		all  bool
	}{
		{"flows-only", []string{"flows"}, false},
		{"all-build", []string{"flows"}, true},
		{"dns", []string{"flows", "dns"}, true},
		{"handshake", []string{"flows", "handshake"}, true},
		{"dns+handshake", []string{"flows", "dns", "handshake"}, true},
	} {
		dp, err := Load(Options{FlowBudget: 1024, RingBufSize: 1 << 16, Capabilities: tc.caps, allBuild: tc.all})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range packets {
			prog := dp.Egress()
			if strings.HasPrefix(p.name, "dns-response") {
				prog = dp.Ingress()
			}
			b.Run(tc.name+"/"+p.name, func(b *testing.B) {
				_, d, err := prog.Benchmark(p.frame, b.N, b.ResetTimer)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
			})
		}
		dp.Close()
	}
}
