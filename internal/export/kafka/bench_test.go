package kafka

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"loupe/internal/export/delivery"
	"loupe/internal/flow"
	kafkapeer "loupe/internal/testutil/kafka"
)

// cpuTime is the CPU time this process (not the broker, a child) used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// topicBytes is the size of topic's log on the broker's disk.
func topicBytes(b *testing.B, br *kafkapeer.Broker, topic string) int64 {
	cl, err := kgo.NewClient(br.ClientOpts()...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dirs, err := kadm.NewClient(cl).DescribeAllLogDirs(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Topic == topic {
				n += p.Size
			}
		})
	})
	return n
}

// BenchmarkSend measures records/s through the Client into a real broker
// (topic of 4 partitions, batches of 4096 records as the delivery queue
// hands them, 10 000 distinct flows), the CPU the agent's side spends per
// record (cpu-ns/record: this process only, the broker excluded) and the
// log size on the broker per record (disk-B/record: compression).
// Run it on one core:
//
//	GOMAXPROCS=1 go test -run '^$' -bench BenchmarkSend -benchtime 400000x ./internal/export/kafka/
func BenchmarkSend(b *testing.B) {
	br := kafkapeer.Start(b)
	recs := testRecords(10000, 4)
	for _, cfg := range []struct {
		format      Format
		compression string
		linger      time.Duration
	}{
		{FormatProtobuf, "none", 0},
		{FormatProtobuf, "lz4", 0},
		{FormatProtobuf, "zstd", 0},
		{FormatProtobuf, "snappy", 0},
		{FormatProtobuf, "gzip", 0},
		{FormatProtobuf, "zstd", 5 * time.Millisecond},
		{FormatProtobuf, "zstd", 10 * time.Millisecond},
		{FormatProtobuf, "zstd", 20 * time.Millisecond},
		{FormatJSON, "lz4", 0},
		{FormatJSON, "zstd", 0},
	} {
		name := fmt.Sprintf("%s/%s/linger=%s", cfg.format, cfg.compression, cfg.linger)
		topic := fmt.Sprintf("bench-%s-%s-%d", cfg.format, cfg.compression, cfg.linger.Milliseconds())
		br.CreateTopic(b, topic, 4)
		b.Run(name, func(b *testing.B) {
			c, err := New(fmt.Sprintf("kafka://%s/%s?format=%s", br.Addr(), topic, cfg.format),
				Options{Compression: cfg.compression, Linger: cfg.linger})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			const batchSize = 4096
			batch := make([]flow.Record, 0, batchSize)
			ctx := context.Background()
			cpu0, start := cpuTime(b), time.Now()
			disk0 := topicBytes(b, br, topic)
			b.ResetTimer()
			for i := 0; i < b.N; {
				n := min(batchSize, b.N-i)
				batch = batch[:0]
				for j := range n {
					batch = append(batch, recs[(i+j)%len(recs)])
				}
				if failed, err := c.Send(ctx, batch); err != nil || len(failed) > 0 {
					b.Fatalf("%d failed: %v", len(failed), err)
				}
				i += n
			}
			b.StopTimer()
			elapsed, cpu := time.Since(start), cpuTime(b)-cpu0
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
			b.ReportMetric(float64(topicBytes(b, br, topic)-disk0)/float64(b.N), "disk-B/record")
		})
	}
}

// BenchmarkQueue is BenchmarkSend's default configuration through the
// delivery queue with its default options, written to in evictions of
// 4096 records, as the agent does.
func BenchmarkQueue(b *testing.B) {
	br := kafkapeer.Start(b)
	recs := testRecords(10000, 4)
	br.CreateTopic(b, "bench-queue", 4)
	c, err := New(fmt.Sprintf("kafka://%s/bench-queue", br.Addr()), Options{})
	if err != nil {
		b.Fatal(err)
	}
	q := delivery.New("kafka", c, delivery.Options{QueueSize: 1 << 20})
	defer q.Close()
	ctx := context.Background()
	const chunk = 4096
	batch := make([]flow.Record, 0, chunk)
	base := q.Stats().Sent
	cpu0, start := cpuTime(b), time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; {
		n := min(chunk, b.N-i)
		batch = batch[:0]
		for j := range n {
			batch = append(batch, recs[(i+j)%len(recs)])
		}
		if err := q.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
		i += n
		// Wait for the queue like a steady eviction rate would: never
		// more than 16 evictions ahead, so that nothing is dropped.
		for q.Stats().Queued > 16*chunk {
			time.Sleep(time.Millisecond)
		}
	}
	_ = q.Flush(ctx)
	for deadline := time.Now().Add(time.Minute); q.Stats().Sent-base < uint64(b.N); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d records delivered: %+v", q.Stats().Sent-base, b.N, q.Stats())
		}
	}
	b.StopTimer()
	elapsed, cpu := time.Since(start), cpuTime(b)-cpu0
	if st := q.Stats(); st.Dropped() != 0 {
		b.Fatalf("dropped %d", st.Dropped())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
}
