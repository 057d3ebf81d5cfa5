package dns

import (
	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/datapath"
)

// collector reads the signals' state, the kernel's counters and histograms
// at scrape time. Label sets are bounded: the kernel's counter names and
// the 16 response codes the DNS header holds.
// Whether each signal runs is loupe_signal_up{signal}, which the agent
// serves for every unit's signals (SignalsUp).
type collector struct {
	u                                  *Unit
	dnsEvents, dnsResponses            *prometheus.Desc
	dnsLatency, dnsTimeouts, drainErrs *prometheus.Desc
	hsEvents, hsRTT                    *prometheus.Desc
}

func newCollector(u *Unit) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("loupe_"+name, help, labels, nil)
	}
	return &collector{u: u,
		dnsEvents:    d("dns_events_total", "DNS messages seen at the TC hooks and what became of them, by counter (bpf/dns/dns.h): queries, responses, matched and unmatched, full tables, messages not parsed and why.", "event"),
		dnsResponses: d("dns_responses_total", "DNS responses seen at the TC hooks, by response code.", "rcode"),
		dnsLatency:   d("dns_latency_seconds", "Time from a DNS query to its response at the TC hook, for every response matched to its query."),
		dnsTimeouts:  d("dns_timeouts_total", "DNS queries without a response within dns.timeout."),
		drainErrs:    d("dns_drain_errors_total", "Failed reads of the DNS and handshake result tables."),
		hsEvents:     d("handshake_events_total", "TCP handshakes seen at the TC hooks and what became of them, by counter (bpf/handshake/handshake.h).", "event"),
		hsRTT:        d("handshake_rtt_seconds", "RTT of every TCP handshake timed at the TC hooks: SYN to SYN-ACK plus SYN-ACK to ACK."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	hist := func(d *prometheus.Desc, h datapath.LatencyHist) {
		ch <- prometheus.MustNewConstHistogram(d, h.Count, float64(h.SumNs)/1e9, h.Cumulative())
	}
	u := c.u
	t := u.snapshot()
	counter(c.dnsTimeouts, t.timeouts)
	counter(c.drainErrs, t.drainErrors)
	if u.Up(SignalDNS) {
		if cs, err := u.dp.DNSCounters(); err == nil {
			for _, ctr := range cs {
				counter(c.dnsEvents, ctr.Value, ctr.Name)
			}
		} else {
			u.log.Warn("reading DNS counters", "err", err)
		}
		if st, err := u.dp.DNSStats(); err == nil {
			for code, n := range st.Rcodes {
				counter(c.dnsResponses, n, datapath.RcodeName(uint8(code)))
			}
			hist(c.dnsLatency, st.Latency)
		} else {
			u.log.Warn("reading DNS statistics", "err", err)
		}
	}
	if u.Up(SignalHandshakeRTT) {
		if cs, err := u.dp.HandshakeCounters(); err == nil {
			for _, ctr := range cs {
				counter(c.hsEvents, ctr.Value, ctr.Name)
			}
		} else {
			u.log.Warn("reading handshake counters", "err", err)
		}
		if h, err := u.dp.HandshakeStats(); err == nil {
			hist(c.hsRTT, h)
		} else {
			u.log.Warn("reading handshake statistics", "err", err)
		}
	}
}
