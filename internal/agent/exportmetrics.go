package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/export/delivery"
)

// exportCollector exposes the delivery counters of every network exporter.
// The exporter label is the target as configured, so its values are
// bounded by the configuration.
type exportCollector struct {
	queues []*delivery.Queue

	queued, capacity, sent, dropped, batches, sendErrs, connected, unreachable *prometheus.Desc
}

func newExportCollector(queues []*delivery.Queue) *exportCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("loupe_export_"+name, help, append([]string{"exporter"}, labels...), nil)
	}
	return &exportCollector{
		queues:      queues,
		queued:      d("queue_records", "Flow records waiting for delivery, the batch being sent included."),
		capacity:    d("queue_capacity_records", "Flow records the exporter's queue holds at most (delivery.queue_size)."),
		sent:        d("sent_records_total", "Flow records the collector accepted."),
		dropped:     d("dropped_records_total", "Flow records given up, by reason: queue_full (collector too slow or away), rejected (the collector refused them), shutdown (not delivered by the shutdown deadline).", "reason"),
		batches:     d("batches_total", "Batches delivered."),
		sendErrs:    d("send_errors_total", "Failed sends; each is retried with back-off."),
		connected:   d("connected", "1 while the exporter holds a connection to its collector; for UDP, while its last sends drew no ICMP error from the collector's host."),
		unreachable: d("unreachable_total", "Times the collector's host refused the exporter (ICMP port unreachable over UDP, a TCP connection refused or without a route); the records of a refused send are retried, not counted as sent."),
	}
}

func (c *exportCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *exportCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.queues {
		st := q.Stats()
		metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, l ...string) {
			ch <- prometheus.MustNewConstMetric(d, t, v, append([]string{st.Name}, l...)...)
		}
		metric(c.queued, prometheus.GaugeValue, float64(st.Queued))
		metric(c.capacity, prometheus.GaugeValue, float64(st.Capacity))
		metric(c.sent, prometheus.CounterValue, float64(st.Sent))
		metric(c.dropped, prometheus.CounterValue, float64(st.DroppedQueueFull), delivery.ReasonQueueFull)
		metric(c.dropped, prometheus.CounterValue, float64(st.DroppedRejected), delivery.ReasonRejected)
		metric(c.dropped, prometheus.CounterValue, float64(st.DroppedShutdown), delivery.ReasonShutdown)
		metric(c.batches, prometheus.CounterValue, float64(st.Batches))
		metric(c.sendErrs, prometheus.CounterValue, float64(st.SendErrors))
		if st.Connected >= 0 {
			metric(c.connected, prometheus.GaugeValue, float64(st.Connected))
		}
		if st.HasUnreachable {
			metric(c.unreachable, prometheus.CounterValue, float64(st.Unreachable))
		}
	}
}
