// Package kubernetes is the unit of the Kubernetes names: it runs the
// resolver (internal/k8s) for the agent's lifetime and says in `loupe
// status` and the metrics whether it watches a cluster, has synced, and
// whether the API server is in an outage. The flows unit asks the same
// resolver for the names of each record it evicts (flows.SetNamer).
//
// It has no kernel half. Without a cluster (no kubeconfig, no in-cluster
// configuration) it runs nothing and reports itself off.
//
// Configuration: kubernetes.* (k8s.Config).
package kubernetes

import (
	"context"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/capability"
	"loupe/internal/k8s"
)

// Name is the unit's name in `loupe status`.
const Name = "kubernetes"

// Unit runs a resolver.
type Unit struct {
	r     *k8s.Resolver
	state atomic.Value // string
}

var (
	_ capability.Unit       = (*Unit)(nil)
	_ capability.Standalone = (*Unit)(nil)
)

// New returns the unit of r.
func New(r *k8s.Resolver) *Unit {
	u := &Unit{r: r}
	u.state.Store("starting")
	if !r.On() {
		u.state.Store("off")
	}
	return u
}

// Standalone implements capability.Standalone: nothing runs at the hooks.
func (u *Unit) Standalone() {}

// Name implements capability.Unit.
func (u *Unit) Name() string { return Name }

// Open implements capability.Unit: the resolver contacts the cluster
// in Run, so that an unreachable API server never stops the start.
func (u *Unit) Open(*capability.Host) error { return nil }

// Run runs the resolver until ctx is done. The resolver keeps its view
// afterwards: the flows unit's final eviction still names its records.
func (u *Unit) Run(ctx context.Context) error {
	if !u.r.On() {
		return nil
	}
	u.state.Store("running")
	err := u.r.Run(ctx)
	u.state.Store("stopped")
	return err
}

// Close implements capability.Unit.
func (u *Unit) Close() error { return nil }

// Collectors implements capability.Unit: loupe_kubernetes_*, none when
// off.
func (u *Unit) Collectors() []prometheus.Collector { return []prometheus.Collector{u.r.Collector()} }

// Status implements capability.Unit: the resolver's status (k8s.Status)
// as the detail.
func (u *Unit) Status() capability.Status {
	st := u.r.Status()
	d := map[string]any{"config": st.Config}
	if st.Enabled {
		d["node"] = st.Node
		d["synced"] = st.Synced
		d["connected"] = st.Connected
		d["outages"] = st.Outages
		d["addresses"] = st.Addresses
		d["spans"] = st.Spans
		d["history"] = st.History.String()
		if st.DownSince != nil {
			d["down_since"] = st.DownSince
		}
		if st.LastError != "" {
			d["last_error"] = st.LastError
		}
		if st.Objects != nil {
			d["objects"] = st.Objects
		}
	}
	return capability.Status{Name: Name, Enabled: st.Enabled, State: u.state.Load().(string), Detail: d}
}
