package capture

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/datapath"
)

// collector reads the datapath's capture counters and the unit's own at
// scrape time. Every label set is bounded: the datapath's counter names.
type collector struct {
	u                                  *Unit
	kernel, conns, connCap, evicted    *prometheus.Desc
	traces, packets, kept, bytes, lost *prometheus.Desc
	writeErrs, followers, followDrops  *prometheus.Desc
	files, onDemandLost, late          *prometheus.Desc
	httpReqs, httpResps, httpLatency   *prometheus.Desc
}

func newCollector(u *Unit) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("loupe_capture_"+name, help, labels, nil)
	}
	return &collector{
		u: u,
		kernel: d("datapath_events_total", "What the capture datapath did, by event: segments and bytes scanned, status lines, "+
			"triggers, traces limited, packets kept, sent, lost, mirrored; and what it could not do (not_scanned_*, *_lost, "+
			"conns_table_full, kept_overwritten, mirror_errors). docs/capture.md lists them.", "event"),
		conns:        d("connections", "Connections in the capture's connection table."),
		connCap:      d("connections_capacity", "Connections the table holds (capture.connections); past it the least recently seen is forgotten."),
		evicted:      d("connections_evicted_total", "Connections the full table forgot to make room (entered minus still there: the agent never deletes one)."),
		traces:       d("traces_total", "Traces started (a trigger fired), as read by the agent."),
		packets:      d("packets_written_total", "Captured packets the agent received and wrote to the files and followers."),
		kept:         d("kept_packets_written_total", "Of those, packets kept before their trigger."),
		bytes:        d("packet_bytes_total", "Original bytes of the captured packets."),
		lost:         d("reader_lost_total", "Packets the kernel's per-CPU capture buffer could not hold (the agent read too slowly)."),
		writeErrs:    d("write_errors_total", "Failed writes of capture files."),
		followers:    d("followers", "Clients following the capture (loupe capture --follow)."),
		followDrops:  d("follower_dropped_packets_total", "Packets not sent to a follower that fell behind."),
		files:        d("files_started_total", "Capture files started."),
		onDemandLost: d("on_demand_lost_total", "Packets of on-demand captures (loupe capture --filter) that the kernel's per-CPU buffer could not hold."),
		late: d("packets_out_of_order_total", "Captured packets written behind a later one: the reader fell more than its reorder buffer "+
			"(capture.buffer_size per CPU) behind. Packets kept before a trigger are written at their own time and not counted."),
		httpReqs: prometheus.NewDesc("loupe_http_requests_total", "HTTP/1.x requests to each server, among the connections the capture follows "+
			"(a segment starting with a method; pipelined requests behind another are not counted). server=\"other\" holds servers past capture.http_max_series.",
			[]string{"server", "port"}, nil),
		httpResps: prometheus.NewDesc("loupe_http_responses_total", "HTTP/1.x responses from each server, by status class (1xx..5xx).",
			[]string{"server", "port", "class"}, nil),
		httpLatency: prometheus.NewDesc("loupe_http_response_latency_seconds", "From a request to the server's next response on the same connection, "+
			"measured at the hook (network and server time).", []string{"server", "port"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.kernel, c.conns, c.connCap, c.evicted, c.traces, c.packets, c.kept, c.bytes, c.lost,
		c.writeErrs, c.followers, c.followDrops, c.files, c.onDemandLost, c.late, c.httpReqs, c.httpResps, c.httpLatency} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	u := c.u
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	if u.dp != nil {
		var entered uint64
		if cs, err := u.dp.CaptureCounters(); err == nil {
			for _, k := range cs {
				counter(c.kernel, k.Value, k.Name)
				if k.Name == "conns_new" {
					entered = k.Value
				}
			}
		} else {
			u.log.Warn("reading capture counters", "err", err)
		}
		if n, err := u.dp.CaptureConnections(); err == nil {
			gauge(c.conns, float64(n))
			if entered >= uint64(n) {
				counter(c.evicted, entered-uint64(n))
			}
		}
		gauge(c.connCap, float64(u.cfg.Connections))
		c.collectHTTP(ch)
	}
	counter(c.traces, u.stats.traces.Load())
	counter(c.packets, u.stats.packets.Load())
	counter(c.kept, u.stats.kept.Load())
	counter(c.bytes, u.stats.bytes.Load())
	counter(c.lost, u.stats.readerLost.Load())
	counter(c.writeErrs, u.stats.writeErrors.Load())
	counter(c.onDemandLost, u.stats.onDemandLost.Load())
	counter(c.late, u.stats.late.Load())
	gauge(c.followers, float64(u.follow.count()))
	counter(c.followDrops, u.follow.dropped.Load())
	var files uint64
	if u.files != nil {
		files = u.files.Stats().Files
	}
	counter(c.files, files)
}

// httpBounds are the latency histogram's upper bounds in seconds: 1 us,
// then powers of two, as the kernel's buckets (bpf/capture/httpstats.h).
var httpBounds = func() []float64 {
	b := make([]float64, datapath.HTTPLatencyBuckets-1)
	for i := range b {
		b[i] = float64(uint64(1)<<i) / 1e6
	}
	return b
}()

func (c *collector) collectHTTP(ch chan<- prometheus.Metric) {
	stats, err := c.u.dp.HTTPStats()
	if err != nil {
		c.u.log.Warn("reading HTTP metrics", "err", err)
		return
	}
	type hist struct {
		count, sum uint64
		b          [datapath.HTTPLatencyBuckets]uint64
	}
	lat := map[datapath.HTTPServer]*hist{}
	for _, s := range stats {
		server, port := "other", "0"
		if s.Server.Addr.IsValid() {
			server, port = s.Server.Addr.String(), strconv.Itoa(int(s.Server.Port))
		}
		if s.Class == 0 {
			ch <- prometheus.MustNewConstMetric(c.httpReqs, prometheus.CounterValue, float64(s.Count), server, port)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.httpResps, prometheus.CounterValue, float64(s.Count), server, port, fmt.Sprintf("%dxx", s.Class))
		h := lat[s.Server]
		if h == nil {
			h = &hist{}
			lat[s.Server] = h
		}
		h.count += s.LatencyCount
		h.sum += s.LatencySum
		for i, n := range s.Hist {
			h.b[i] += n
		}
	}
	for srv, h := range lat {
		server, port := "other", "0"
		if srv.Addr.IsValid() {
			server, port = srv.Addr.String(), strconv.Itoa(int(srv.Port))
		}
		buckets := make(map[float64]uint64, len(httpBounds))
		var cum uint64
		for i, le := range httpBounds {
			cum += h.b[i]
			buckets[le] = cum
		}
		ch <- prometheus.MustNewConstHistogram(c.httpLatency, h.count, float64(h.sum)/1e9, buckets, server, port)
	}
}
