package hop

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxPairs bounds the label sets of loupe_hop_latency_seconds: a
// node has a veth per pod, so a few hundred pods give a few hundred pairs.
const DefaultMaxPairs = 512

// latencyBuckets are from 1 µs (two hooks of one host, back to back) to
// about 4 s (a queue, or two nodes far apart), by factors of 4.
var latencyBuckets = prometheus.ExponentialBuckets(1e-6, 4, 12)

// Metrics are the per-hop latency histograms and the matcher's counters,
// as Prometheus metrics. Observe is safe for concurrent use.
type Metrics struct {
	maxPairs int
	hist     *prometheus.HistogramVec
	overflow prometheus.Counter

	mu    sync.Mutex
	pairs map[[3]string]prometheus.Observer
	// recent holds the pairs observed last, looked through before the
	// map: a node's records have the same few hops, and hashing the
	// three strings of every hop was most of Observe. The names come
	// from the matcher's interface cache, so a hit compares pointers.
	recent     [8]recentPair
	recentNext int

	stats *statsCollector
}

// NewMetrics makes the metrics; stats, if not nil, is read at scrape time
// for the matcher's counters (Matcher.Stats). maxPairs <= 0 is
// DefaultMaxPairs.
func NewMetrics(maxPairs int, stats func() Stats) *Metrics {
	if maxPairs <= 0 {
		maxPairs = DefaultMaxPairs
	}
	m := &Metrics{
		maxPairs: maxPairs,
		hist: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loupe_hop_latency_seconds",
			Help:    "Time a segment took from one hook to the next on this host, by interface pair and direction (out: from a pod towards the network).",
			Buckets: latencyBuckets,
		}, []string{"from_iface", "to_iface", "direction"}),
		overflow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loupe_hop_latency_pairs_overflow_total",
			Help: "Hops not put in loupe_hop_latency_seconds because it already had latency.max_pairs interface pairs.",
		}),
		pairs: map[[3]string]prometheus.Observer{},
	}
	if stats != nil {
		m.stats = newStatsCollector(stats)
	}
	return m
}

type recentPair struct {
	k [3]string
	o prometheus.Observer
}

// Observe adds the hops of r.
func (m *Metrics) Observe(r *Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range r.Hops {
		h := &r.Hops[i]
		if o := m.observer(h); o != nil {
			o.Observe(float64(h.LatencyNs) / 1e9)
		}
	}
}

// observer is the histogram of h's pair, or nil when the pairs are at
// their bound (counted); m.mu is held.
func (m *Metrics) observer(h *Hop) prometheus.Observer {
	for i := range m.recent {
		if c := &m.recent[i]; c.o != nil && c.k[0] == h.FromIface && c.k[1] == h.ToIface && c.k[2] == h.Direction {
			return c.o
		}
	}
	k := [3]string{h.FromIface, h.ToIface, h.Direction}
	o, ok := m.pairs[k]
	if !ok {
		if len(m.pairs) >= m.maxPairs {
			m.overflow.Inc()
			return nil
		}
		o = m.hist.WithLabelValues(k[:]...)
		m.pairs[k] = o
	}
	m.recent[m.recentNext] = recentPair{k: k, o: o}
	m.recentNext = (m.recentNext + 1) % len(m.recent)
	return o
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.hist, m.overflow}
	if m.stats != nil {
		cs = append(cs, m.stats)
	}
	return cs
}

// statsCollector reads the matcher's counters at scrape time.
type statsCollector struct {
	stats                     func() Stats
	stamps, contexts, records *prometheus.Desc
	events, open              *prometheus.Desc
}

func newStatsCollector(stats func() Stats) *statsCollector {
	return &statsCollector{
		stats:    stats,
		stamps:   prometheus.NewDesc("loupe_hop_stamps_total", "Segment stamps the matcher received from the hooks.", nil, nil),
		contexts: prometheus.NewDesc("loupe_hop_contexts_total", "Trace contexts the matcher received from the hooks (one per hook that found it).", nil, nil),
		records:  prometheus.NewDesc("loupe_hop_records_total", "Segments matched across at least two hooks, by kind (request, sampled).", []string{"kind"}, nil),
		events: prometheus.NewDesc("loupe_hop_match_events_total", "What the matcher could not match, by event: incomplete (one hook only), duplicate (a hook seen twice), "+
			"evicted (finished early, table full), context_unmatched (no segment within the window), context_dropped (table full).", []string{"event"}, nil),
		open: prometheus.NewDesc("loupe_hop_table_entries", "Segments and contexts the matcher holds now (bounded by latency.table_size).", nil, nil),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	counter(c.stamps, s.Stamps)
	counter(c.contexts, s.Contexts)
	counter(c.records, s.Requests, KindNameRequest)
	counter(c.records, s.Sampled, KindNameSampled)
	counter(c.events, s.Incomplete, "incomplete")
	counter(c.events, s.Duplicates, "duplicate")
	counter(c.events, s.Evicted, "evicted")
	counter(c.events, s.ContextsUnmatched, "context_unmatched")
	counter(c.events, s.ContextsDropped, "context_dropped")
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.Open))
}
