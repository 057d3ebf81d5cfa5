package k8s

import (
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	rbacv1 "k8s.io/api/rbac/v1"
)

// Status is what the resolver says of itself (`loupe status`, once the
// agent serves it).
type Status struct {
	// Enabled is false without a cluster; Config then says why.
	Enabled bool `json:"enabled"`
	// Config is where the cluster's configuration came from: a kubeconfig
	// path or "in-cluster"; or why there is none.
	Config string `json:"config"`
	// Node is the node whose pods are watched; "" for every pod.
	Node string `json:"node,omitempty"`
	// Synced: every informer has listed its objects once.
	Synced bool `json:"synced"`
	// Connected: the API server answers. While it does not, names come
	// from the last view, and DownSince says since when.
	Connected bool       `json:"connected"`
	DownSince *time.Time `json:"down_since,omitempty"`
	Outages   uint64     `json:"outages"`
	LastError string     `json:"last_error,omitempty"`
	// Objects are the objects each informer holds, by resource.
	Objects map[string]int `json:"objects,omitempty"`
	// Addresses and Spans are the history's size: addresses with a known
	// holder now or in the last History, and their holders' time ranges.
	Addresses int           `json:"addresses"`
	Spans     int           `json:"spans"`
	History   time.Duration `json:"history_ns"`
}

// Status returns the resolver's state.
func (r *Resolver) Status() Status {
	st := Status{Enabled: r.on, Config: r.source, Node: r.node, History: r.cfg.History}
	if !r.on {
		return st
	}
	st.Addresses, st.Spans, _ = r.addrs.sizes()
	r.health.mu.Lock()
	st.Connected = !r.health.down
	if r.health.down {
		since := r.health.downSince
		st.DownSince = &since
	}
	st.Outages, st.LastError = r.health.outages, r.health.lastError
	r.health.mu.Unlock()
	select {
	case <-r.started:
		st.Synced = r.informers.synced()
		st.Objects = map[string]int{}
		for name, inf := range r.informers.all {
			st.Objects[name] = len(inf.GetStore().ListKeys())
		}
	default:
		st.Connected = false
	}
	return st
}

// PolicyRules are the read-only permissions the informers need, for the
// agent's ClusterRole: list and watch of what watch.go names, nothing more.
func PolicyRules() []rbacv1.PolicyRule {
	lw := []string{"list", "watch"}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "services", "nodes"}, Verbs: lw},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: lw},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: lw},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: lw},
	}
}

// Collector returns the resolver's Prometheus metrics, read at scrape
// time.
func (r *Resolver) Collector() prometheus.Collector { return &collector{r: r, descs: newDescs()} }

type descs struct {
	up, outages, watchErrors, addresses, spans, dropped, objects *prometheus.Desc
}

func newDescs() descs {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("loupe_kubernetes_"+name, help, labels, nil)
	}
	return descs{
		up:          d("api_up", "1 while the Kubernetes API server answers, 0 during an outage (names then come from the last view); absent when enrichment is off."),
		outages:     d("api_outages_total", "Times the Kubernetes API server stopped answering."),
		watchErrors: d("watch_errors_total", "Failed lists and watches of an informer, by resource.", "resource"),
		addresses:   d("addresses", "Addresses with a known holder now or within the history."),
		spans:       d("spans", "Time ranges of those addresses' holders."),
		dropped:     d("history_dropped_total", "Ended time ranges dropped before the history's end because an address had too many (an address reused more often than the history can keep)."),
		objects:     d("objects", "Objects an informer holds, by resource.", "resource"),
	}
}

type collector struct {
	r     *Resolver
	descs descs
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	d := c.descs
	for _, x := range []*prometheus.Desc{d.up, d.outages, d.watchErrors, d.addresses, d.spans, d.dropped, d.objects} {
		ch <- x
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if !c.r.on {
		return
	}
	d := c.descs
	st := c.r.Status()
	up := 0.0
	if st.Connected {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(d.up, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(d.outages, prometheus.CounterValue, float64(st.Outages))
	ch <- prometheus.MustNewConstMetric(d.addresses, prometheus.GaugeValue, float64(st.Addresses))
	ch <- prometheus.MustNewConstMetric(d.spans, prometheus.GaugeValue, float64(st.Spans))
	_, _, dropped := c.r.addrs.sizes()
	ch <- prometheus.MustNewConstMetric(d.dropped, prometheus.CounterValue, float64(dropped))
	for _, name := range slices.Sorted(maps.Keys(st.Objects)) {
		ch <- prometheus.MustNewConstMetric(d.objects, prometheus.GaugeValue, float64(st.Objects[name]), name)
	}
	c.r.health.mu.Lock()
	errs := maps.Clone(c.r.health.watchErrors)
	c.r.health.mu.Unlock()
	for _, name := range []string{"pods", "services", "nodes", "endpointslices", "replicasets", "jobs"} {
		ch <- prometheus.MustNewConstMetric(d.watchErrors, prometheus.CounterValue, float64(errs[name]), name)
	}
}
