package rules

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	ruleset "loupe/internal/rules"
)

// collector exports what every rule id matched, since the agent started,
// under a series cap: past cfg.MaxSeries ids, the others add up under
// rule="other", so that the label set stays bounded whatever the rule
// changes.
type collector struct {
	u                                      *Unit
	packets, bytes, measured, measuredByte *prometheus.Desc
}

func newCollector(u *Unit) *collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("loupe_rule_"+name, help, []string{"rule", "action"}, nil)
	}
	return &collector{u: u,
		packets:      d("packets_total", "Packets a measurement rule decided, by rule id and action: measured, sampled or skipped alike."),
		bytes:        d("bytes_total", "Bytes of those packets (L2 length at the hook)."),
		measured:     d("measured_packets_total", "Of those packets, those counted in a flow (all for measure, 1 in N for sample, none for skip): the rest are in no flow record."),
		measuredByte: d("measured_bytes_total", "Bytes of the packets counted in a flow."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.packets
	ch <- c.bytes
	ch <- c.measured
	ch <- c.measuredByte
}

func actionName(a ruleset.Action) string {
	switch a {
	case ruleset.ActionSkip:
		return "skip"
	case ruleset.ActionSample:
		return "sample"
	case ruleset.ActionAggregate:
		return "aggregate"
	}
	return "measure"
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	_, all, err := c.u.snapshot()
	if err != nil {
		c.u.log.Warn("reading rule counters", "err", err)
		return
	}
	ids := make([]string, 0, len(all))
	for id := range all {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	type key struct{ rule, action string }
	sums := map[key]*Counts{}
	for i, id := range ids {
		t := all[id]
		k := key{id, actionName(t.action)}
		if i >= c.u.cfg.MaxSeries {
			k.rule = "other"
		}
		s := sums[k]
		if s == nil {
			s = &Counts{}
			sums[k] = s
		}
		s.Packets += t.counts.Packets
		s.Bytes += t.counts.Bytes
		s.MeasuredPackets += t.counts.MeasuredPackets
		s.MeasuredBytes += t.counts.MeasuredBytes
	}
	for k, s := range sums {
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(s.Packets), k.rule, k.action)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.Bytes), k.rule, k.action)
		ch <- prometheus.MustNewConstMetric(c.measured, prometheus.CounterValue, float64(s.MeasuredPackets), k.rule, k.action)
		ch <- prometheus.MustNewConstMetric(c.measuredByte, prometheus.CounterValue, float64(s.MeasuredBytes), k.rule, k.action)
	}
}
