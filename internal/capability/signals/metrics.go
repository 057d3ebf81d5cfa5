package signals

import (
	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/datapath"
)

// collector reads the signals' state and counters at scrape time. Label
// sets are bounded: three signals, the kernel's failure counters, and the
// drop reasons of the running kernel's enum.
type collector struct {
	u                                   *Unit
	events, missed                      *prometheus.Desc
	retransmits, rttSamples             *prometheus.Desc
	drops, dropBytes, drainErrs, memory *prometheus.Desc
}

func newCollector(u *Unit) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("loupe_signal_"+name, help, labels, nil)
	}
	return &collector{u: u,
		events:      d("events_total", "Kernel signal events lost or only partly attributed, by counter (bpf/signals/signals.h): a full table, a socket of another family, a dropped buffer without readable headers.", "event"),
		missed:      d("missed_events_total", "Tracepoint events the signal's program did not see because a BPF program was already running on that CPU (the kernel's recursion guard).", "signal"),
		retransmits: d("retransmits_total", "TCP segments retransmitted, all connections together (tcp_retransmit_skb)."),
		rttSamples:  d("rtt_samples_total", "Segments received by established TCP connections with an RTT estimate (tcp_probe events counted)."),
		drops:       d("drops_total", "Packets the kernel dropped, by the kernel's drop reason (kfree_skb; the unspecified reason is not counted).", "reason"),
		dropBytes:   d("drop_bytes_total", "IP length of those packets (IP header included).", "reason"),
		drainErrs:   d("drain_errors_total", "Failed reads of the signal tables."),
		memory:      d("map_memory_bytes", "Kernel memory of the signal tables (memlock accounting)."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	sig := c.u.sig
	for _, s := range datapath.AllSignals() {
		if sig == nil {
			break
		}
		if st, ok, err := sig.ProgramStats(s); ok && err == nil {
			counter(c.missed, st.RecursionMisses, s.String())
		}
	}
	t := c.u.snapshot()
	counter(c.retransmits, t.retransmits)
	counter(c.rttSamples, t.rttSamples)
	for reason, d := range t.drops {
		counter(c.drops, d.Packets, reason)
		counter(c.dropBytes, d.Bytes, reason)
	}
	counter(c.drainErrs, t.drainErrors)
	if sig == nil {
		return
	}
	if cs, err := sig.Counters(); err == nil {
		for _, ctr := range cs {
			counter(c.events, ctr.Value, ctr.Name)
		}
	} else {
		c.u.log.Warn("reading signal counters", "err", err)
	}
	if mem, err := sig.MemoryBytes(); err == nil {
		gauge(c.memory, float64(mem))
	}
}
