package k8s_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"loupe/internal/k8s"
	"loupe/internal/testutil/kubeapi"
)

// The cluster every test builds: two nodes, this one (lk8-node-a) and
// another; pod IPs in 10.244.1.0/24 on this node and 10.244.2.0/24 on the
// other; services in the harness's 10.0.0.0/16. No packet is sent to any of
// these addresses: they are data in the API server.
const (
	thisNode  = "lk8-node-a"
	otherNode = "lk8-node-b"
	nodeAIP   = "192.0.2.10"
	nodeBIP   = "192.0.2.11"
)

// startResolver starts a resolver as the agent's user, with the role
// PolicyRules declares and nothing more, on this node, and waits until its
// informers have synced.
func startResolver(t *testing.T, c *kubeapi.Cluster, opts k8s.Options) *k8s.Resolver {
	t.Helper()
	c.Objects(t).GrantAgent(k8s.PolicyRules())
	cfg := k8s.DefaultConfig()
	cfg.Kubeconfig = c.Kubeconfig(t)
	cfg.NodeName = thisNode
	r, err := k8s.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !r.On() {
		t.Fatal("resolver off with a kubeconfig")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return 30 s after its context ended")
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if !r.WaitSynced(wctx) {
		t.Fatalf("informers not synced after 30 s: %+v", r.Status())
	}
	return r
}

func addr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// eventually polls cond every 20 ms until it holds or timeout passes; then
// it fails the test with cond's last word.
func eventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitNames waits until ip resolves, now, to want.
func waitNames(t *testing.T, r *k8s.Resolver, ip string, want k8s.Names) {
	t.Helper()
	a := addr(t, ip)
	eventually(t, 20*time.Second, func() (bool, string) {
		got := r.Resolve(a, time.Now())
		return got == want, fmt.Sprintf("%s resolves to %+v, want %+v", ip, got, want)
	})
}

func pod(ns, name, wkind, wname, service, node string) k8s.Names {
	return k8s.Names{Kind: k8s.KindPod, Namespace: ns, Pod: name, WorkloadKind: wkind, Workload: wname, Service: service, Node: node}
}

// TestResolve builds a small cluster (a Deployment's ReplicaSet and pods
// on two nodes, a StatefulSet's, a CronJob's Job's, a bare pod, a
// hostNetwork DaemonSet pod, two services on one pod, a NodePort, a
// headless service) and checks each address's names field by field.
func TestResolve(t *testing.T) {
	c := kubeapi.Start(t)
	o := c.Objects(t)
	o.Node(thisNode, nodeAIP)
	o.Node(otherNode, nodeBIP)
	o.Namespace("lk8-shop")
	o.Namespace("lk8-batch")

	deploy := o.Workload("Deployment", "lk8-shop", "web", nil)
	rs := o.Workload("ReplicaSet", "lk8-shop", "web-7d9f", deploy)
	sts := o.Workload("StatefulSet", "lk8-shop", "db", nil)
	ds := o.Workload("DaemonSet", "lk8-shop", "agent", nil)
	cron := o.Workload("CronJob", "lk8-batch", "report", nil)
	job := o.Workload("Job", "lk8-batch", "report-2901", cron)
	lone := o.Workload("ReplicaSet", "lk8-batch", "lone", nil)

	ready := time.Now()
	o.Pod(kubeapi.Pod{Namespace: "lk8-shop", Name: "web-7d9f-aaaa", Node: thisNode, IP: "10.244.1.10", Owner: rs, NetworkReady: ready})
	o.Pod(kubeapi.Pod{Namespace: "lk8-shop", Name: "web-7d9f-bbbb", Node: otherNode, IP: "10.244.2.10", Owner: rs, NetworkReady: ready})
	o.Pod(kubeapi.Pod{Namespace: "lk8-shop", Name: "db-0", Node: thisNode, IP: "10.244.1.11", Owner: sts})
	o.Pod(kubeapi.Pod{Namespace: "lk8-shop", Name: "agent-x1", Node: thisNode, IP: nodeAIP, HostNetwork: true, Owner: ds})
	o.Pod(kubeapi.Pod{Namespace: "lk8-batch", Name: "report-2901-cccc", Node: thisNode, IP: "10.244.1.12", Owner: job})
	o.Pod(kubeapi.Pod{Namespace: "lk8-batch", Name: "lone-dddd", Node: thisNode, IP: "10.244.1.14", Owner: lone})
	o.Pod(kubeapi.Pod{Namespace: "lk8-batch", Name: "debug", Node: thisNode, IP: "10.244.1.13"})
	o.Pod(kubeapi.Pod{Namespace: "lk8-batch", Name: "pending", Node: thisNode})

	o.Service(kubeapi.Service{Namespace: "lk8-shop", Name: "web", ClusterIP: "10.0.0.50", Port: 8080, NodePort: 30080})
	o.Service(kubeapi.Service{Namespace: "lk8-shop", Name: "web-admin", ClusterIP: "10.0.0.51", Port: 9090})
	o.Service(kubeapi.Service{Namespace: "lk8-shop", Name: "db", ClusterIP: "None", Port: 5432})
	o.EndpointSlice("lk8-shop", "web-abcde", "web", 8080,
		kubeapi.Endpoint{IP: "10.244.1.10", Pod: "web-7d9f-aaaa", Node: thisNode},
		kubeapi.Endpoint{IP: "10.244.2.10", Pod: "web-7d9f-bbbb", Node: otherNode})
	o.EndpointSlice("lk8-shop", "web-admin-fghij", "web-admin", 9090,
		kubeapi.Endpoint{IP: "10.244.1.10", Pod: "web-7d9f-aaaa", Node: thisNode})
	o.EndpointSlice("lk8-shop", "db-klmno", "db", 5432,
		kubeapi.Endpoint{IP: "10.244.1.11", Pod: "db-0", Node: thisNode})

	r := startResolver(t, c, k8s.Options{})
	// Every object was written before the resolver started: once synced,
	// it knows them all.
	cases := []struct {
		ip   string
		port uint16
		want k8s.Names
	}{
		// A Deployment's pod of this node, endpoint of two services: the
		// first by name without a port, the one serving the port with it.
		{"10.244.1.10", 0, pod("lk8-shop", "web-7d9f-aaaa", "Deployment", "web", "web", thisNode)},
		{"10.244.1.10", 8080, pod("lk8-shop", "web-7d9f-aaaa", "Deployment", "web", "web", thisNode)},
		{"10.244.1.10", 9090, pod("lk8-shop", "web-7d9f-aaaa", "Deployment", "web", "web-admin", thisNode)},
		// The same Deployment's pod on the other node: its object is not
		// watched (the field selector), so its name and node come from
		// the EndpointSlice, and its workload is unknown.
		{"10.244.2.10", 0, pod("lk8-shop", "web-7d9f-bbbb", "", "", "web", otherNode)},
		{"10.244.1.11", 0, pod("lk8-shop", "db-0", "StatefulSet", "db", "db", thisNode)},
		{"10.244.1.12", 0, pod("lk8-batch", "report-2901-cccc", "CronJob", "report", "", thisNode)},
		{"10.244.1.14", 0, pod("lk8-batch", "lone-dddd", "ReplicaSet", "lone", "", thisNode)},
		{"10.244.1.13", 0, pod("lk8-batch", "debug", "", "", "", thisNode)},
		// The hostNetwork pod's address is its node's.
		{nodeAIP, 0, k8s.Names{Kind: k8s.KindNode, Node: thisNode}},
		{nodeBIP, 0, k8s.Names{Kind: k8s.KindNode, Node: otherNode}},
		// A node port, on any node's address.
		{nodeAIP, 30080, k8s.Names{Kind: k8s.KindNode, Node: thisNode, Namespace: "lk8-shop", Service: "web"}},
		{nodeBIP, 30080, k8s.Names{Kind: k8s.KindNode, Node: otherNode, Namespace: "lk8-shop", Service: "web"}},
		{nodeAIP, 30081, k8s.Names{Kind: k8s.KindNode, Node: thisNode}},
		{"10.0.0.50", 0, k8s.Names{Kind: k8s.KindService, Namespace: "lk8-shop", Service: "web"}},
		{"10.0.0.51", 9090, k8s.Names{Kind: k8s.KindService, Namespace: "lk8-shop", Service: "web-admin"}},
		{"127.0.0.1", 0, k8s.Names{Kind: k8s.KindHost, Node: thisNode}},
		{"::1", 0, k8s.Names{Kind: k8s.KindHost, Node: thisNode}},
		{"198.51.100.7", 0, k8s.Names{Kind: k8s.KindExternal}},
		{"10.244.1.99", 0, k8s.Names{Kind: k8s.KindExternal}},
		// An IPv4-mapped IPv6 address is the IPv4 address.
		{"::ffff:10.0.0.50", 0, k8s.Names{Kind: k8s.KindService, Namespace: "lk8-shop", Service: "web"}},
	}
	now := time.Now()
	for _, tc := range cases {
		got := r.ResolveEndpoint(addr(t, tc.ip), tc.port, 6, now)
		if got != tc.want {
			t.Errorf("%s port %d:\n got  %+v\n want %+v", tc.ip, tc.port, got, tc.want)
		}
	}

	st := r.Status()
	// Only this node's pods are watched: 7 of the 8 created here.
	wantObjects := map[string]int{"pods": 7, "services": 4, "nodes": 2, "endpointslices": 3, "replicasets": 2, "jobs": 1}
	for res, n := range wantObjects {
		if st.Objects[res] != n {
			t.Errorf("status: %d %s, want %d (%+v)", st.Objects[res], res, n, st.Objects)
		}
	}
	// The kubernetes service the API server creates itself takes 10.0.0.1.
	if !st.Enabled || !st.Synced || !st.Connected || st.Node != thisNode || st.Outages != 0 {
		t.Errorf("status %+v", st)
	}

	// A pod seen before its ReplicaSet (informers do not order events
	// between one another) is renamed once the ReplicaSet arrives: here
	// the ReplicaSet is created after its pod.
	o.Pod(kubeapi.Pod{Namespace: "lk8-shop", Name: "late-5c6d-eeee", Node: thisNode, IP: "10.244.1.15", Owner: &metav1.OwnerReference{
		APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "late-5c6d", UID: "5c6d0000-0000-4000-8000-000000000001", Controller: ptr(true),
	}})
	waitNames(t, r, "10.244.1.15", pod("lk8-shop", "late-5c6d-eeee", "ReplicaSet", "late-5c6d", "", thisNode))
	late := o.Workload("Deployment", "lk8-shop", "late", nil)
	o.Workload("ReplicaSet", "lk8-shop", "late-5c6d", late)
	waitNames(t, r, "10.244.1.15", pod("lk8-shop", "late-5c6d-eeee", "Deployment", "late", "", thisNode))
}

func ptr[T any](v T) *T { return &v }
