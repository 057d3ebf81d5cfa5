package output

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"loupe/internal/flow"
	"loupe/internal/hop"
)

// BenchmarkPipeline: what the agent does with the ring's decoded records
// under the latency benchmark's h2load run, from the stamps in to the
// records in the store's latency log: per request, three hooks of one
// node each stamp its first segment and report its trace context; the
// matcher joins them, the hop histograms observe the record, and the
// latency log writes it. 8 keep-alive connections, the agent's resolver
// (its interface table first, netlink for the link kinds, cached).
// "traced": every request carries a trace context, which each hook
// reports; "untraced": none does (h2load's requests in bench/ section
// 14), so only the stamps come.
func BenchmarkPipeline(b *testing.B) {
	for _, traced := range []bool{true, false} {
		name := "untraced"
		if traced {
			name = "traced"
		}
		b.Run(name, func(b *testing.B) { benchmarkPipeline(b, traced) })
	}
}

func benchmarkPipeline(b *testing.B, traced bool) {
	dir := filepath.Join(b.TempDir(), "store")
	cfg := hop.DefaultConfig()
	cfg.NodeName = "node-a"
	// A shorter window than the default, so that the matcher's table
	// (16384 entries) holds a window at a million stamps a second, and
	// the output's queue the records of the final Flush.
	cfg.MatchWindow = 10 * time.Millisecond
	names := map[uint32]string{1: "vpa", 2: "vxlan0", 3: "ula"}
	p, err := Open(Options{Config: cfg, StoreDir: dir, IfaceName: func(i uint32) string { return names[i] }})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const conns = 8
	var keys [conns][3]flow.Key
	for c := range keys {
		for h := range 3 {
			keys[c][h] = flow.Key{IfIndex: uint32(h + 1), Direction: flow.Egress, EtherType: flow.EtherTypeIPv4, Proto: 6,
				SrcPort: uint16(40000 + c), DstPort: 80,
				SrcAddr: netip.MustParseAddr("10.81.1.2").As16(), DstAddr: netip.MustParseAddr("10.81.2.2").As16()}
		}
		keys[c][0].Direction = flow.Ingress
	}
	// The stamps' clock: CLOCK_MONOTONIC without a system call per
	// request, which would be the benchmark's cost, not the pipeline's.
	mono0, t0 := hop.MonotonicNow(), time.Now()
	// The kernel reader hands the records over in batches (a ring read's
	// worth, up to 512 records): 32 requests' here.
	var (
		stamps []hop.Stamp
		ctxs   []hop.Context
	)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := i % conns
		seq := uint32(i/conns) * 100
		now := mono0 + uint64(time.Since(t0))
		for h := range 3 {
			stamps = append(stamps, hop.Stamp{TimeNs: now + uint64(h)*5000, Key: keys[c][h], Seq: seq, Len: 100, Kind: hop.KindRequest})
			if !traced {
				continue
			}
			ctxs = append(ctxs, hop.Context{TimeNs: now + uint64(h)*5000, Key: keys[c][h], Seq: seq,
				TraceID: [16]byte{1, 2, 3, byte(i)}, SpanID: [8]byte{4, 5, byte(i)}, Source: hop.SourceTraceparent})
		}
		if i%32 == 31 || i == b.N-1 {
			p.Batch(stamps, ctxs)
			stamps, ctxs = stamps[:0], ctxs[:0]
		}
		if i%256 == 255 {
			p.flush() // the output's Run does this every flushEvery
		}
	}
	// The table may hold as many records as the queue: empty the queue
	// before the matcher empties its table into it.
	p.flush()
	p.Matcher.Flush()
	p.flush()
	b.StopTimer()
	// A pause of the window between a request's stamps (a collection)
	// splits a few, and a pause longer than the window ends a table's
	// worth of groups at once, which the queue may not take whole: each
	// record made is stored or counted lost, and few are either.
	st, hs := p.Matcher.Stats(), p.hops.Stats()
	lost := uint64(testutil.ToFloat64(p.lost.WithLabelValues("queue_full")))
	if st.Requests < uint64(b.N)*99/100 || hs.Records+lost != st.Requests || lost > st.Requests/100 {
		b.Fatalf("%d requests, %d records, %d stored; lost %d; matcher %+v", b.N, st.Requests, hs.Records, lost, st)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/record")
	ring := 3
	if traced {
		ring = 6
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ring*b.N), "ns/ring-record")
}
