package datapath

import (
	"testing"
	"time"

	"loupe/internal/hop"
)

// BenchmarkLatency times one run of the entry program (BPF_PROG_TEST_RUN)
// with the latency capability off and on: a request's first segment with
// traceparent 100 B and 1 KiB into its headers (the whole scan of a
// 1448-byte segment), a TCP data segment that is no request, and a pure
// ACK. flows-only is the build of flows alone; all-build runs the build
// with every capability, flows alone on.
//
//	go test -run '^$' -bench Latency ./internal/datapath
func BenchmarkLatency(b *testing.B) {
	if testing.Short() {
		b.Skip("loads BPF programs")
	}
	c := newHTTPConn("10.1.2.3", 40000)
	packets := []struct {
		name  string
		frame []byte
	}{
		{"request-tp100", c.seg(b, 1, tracedRequest(100, "traceparent: "+testTP)[:min(1448, len(tracedRequest(100, "traceparent: "+testTP)))])},
		{"request-tp1k", c.seg(b, 1, tracedRequest(1024, "traceparent: "+testTP)[:1448])},
		{"request-no-tp", c.seg(b, 1, tracedRequest(1400, "")[:1448])},
		{"tcp-data", c.seg(b, 1, make([]byte, 1448))},
		{"tcp-ack", c.seg(b, 1, nil)},
	}
	for _, tc := range []struct {
		name string
		caps []string
		all  bool
		lat  LatencySizes
	}{
		{"flows-only", []string{"flows"}, false, LatencySizes{}},
		{"all-build", []string{"flows"}, true, LatencySizes{}},
		{"latency", []string{"flows", "latency"}, true, LatencySizes{}},
		{"latency-sampled-1:1", []string{"flows", "latency"}, true, LatencySizes{Sampling: 1, ScanLimit: 16 << 10, Scans: 16384, RingSize: 1 << 20}},
	} {
		dp, err := Load(Options{FlowBudget: 1024, RingBufSize: 1 << 16, Capabilities: tc.caps, allBuild: tc.all, Latency: tc.lat})
		if err != nil {
			b.Fatal(err)
		}
		var r *LatencyReader
		if tc.caps[len(tc.caps)-1] == "latency" {
			// Drained as the benchmark runs, so that the ring never
			// fills (a full ring skips the record's write), every
			// millisecond as the agent drains it every few: a reader
			// that spins takes the other CPU and wakes on every
			// record, and the run's time swings with it.
			if r, err = dp.OpenLatency(); err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				var s discardSink
				for {
					if _, _, _, err := r.Read(s, 0); err != nil {
						close(done)
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			defer func() { r.Close(); <-done }()
		}
		for _, p := range packets {
			b.Run(tc.name+"/"+p.name, func(b *testing.B) {
				_, d, err := dp.Egress().Benchmark(p.frame, b.N, b.ResetTimer)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
			})
		}
		defer dp.Close()
	}
}

// TestLatencyDetectionRate: the share of requests whose traceparent is
// found, by its position in the header block, each request in 1448-byte
// segments: with the default scan limit every position is found; with the
// scan cut at 800 bytes, the reach of the seed's scanner, none past it is
// (the seed found 0 % there). Logged for the benchmark's table
// (bench/latency.sh): "detection reach=R position=P found=F of N".
func TestLatencyDetectionRate(t *testing.T) {
	const per = 5
	seed := DefaultLatencySizes()
	seed.ScanLimit = 800
	for _, reach := range []struct {
		name  string
		sizes LatencySizes
	}{{"default", LatencySizes{}}, {"800", seed}} {
		g := newLatencyRig(t, reach.sizes)
		for _, pos := range []int{100, 400, 800, 1200, 2048, 4096, 6144, 7900} {
			found := 0
			for i := range per {
				c := newHTTPConn("10.1.2.3", uint16(30000+pos+i))
				g.send(c, uint32(1000*i), tracedRequest(pos+i*7, "traceparent: "+testTP), 1448)
				found += len(g.read().contexts)
			}
			t.Logf("detection reach=%s position=%d found=%d of %d", reach.name, pos, found, per)
			want := per
			switch {
			case reach.name == "default":
			case pos <= 400:
			case pos >= 800:
				want = 0 // the line of traceparent ends past the reach
			}
			if found != want {
				t.Errorf("reach %s, traceparent at %d: %d of %d found, want %d", reach.name, pos, found, per, want)
			}
		}
	}
}

type discardSink struct{}

func (discardSink) Stamp(hop.Stamp)     {}
func (discardSink) Context(hop.Context) {}
