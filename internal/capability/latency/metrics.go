package latency

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector reads the kernel's counters at scrape time, and what the unit
// read from the ring. Labels are bounded: the kernel's counter names and
// two record kinds.
type collector struct {
	u                        *Unit
	up, events, records, bad *prometheus.Desc
	readErrs                 *prometheus.Desc
}

func newCollector(u *Unit) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("loupe_latency_"+name, help, labels, nil)
	}
	return &collector{u: u,
		up:       d("up", "1 when the latency capability runs at the TC hooks; 0 when the kernel refused it (the reason is in the log and loupe status)."),
		events:   d("events_total", "What the kernel's latency capability saw, by counter (bpf/latency/hop.h): requests scanned, contexts found per source, not found, not fully scanned (limit, evicted, out of order, load error, abandoned), malformed values, non-HTTP payload, scan table full, sampled segments, ring full per record kind, scans reused from the hook before on the same CPU (scan_reused), requests without a context, or with one that says its trace is not sampled, left unstamped by the untraced sampling (untraced_skipped, unsampled_skipped).", "event"),
		records:  d("records_total", "Records read from the latency ring and handed on, by kind: stamp, context.", "kind"),
		bad:      d("bad_records_total", "Records of the latency ring that did not decode."),
		readErrs: d("read_errors_total", "Failed reads of the latency ring."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	u := c.u
	up := 0.0
	if u.Up() {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	counter(c.records, u.stamps.Load(), "stamp")
	counter(c.records, u.contexts.Load(), "context")
	counter(c.bad, u.bad.Load())
	counter(c.readErrs, u.readErrs.Load())
	if !u.Up() {
		return
	}
	cs, err := u.dp.LatencyCounters()
	if err != nil {
		u.log.Warn("reading latency counters", "err", err)
		return
	}
	for _, ctr := range cs {
		counter(c.events, ctr.Value, ctr.Name)
	}
}
