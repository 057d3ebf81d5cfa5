package datapath

import (
	"strings"
	"testing"

	"loupe/internal/flow"
)

// BenchmarkCapturePath times one run of the entry program on crafted
// segments of a keep-alive HTTP connection (BPF_PROG_TEST_RUN, repeated in
// the kernel), flows alone against flows with the trigger's default rule:
// what the capture adds per packet, by kind of segment. A program run
// through the test interface pays no hook dispatch, and the same packet
// hits the same connection entry every time: a lower bound of the hook's
// cost, for comparing builds of the capture code with one another.
//
//	go test -run '^$' -bench CapturePath ./internal/datapath
func BenchmarkCapturePath(b *testing.B) {
	if testing.Short() {
		b.Skip("loads BPF programs")
	}
	conn := capConn{port: 40000}
	response := "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Wed, 25 Nov 2026 10:00:00 GMT\r\n" +
		"Content-Type: text/plain\r\nContent-Length: 18\r\nConnection: keep-alive\r\n\r\nfoofoofoofoofoofoo"
	segments := []struct {
		name     string
		toServer bool
		payload  string
	}{
		{"ack", true, ""},
		{"request", true, "GET /foo HTTP/1.1\r\nHost: 198.18.0.2\r\nUser-Agent: h2load nghttp2/1.52.0\r\nAccept: */*\r\n\r\n"},
		{"response", false, response},
		{"body1448", false, strings.Repeat("x", 1448)},
	}
	for _, caps := range [][]string{{"flows"}, {"flows", "capture"}} {
		dp, err := Load(Options{FlowBudget: 256, RingBufSize: 1 << 16, Capabilities: caps,
			Capture: DefaultCaptureSizes()})
		if err != nil {
			b.Fatal(err)
		}
		if len(caps) > 1 {
			if err := dp.SetCaptureConfig(CaptureConfig{Rules: []Rule{statusRule}, Output: true}); err != nil {
				b.Fatal(err)
			}
		}
		for _, s := range segments {
			frame := conn.frame(b, s.toServer, 1000, false, []byte(s.payload))
			dir := flow.Egress
			if !s.toServer {
				dir = flow.Ingress
			}
			prog := dp.Ingress()
			if dir == flow.Egress {
				prog = dp.Egress()
			}
			b.Run(strings.Join(caps, "+")+"/"+s.name, func(b *testing.B) {
				_, d, err := prog.Benchmark(frame, b.N, b.ResetTimer)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
			})
		}
		dp.Close()
	}
}
