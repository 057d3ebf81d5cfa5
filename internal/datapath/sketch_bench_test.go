package datapath

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
)

// BenchmarkSketchPath times one run of the flows-only entry program
// (BPF_PROG_TEST_RUN, repeated in the kernel) on a UDP packet, down each
// of the paths a packet takes to be counted:
//
//   - exact-hit-10000: the packet's flow is one of 10 000 in the table;
//   - divert: the table is full, the sketch off: the packet goes to the
//     ring buffer (drained between runs, so that it never fills);
//   - spill: the table is full, the sketch on: the packet goes to the
//     sketch (after the first, with the half's full flag set).
//
// The same packet repeats, so its flow's memory stays in cache: a lower
// bound, for comparing the paths.
//
//	go test -run '^$' -bench SketchPath -count 5 ./internal/datapath
func BenchmarkSketchPath(b *testing.B) {
	if testing.Short() {
		b.Skip("loads BPF programs")
	}
	frameOf := func(port int) []byte { return udpFrame(b, uint16(port), 100) }
	run := func(b *testing.B, prog *ebpf.Program, frame []byte, repeat int) float64 {
		_, d, err := prog.Benchmark(frame, repeat, nil)
		if err != nil {
			b.Fatal(err)
		}
		return float64(d.Nanoseconds())
	}
	fill := func(b *testing.B, dp *Datapath, n int) {
		for i := range n {
			if _, err := dp.Ingress().Run(&ebpf.RunOptions{Data: frameOf(1 + i)}); err != nil {
				b.Fatal(err)
			}
		}
	}

	b.Run("exact-hit-10000", func(b *testing.B) {
		dp := benchLoad(b, Options{FlowBudget: 10000, RingBufSize: 1 << 16})
		fill(b, dp, 10000)
		f := frameOf(5000)
		b.ResetTimer()
		b.ReportMetric(run(b, dp.Ingress(), f, b.N), "ns/packet")
	})
	b.Run("spill", func(b *testing.B) {
		dp := benchLoad(b, Options{FlowBudget: 4, RingBufSize: 1 << 16, SketchBytes: 4 << 20})
		fill(b, dp, 4)
		f := frameOf(60000)
		b.ResetTimer()
		b.ReportMetric(run(b, dp.Ingress(), f, b.N), "ns/packet")
		b.StopTimer()
		if c := benchCounters(b, dp); c["spilled_packets"] < uint64(b.N) || c["map_full"] != 0 {
			b.Fatalf("the packets did not spill: %v", c)
		}
	})
	b.Run("divert", func(b *testing.B) {
		dp := benchLoad(b, Options{FlowBudget: 4, RingBufSize: 1 << 26})
		fill(b, dp, 4)
		rg, err := openRing(dp.objs.FlowEvents)
		if err != nil {
			b.Fatal(err)
		}
		defer rg.close()
		f := frameOf(60000)
		// A chunk's events fit in the ring buffer (136 bytes each).
		const chunk = 200_000
		b.ResetTimer()
		var ns float64
		for done := 0; done < b.N; {
			n := min(chunk, b.N-done)
			ns += run(b, dp.Ingress(), f, n) * float64(n)
			done += n
			b.StopTimer()
			for {
				_, _, err := rg.next()
				if errors.Is(err, errRingEmpty) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			rg.release(rg.position())
			b.StartTimer()
		}
		if c := benchCounters(b, dp); c["ringbuf_full"] != 0 {
			b.Fatalf("the ring buffer filled up: %v", c)
		}
		b.ReportMetric(ns/float64(b.N), "ns/packet")
	})
}

func benchLoad(b *testing.B, opts Options) *Datapath {
	b.Helper()
	if opts.Capabilities == nil {
		opts.Capabilities = []string{"flows"}
	}
	dp, err := Load(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dp.Close() })
	return dp
}

func benchCounters(b *testing.B, dp *Datapath) map[string]uint64 {
	b.Helper()
	cs, err := dp.Counters()
	if err != nil {
		b.Fatal(err)
	}
	m := make(map[string]uint64, len(cs))
	for _, c := range cs {
		m[c.Name] = c.Value
	}
	return m
}
