package datapath

import (
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"
)

// tunnelBenchFrames are the packets BenchmarkTunnels times: traffic that
// is not tunnelled first (what must not get slower), then one packet of
// each encapsulation.
func tunnelBenchFrames(t testing.TB) []struct {
	name  string
	frame []byte
} {
	payload := make([]byte, 64)
	return []struct {
		name  string
		frame []byte
	}{
		{"tcp", ruleFrame(t, layers.IPProtocolTCP, "192.168.0.1", "10.0.5.9", 40000, 80, 100)},
		{"udp-53", ruleFrame(t, layers.IPProtocolUDP, "192.168.0.1", "10.0.5.9", 40000, 53, 100)},
		{"udp-5353", ruleFrame(t, layers.IPProtocolUDP, "192.168.0.1", "10.0.5.9", 40000, 5353, 100)},
		{"tcp-v6", ruleFrame(t, layers.IPProtocolTCP, "2001:db8::1", "2001:db8::2", 40000, 80, 100)},
		{"vxlan", udpTunnel(t, false, 50000, portVXLAN, vxlanHeader(0x08, 42), innerFrame(t, true, false, false, payload))},
		{"geneve", udpTunnel(t, false, 50000, portGeneve, geneveHeader(0, etherTypeTEB, 42, nil), innerFrame(t, true, false, false, payload))},
		{"gre-key", ipTunnel(t, false, layers.IPProtocolGRE, greHeader(0x0800, greOpts{key: true, keyVal: 9}), innerFrame(t, false, false, false, payload))},
		{"ipip", ipTunnel(t, false, layers.IPProtocolIPv4, innerFrame(t, false, false, false, payload))},
	}
}

// BenchmarkTunnels times one run of the flows-only entry program
// (BPF_PROG_TEST_RUN, repeated in the kernel on the same packet, so the
// flow is in the table: a packet's steady-state cost) on packets that are
// not tunnelled (TCP, UDP to a port outside the tunnel ports' range and one
// inside it) and on one packet of each encapsulation. Built against an
// older datapath, the tunnel frames are counted under their outer headers:
// the non-tunnel rows compare the two builds.
//
//	go test -run '^$' -bench Tunnels ./internal/datapath
func BenchmarkTunnels(b *testing.B) {
	if testing.Short() {
		b.Skip("loads BPF programs")
	}
	dp, err := Load(Options{FlowBudget: 1024, RingBufSize: 1 << 16, Capabilities: []string{"flows"}})
	if err != nil {
		b.Fatal(err)
	}
	defer dp.Close()
	for _, f := range tunnelBenchFrames(b) {
		b.Run(f.name, func(b *testing.B) {
			_, d, err := dp.Ingress().Benchmark(f.frame, b.N, b.ResetTimer)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
		})
	}
}

// BenchmarkTunnelsFirstPacket times the first packet of a flow: each run
// is one packet of a new flow (another source port, inner and outer), so
// that the flow table's insert, and for a tunnelled packet the tunnel
// table's, are in every measurement. One program run per syscall: the
// kernel's measurement of a single run, reported as the median over b.N
// flows.
func BenchmarkTunnelsFirstPacket(b *testing.B) {
	if testing.Short() {
		b.Skip("loads BPF programs")
	}
	const flows = 4096
	payload := make([]byte, 64)
	mk := map[string]func(port uint16) []byte{
		"udp": func(port uint16) []byte {
			return ruleFrame(b, layers.IPProtocolUDP, "192.168.0.1", "10.0.5.9", port, 53, 100)
		},
		"vxlan": func(port uint16) []byte {
			in := innerFrame(b, true, false, false, payload)
			in[14+20] = byte(port >> 8) // the inner UDP source port
			in[14+20+1] = byte(port)
			// The outer source port follows the inner flow, as Linux
			// hashes it: a new flow for an older build too, which
			// counts the packet by its outer headers.
			return udpTunnel(b, false, 30000+port, portVXLAN, vxlanHeader(0x08, 42), in)
		},
	}
	names := []string{"udp", "vxlan"}
	for _, name := range names {
		frames := make([][]byte, flows)
		for i := range frames {
			frames[i] = mk[name](uint16(1024 + i))
		}
		b.Run(name, func(b *testing.B) {
			ns := make([]float64, 0, b.N)
			var dp *Datapath
			for i := range b.N {
				if i%flows == 0 {
					if dp != nil {
						dp.Close()
					}
					var err error
					dp, err = Load(Options{FlowBudget: 2 * flows, RingBufSize: 1 << 16, Capabilities: []string{"flows"}})
					if err != nil {
						b.Fatal(err)
					}
				}
				_, d, err := dp.Ingress().Benchmark(frames[i%flows], 1, nil)
				if err != nil {
					b.Fatal(err)
				}
				ns = append(ns, float64(d.Nanoseconds()))
			}
			dp.Close()
			sort.Float64s(ns)
			b.ReportMetric(ns[len(ns)/2], "ns/first-packet")
		})
	}
}

// TestProgramSizes logs the entry programs' instruction counts as loaded
// (after the verifier removed what the switches make dead) and the
// instructions the verifier processed, for every build: the tunnel step
// must leave them sane and every build must load, the one with every
// capability on (the most the verifier walks: its bound is 1 000 000)
// too.
func TestProgramSizes(t *testing.T) {
	if testing.Short() {
		t.Skip("loads BPF programs")
	}
	for _, caps := range [][]string{{"flows"}, {"flows", "rules"}, {"flows", "capture"}, {"flows", "capture", "rules"},
		{"flows", "latency", "dns", "handshake", "capture", "rules"}} {
		dp, err := Load(Options{FlowBudget: 64, RingBufSize: 1 << 16, Capabilities: caps})
		if err != nil {
			t.Fatalf("%v: %v", caps, err)
		}
		for _, p := range []*ebpf.Program{dp.Ingress(), dp.Egress()} {
			info, err := p.Info()
			if err != nil {
				t.Fatal(err)
			}
			insns, err := info.Instructions()
			if err != nil {
				t.Fatal(err)
			}
			verified, _ := info.VerifiedInstructions()
			t.Logf("%-24s %-20s %5d instructions, %7d verified", strings.Join(caps, "+"), info.Name, len(insns), verified)
		}
		dp.Close()
	}
}
