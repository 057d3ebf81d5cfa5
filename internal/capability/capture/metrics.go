package capture

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector reads the datapath's capture counters and the unit's own at
// scrape time. Every label set is bounded: the datapath's counter names.
type collector struct {
	u                                  *Unit
	kernel, conns, connCap             *prometheus.Desc
	traces, packets, kept, bytes, lost *prometheus.Desc
	writeErrs, followers, followDrops  *prometheus.Desc
	files                              *prometheus.Desc
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
		conns:       d("connections", "Connections in the capture's connection table."),
		connCap:     d("connections_capacity", "Connections the table holds (capture.connections); past it the least recently seen is forgotten."),
		traces:      d("traces_total", "Traces started (a trigger fired), as read by the agent."),
		packets:     d("packets_written_total", "Captured packets the agent received and wrote to the files and followers."),
		kept:        d("kept_packets_written_total", "Of those, packets kept before their trigger."),
		bytes:       d("packet_bytes_total", "Original bytes of the captured packets."),
		lost:        d("reader_lost_total", "Packets the kernel's per-CPU capture buffer could not hold (the agent read too slowly)."),
		writeErrs:   d("write_errors_total", "Failed writes of capture files."),
		followers:   d("followers", "Clients following the capture (loupe capture --follow)."),
		followDrops: d("follower_dropped_packets_total", "Packets not sent to a follower that fell behind."),
		files:       d("files_started_total", "Capture files started."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.kernel, c.conns, c.connCap, c.traces, c.packets, c.kept, c.bytes, c.lost,
		c.writeErrs, c.followers, c.followDrops, c.files} {
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
		if cs, err := u.dp.CaptureCounters(); err == nil {
			for _, k := range cs {
				counter(c.kernel, k.Value, k.Name)
			}
		} else {
			u.log.Warn("reading capture counters", "err", err)
		}
		if n, err := u.dp.CaptureConnections(); err == nil {
			gauge(c.conns, float64(n))
		}
		gauge(c.connCap, float64(u.cfg.Connections))
	}
	counter(c.traces, u.stats.traces.Load())
	counter(c.packets, u.stats.packets.Load())
	counter(c.kept, u.stats.kept.Load())
	counter(c.bytes, u.stats.bytes.Load())
	counter(c.lost, u.stats.readerLost.Load())
	counter(c.writeErrs, u.stats.writeErrors.Load())
	gauge(c.followers, float64(u.follow.count()))
	counter(c.followDrops, u.follow.dropped.Load())
	var files uint64
	if u.files != nil {
		files = u.files.Stats().Files
	}
	counter(c.files, files)
}
