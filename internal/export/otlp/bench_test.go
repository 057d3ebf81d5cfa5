package otlp

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"loupe/internal/flow"
)

// benchBatch is 1000 records cycling over the test cases (IPv4/IPv6,
// TCP/UDP/ICMP/ARP...), the mix of a real eviction.
func benchBatch() []flow.Record {
	cases := records(testCases())
	batch := make([]flow.Record, 1000)
	for i := range batch {
		batch[i] = cases[i%len(cases)]
	}
	return batch
}

// BenchmarkEncode is the client's CPU per record without the network:
// encoding a request of 1000 records.
func BenchmarkEncode(b *testing.B) {
	e := testEncoder(b)
	batch := benchBatch()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = e.build(batch, t0)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/record")
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(len(buf))/float64(len(batch)), "bytes/record")
}

// BenchmarkSendToCollector is records/s through Send into the
// collector's OTLP receiver in this process (which decodes every request
// into pdata and hands it to a no-op consumer): client and receiver share
// the CPUs the benchmark runs on.
func BenchmarkSendToCollector(b *testing.B) {
	for _, comp := range []string{CompressionNone, CompressionGzip} {
		b.Run(comp, func(b *testing.B) {
			col := startCollector(b, "", collectorConfig{logConsumer: consumertest.NewNop()})
			c, err := New(col.target(), Options{Logger: quietLogger(), HostName: "node-1", Compression: comp, MetricsInterval: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close() })
			batch := benchBatch()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if failed, err := c.Send(ctx, batch); err != nil || failed != nil {
					b.Fatalf("Send: failed %d, err %v", len(failed), err)
				}
			}
			b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "records/s")
		})
	}
}
