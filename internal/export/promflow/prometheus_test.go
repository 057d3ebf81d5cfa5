package promflow

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"loupe/internal/export/promflow/promtest"
)

// TestRealPrometheus: a real Prometheus scrapes the sink after 100 000
// distinct flows (dst_port makes their label sets distinct), then again
// after the same flows once more. What it stores must respect the cap,
// add up to what was written, and count the folded records exactly.
func TestRealPrometheus(t *testing.T) {
	const flows = 100_000
	s := New(Options{Keys: []Key{KeyDstPort}, Logger: slog.New(slog.DiscardHandler)}) // MaxSeries: default 4096
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("metrics server: %v", err)
		}
	})

	recs := distinctFlows(flows)
	var packets, bytes, segments, wireBytes float64
	for _, r := range recs {
		packets += float64(r.Packets)
		bytes += float64(r.Bytes)
		segments += float64(r.Segments)
		wireBytes += float64(r.WireBytes)
	}
	writeAll := func() {
		for i := 0; i < flows; i += 65536 {
			write(t, s, recs[i:min(i+65536, flows)]...)
		}
		flush(t, s)
	}
	writeAll()
	t0 := time.Now()
	// 16 000 series: a scrape takes more than a second on a loaded machine.
	prom := promtest.Start(t, promtest.Config{Targets: []string{ln.Addr().String()}, ScrapeInterval: 5 * time.Second})
	prom.WaitScraped(t0, 30*time.Second)

	check := func(round float64) {
		t.Helper()
		for _, c := range []struct {
			expr string
			want float64
		}{
			{`count(loupe_traffic_bytes_total)`, DefaultMaxSeries},
			{`count(loupe_traffic_packets_total)`, DefaultMaxSeries},
			{`count(loupe_traffic_segments_total)`, DefaultMaxSeries},
			{`count(loupe_traffic_wire_bytes_total)`, DefaultMaxSeries},
			{`count(loupe_traffic_packets_total{iface="other",proto="other",dst_port="other"})`, 2},
			{`count(loupe_traffic_wire_bytes_total{iface="other",proto="other",dst_port="other"})`, 2},
			{`sum(loupe_traffic_bytes_total)`, round * bytes},
			{`sum(loupe_traffic_packets_total)`, round * packets},
			{`sum(loupe_traffic_segments_total)`, round * segments},
			{`sum(loupe_traffic_wire_bytes_total)`, round * wireBytes},
			// The same label sets in every counter, the fold series too.
			{`count(loupe_traffic_segments_total and on(iface, direction, proto, dst_port) loupe_traffic_packets_total)`, DefaultMaxSeries},
			{`loupe_traffic_series_folded_total`, round * (flows - (DefaultMaxSeries - 2))},
			{`loupe_traffic_series`, DefaultMaxSeries},
			{`loupe_traffic_series_limit`, DefaultMaxSeries},
		} {
			if got := prom.Scalar(c.expr); got != c.want {
				t.Errorf("round %v: %s = %v, want %v", round, c.expr, got, c.want)
			}
		}
	}
	check(1)

	writeAll()
	t1 := time.Now()
	prom.WaitScraped(t1, 30*time.Second)
	check(2)
	// The counters only grew between the rounds: Prometheus saw no reset.
	if got := prom.Scalar(`sum(resets(loupe_traffic_bytes_total[5m]))`); got != 0 {
		t.Errorf("Prometheus saw %v counter resets", got)
	}
}
