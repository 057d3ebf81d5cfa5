package k8s_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/k8s"
	"loupe/internal/testutil/kubeapi"
)

// TestAPIServerOutage stops the API server mid-run. The resolver keeps
// naming from its last view and reports the outage (status and metrics);
// meanwhile the cluster changes through another API server on the same
// etcd (a pod deleted and its IP given to a new pod, another pod created);
// when its API server is back, the resolver reports it and catches up with
// those changes, and the records counted before the outage still name the
// pods that were there.
func TestAPIServerOutage(t *testing.T) {
	c := kubeapi.Start(t)
	o := c.Objects(t)
	o.Node(thisNode, nodeAIP)
	o.Namespace("lk8-shop")
	web := o.Workload("ReplicaSet", "lk8-shop", "web-7d9f", o.Workload("Deployment", "lk8-shop", "web", nil))
	db := o.Workload("StatefulSet", "lk8-shop", "db", nil)
	o.Pod(kubeapi.Pod{Namespace: "lk8-shop", Name: "web-7d9f-aaaa", Node: thisNode, IP: "10.244.1.30", Owner: web, NetworkReady: time.Now()})
	r := startResolver(t, c, k8s.Options{ProbeInterval: 200 * time.Millisecond})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r.Collector())

	webPod := pod("lk8-shop", "web-7d9f-aaaa", "Deployment", "web", "", thisNode)
	waitNames(t, r, "10.244.1.30", webPod)
	checkMetric(t, reg, "loupe_kubernetes_api_up", 1)
	beforeOutage := time.Now()

	c.StopAPIServer()
	eventually(t, 10*time.Second, func() (bool, string) {
		st := r.Status()
		return !st.Connected && st.DownSince != nil && st.Outages == 1,
			fmt.Sprintf("status during the outage: %+v", st)
	})
	checkMetric(t, reg, "loupe_kubernetes_api_up", 0)
	checkMetric(t, reg, "loupe_kubernetes_api_outages_total", 1)
	if got := r.Resolve(addr(t, "10.244.1.30"), time.Now()); got != webPod {
		t.Errorf("during the outage: %+v, want the last view's %+v", got, webPod)
	}
	if st := r.Status(); st.LastError == "" || st.Objects["pods"] != 1 {
		t.Errorf("status during the outage: %+v, want an error and the pod kept", st)
	}

	// The cluster changes while this resolver's API server is down.
	spare, stopSpare := c.Spare(t)
	so := kubeapi.NewObjects(t, spare)
	so.DeletePod("lk8-shop", "web-7d9f-aaaa")
	so.Pod(kubeapi.Pod{Namespace: "lk8-shop", Name: "db-0", Node: thisNode, IP: "10.244.1.30", Owner: db, NetworkReady: time.Now()})
	so.Pod(kubeapi.Pod{Namespace: "lk8-shop", Name: "web-7d9f-bbbb", Node: thisNode, IP: "10.244.1.31", Owner: web, NetworkReady: time.Now()})
	stopSpare()
	if got := r.Resolve(addr(t, "10.244.1.31"), time.Now()); got.Kind != k8s.KindExternal {
		t.Errorf("a pod created during the outage is known before the API server is back: %+v", got)
	}

	c.RestartAPIServer(t)
	back := time.Now()
	// The informers retry with a backoff of up to 30 s.
	eventually(t, 90*time.Second, func() (bool, string) {
		st := r.Status()
		n30 := r.Resolve(addr(t, "10.244.1.30"), time.Now())
		n31 := r.Resolve(addr(t, "10.244.1.31"), time.Now())
		return st.Connected && st.Synced && n30.Pod == "db-0" && n31.Pod == "web-7d9f-bbbb",
			fmt.Sprintf("after the restart: status %+v, 10.244.1.30 %+v, 10.244.1.31 %+v", st, n30, n31)
	})
	t.Logf("caught up %s after the API server was back", time.Since(back).Round(time.Millisecond))
	checkMetric(t, reg, "loupe_kubernetes_api_up", 1)
	if n := metricValue(t, reg, "loupe_kubernetes_api_outages_total", ""); n != 1 {
		t.Errorf("%g outages, want 1; status %+v", n, r.Status())
	}
	if got, want := r.Resolve(addr(t, "10.244.1.30"), time.Now()), pod("lk8-shop", "db-0", "StatefulSet", "db", "", thisNode); got != want {
		t.Errorf("10.244.1.30 now: %+v, want %+v", got, want)
	}
	if got := r.Resolve(addr(t, "10.244.1.30"), beforeOutage); got != webPod {
		t.Errorf("a record counted before the outage: %+v, want %+v", got, webPod)
	}
	if st := r.Status(); st.DownSince != nil || st.Objects["pods"] != 2 {
		t.Errorf("status after the outage: %+v, want no down_since and 2 pods", st)
	}
	var errs float64
	for _, res := range []string{"pods", "services", "nodes", "endpointslices", "replicasets", "jobs"} {
		errs += metricValue(t, reg, "loupe_kubernetes_watch_errors_total", res)
	}
	if errs == 0 {
		t.Error("no watch error counted across the outage")
	}
}

// checkMetric compares the value of a metric without labels.
func checkMetric(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	if got := metricValue(t, reg, name, ""); got != want {
		t.Errorf("%s = %g, want %g", name, got, want)
	}
}

// metricValue returns the value of the series of name whose resource
// label is res ("": the series without labels), or fails the test.
func metricValue(t *testing.T, reg *prometheus.Registry, name, res string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource" {
					got = l.GetValue()
				}
			}
			if got != res {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{resource=%q}", name, res)
	return 0
}

// TestRefused: without the role, the API server answers but refuses every
// watch. That is no outage: the status says connected, not synced, and
// why.
func TestRefused(t *testing.T) {
	c := kubeapi.Start(t)
	cfg := k8s.DefaultConfig()
	cfg.Kubeconfig = c.Kubeconfig(t)
	r, err := k8s.New(cfg, k8s.Options{ProbeInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, 10*time.Second, func() (bool, string) {
		st := r.Status()
		return st.Connected && !st.Synced && st.Outages == 0 && strings.Contains(st.LastError, "forbidden"),
			fmt.Sprintf("status without a role: %+v", st)
	})
}
