package agent

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/attach"
	"loupe/internal/capability"
	"loupe/internal/datapath"
)

// healthCollector reads the host's counters at scrape time: the attach
// manager's and the datapath's (maps, anomaly counters, pins); each
// capability serves its own (capability.Unit.Collectors). All label sets are
// bounded: counter names, attach modes, map kinds.
type healthCollector struct {
	dp  *datapath.Datapath
	mgr *attach.Manager
	log *slog.Logger

	attached, attachOps, attachErrs, resyncs, mode *prometheus.Desc
	memory, dpEvents, droppedPkts, droppedB        *prometheus.Desc
	pinned, scrapeErr                              *prometheus.Desc
}

func newHealthCollector(dp *datapath.Datapath, mgr *attach.Manager, log *slog.Logger) *healthCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("loupe_"+name, help, labels, nil)
	}
	return &healthCollector{
		dp: dp, mgr: mgr, log: log,
		attached:    d("interfaces_attached", "Interfaces the flow programs are attached to."),
		attachOps:   d("attach_operations_total", "Successful attach and detach operations.", "op"),
		attachErrs:  d("attach_errors_total", "Failed attach or detach operations."),
		resyncs:     d("netlink_resyncs_total", "Link subscriptions restarted after an error (interfaces re-listed)."),
		mode:        d("attach_mode_info", "The attach mechanism in use.", "mode"),
		memory:      d("bpf_map_memory_bytes", "Kernel memory of the datapath's maps (memlock accounting).", "map"),
		dpEvents:    d("datapath_events_total", "Datapath anomalies and failures, by counter (bpf/lib/counters.h).", "event"),
		droppedPkts: d("dropped_packets_total", "Packets the agent could not account in any flow (ring buffer full)."),
		droppedB:    d("dropped_bytes_total", "Bytes of dropped_packets_total."),
		pinned:      d("datapath_pinned", "1 when the flow tables, counters, ring buffer and links are pinned under pin_dir and outlive a crash of the agent; 0 when the agent runs unpinned (no bpf file system, pin_dir none)."),
		scrapeErr:   d("scrape_errors", "Errors reading component state during this scrape.", "component"),
	}
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}

	as := c.mgr.Stats()
	gauge(c.attached, float64(as.Attached))
	counter(c.attachOps, as.Attaches, "attach")
	counter(c.attachOps, as.Detaches, "detach")
	counter(c.attachErrs, as.Errors)
	counter(c.resyncs, as.Resyncs)
	gauge(c.mode, 1, as.Mode.String())

	pinned := 0.0
	if c.dp.Pinned() {
		pinned = 1
	}
	gauge(c.pinned, pinned)

	scrapeErrs := map[string]uint64{"datapath": 0}
	if total, tables, err := c.dp.MemoryBytes(); err == nil {
		gauge(c.memory, float64(tables), "flow_tables")
		gauge(c.memory, float64(total), "all")
	} else {
		scrapeErrs["datapath"]++
	}
	if cs, err := c.dp.Counters(); err == nil {
		for _, ctr := range cs {
			switch ctr.Name {
			case "lost_packets":
				counter(c.droppedPkts, ctr.Value)
			case "lost_bytes":
				counter(c.droppedB, ctr.Value)
			default:
				counter(c.dpEvents, ctr.Value, ctr.Name)
			}
		}
	} else {
		scrapeErrs["datapath"]++
		c.log.Warn("reading datapath counters", "err", err)
	}
	for comp, n := range scrapeErrs {
		gauge(c.scrapeErr, float64(n), comp)
	}
}

// signalCollector serves loupe_signal_up{signal} for the signals of every
// unit that runs some (capability.SignalReporter): the tracepoint signals
// and the TC hooks' DNS and handshake RTT alike.
type signalCollector struct {
	units []capability.SignalReporter
	up    *prometheus.Desc
}

func newSignalCollector(units []capability.Unit) *signalCollector {
	c := &signalCollector{up: prometheus.NewDesc("loupe_signal_up",
		"1 when the signal runs; 0 when the configuration turned it off or the kernel refused it (the reason is in the log and loupe status).",
		[]string{"signal"}, nil)}
	for _, u := range units {
		if r, ok := u.(capability.SignalReporter); ok {
			c.units = append(c.units, r)
		}
	}
	return c
}

func (c *signalCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.up }

func (c *signalCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.units {
		for name, on := range u.SignalsUp() {
			v := 0.0
			if on {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, v, name)
		}
	}
}
