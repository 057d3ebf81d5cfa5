package hop

import (
	"testing"
	"time"

	"loupe/internal/flow"
)

// BenchmarkMatcherStamp: the stamps of keep-alive HTTP requests at three
// hooks of one node, 8 connections, a request every 50 µs on each, with
// the default window: the pattern of the latency benchmark's h2load run,
// where every connection holds a window's worth of segments at once.
func BenchmarkMatcherStamp(b *testing.B) {
	var mono uint64 = 1e9
	m := NewMatcher(Options{
		Resolver: ResolverFunc(func(i uint32) Iface { return testIfaces[i] }),
		MonoNow:  func() uint64 { return mono },
		WallNow:  func() time.Time { return time.Unix(1700000000, int64(mono)) },
	})
	const conns = 8
	keys := make([][3]flow.Key, conns)
	for c := range keys {
		for h := range 3 {
			k := key(uint32(h+1), flow.Ingress)
			k.SrcPort = uint16(40000 + c)
			keys[c][h] = k
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := i % conns
		seq := uint32(i/conns) * 100
		for h := range 3 {
			m.Stamp(Stamp{TimeNs: mono, Key: keys[c][h], Seq: seq, Len: 100, Kind: KindRequest})
		}
		mono += uint64(50 * time.Microsecond / conns)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(3*b.N), "ns/stamp")
}
