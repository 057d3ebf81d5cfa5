package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"loupe/internal/api"
	"loupe/internal/flow"
	"loupe/internal/k8s"
	"loupe/internal/testutil"
	"loupe/internal/testutil/kubeapi"
)

// k8sNode is a node for the Kubernetes tests: an API server, a namespace
// standing for the node (its address on lo, the pods' gateway, forwarding)
// and its Node object.
type k8sNode struct {
	c    *kubeapi.Cluster
	obj  *kubeapi.Objects
	ns   *testutil.NS
	name string
}

func newK8sNode(t *testing.T, name, ip string) *k8sNode {
	t.Helper()
	testutil.RequirePrivileged(t)
	c := kubeapi.Start(t)
	obj := c.Objects(t)
	obj.GrantAgent(k8s.PolicyRules())
	node := testutil.NewNSPrefix(t, "lk2-")
	node.IP(t, "addr", "add", ip+"/32", "dev", "lo")
	node.IP(t, "addr", "add", "169.254.1.1/32", "dev", "lo", "scope", "link")
	node.Sysctl(t, "net.ipv4.ip_forward", "1")
	obj.Node(name, ip)
	return &k8sNode{c: c, obj: obj, ns: node, name: name}
}

// pod is a namespace behind a veth of the node holding ip, with a UDP
// sink on port: what a pod's sandbox is to the node.
func (n *k8sNode) pod(t *testing.T, ip string, port int) (veth string, p *testutil.NS) {
	t.Helper()
	veth = testutil.UniqueName("lk2")
	p = podNS(t, "lk2-", n.ns, veth, ip)
	var sink net.PacketConn
	if err := p.Do(func() (err error) {
		sink, err = net.ListenPacket("udp", net.JoinHostPort(ip, fmt.Sprint(port)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	return veth, p
}

// startAgent runs the agent on the node against the API server, and waits
// until it holds pods objects and the server answers.
func (n *k8sNode) startAgent(t *testing.T, activeTimeout string, pods int) *agent {
	t.Helper()
	kc := n.c.Kubeconfig(t)
	kubeconfigVia(t, kc, apiProxy(t, n.ns, n.c.Addr()))
	a := startAgent(t, n.ns, agentOpts{args: []string{"--cache-active-timeout", activeTimeout,
		"--kubeconfig", kc, "--node-name", n.name}})
	a.waitLog(20*time.Second, "watching kubernetes")
	waitMetrics(t, a, 20*time.Second, "the resolver to sync", func(m map[string]float64) bool {
		return m[`loupe_kubernetes_objects{resource="pods"}`] == float64(pods) && m["loupe_kubernetes_api_up"] == 1
	})
	return a
}

// waitMetrics scrapes the agent until ok holds, for at most timeout.
func waitMetrics(t *testing.T, a *agent, timeout time.Duration, what string, ok func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m := a.metrics()
		if ok(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: %v", timeout, what, k8sMetrics(m))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// k8sMetrics are the loupe_kubernetes_ series of m, for messages.
func k8sMetrics(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if len(k) > 17 && k[:17] == "loupe_kubernetes_" {
			out[k] = v
		}
	}
	return out
}

// sendUDP sends count datagrams from src (an address of ns, port
// included) to dst.
func sendUDP(t *testing.T, ns *testutil.NS, src, dst string, count int) {
	t.Helper()
	err := ns.Do(func() error {
		la, err := net.ResolveUDPAddr("udp", src)
		if err != nil {
			return err
		}
		ra, err := net.ResolveUDPAddr("udp", dst)
		if err != nil {
			return err
		}
		conn, err := net.DialUDP("udp", la, ra)
		if err != nil {
			return err
		}
		defer conn.Close()
		for range count {
			if _, err := conn.Write([]byte("lk2")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// k8sStatus is the kubernetes unit's detail in `loupe status --json`.
func k8sStatus(t *testing.T, a *agent) map[string]any {
	t.Helper()
	var st api.Status
	if err := json.Unmarshal([]byte(loupeOutput(t, "status", "--json", "--control", a.control)), &st); err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Capabilities {
		if c.Name == "kubernetes" {
			return c.Detail
		}
	}
	t.Fatalf("loupe status has no kubernetes unit: %+v", st.Capabilities)
	return nil
}

// TestKubernetesIPReuse: a Job's pod is deleted and its address given to a
// StatefulSet's pod while the agent still holds the old pod's flows (a
// long active timeout: every record is evicted at the end, after the
// switch). Traffic from outside the cluster and from this host's own
// address (neither any object's) goes to the address before the switch,
// across it, and after it. Every record names the pod that held the
// address at its last packet: the flows that ended before the switch the
// Job's pod, those after it the StatefulSet's, and the flow with packets
// on both sides the StatefulSet's. The other ends are "external" and
// "host" (with this node's name), as documented.
func TestKubernetesIPReuse(t *testing.T) {
	const (
		nodeName = "lk2-node-1"
		nodeIP   = "192.168.78.10"
		hostIP   = "10.99.78.1" // an address of this machine no node claims
		podIP    = "10.244.8.5"
		extIP    = "203.0.113.78"
	)
	n := newK8sNode(t, nodeName, nodeIP)
	n.ns.IP(t, "addr", "add", hostIP+"/32", "dev", "lo")
	podVeth, _ := n.pod(t, podIP, 7000)
	extVeth, extNS := n.pod(t, extIP, 7001) // a peer outside the cluster: no object holds its address

	n.obj.Namespace("lk2-batch")
	n.obj.Namespace("lk2-db")
	cron := n.obj.Workload("CronJob", "lk2-batch", "nightly", nil)
	job := n.obj.Workload("Job", "lk2-batch", "nightly-29000", cron)
	n.obj.Pod(kubeapi.Pod{Namespace: "lk2-batch", Name: "nightly-29000-x7k2p", Node: nodeName, IP: podIP, Owner: job,
		NetworkReady: time.Now().Add(-time.Minute)})
	sts := n.obj.Workload("StatefulSet", "lk2-db", "db", nil)

	a := n.startAgent(t, "60s", 1)
	spans := a.metrics()["loupe_kubernetes_spans"]

	podDst := net.JoinHostPort(podIP, "7000")
	// Before the switch: a flow that ends here, and the first packets
	// of one that goes on after it.
	sendUDP(t, extNS, extIP+":5001", podDst, 3)
	sendUDP(t, n.ns, hostIP+":6001", podDst, 2)
	sendUDP(t, extNS, extIP+":5003", podDst, 2)
	beforeEnd := time.Now()

	// The new pod's claim is the second its network became ready, as
	// the API states it: a second after every packet so far.
	time.Sleep(time.Until(beforeEnd.Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
	ready := time.Now()
	n.obj.DeletePod("lk2-batch", "nightly-29000-x7k2p")
	n.obj.Pod(kubeapi.Pod{Namespace: "lk2-db", Name: "db-0", Node: nodeName, IP: podIP, Owner: sts, NetworkReady: ready})
	// The old pod's range ends, the new one's begins: one more span,
	// one pod again.
	waitMetrics(t, a, 20*time.Second, "the agent to see the new pod", func(m map[string]float64) bool {
		return m["loupe_kubernetes_spans"] == spans+1 && m[`loupe_kubernetes_objects{resource="pods"}`] == 1
	})
	// Past the claim's second, where the old pod's range ends at the
	// latest.
	time.Sleep(time.Until(ready.Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
	afterStart := time.Now()
	sendUDP(t, extNS, extIP+":5003", podDst, 4)
	sendUDP(t, extNS, extIP+":5002", podDst, 5)
	sendUDP(t, n.ns, hostIP+":6002", podDst, 3)
	time.Sleep(200 * time.Millisecond)
	a.stop()

	jobPod := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "lk2-batch", Pod: "nightly-29000-x7k2p", Workload: "nightly", WorkloadKind: "CronJob", Node: nodeName}
	dbPod := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "lk2-db", Pod: "db-0", Workload: "db", WorkloadKind: "StatefulSet", Node: nodeName}
	others := map[string]flow.K8sEnd{
		extIP:  {Kind: flow.K8sExternal},
		hostIP: {Kind: flow.K8sHost, Node: nodeName},
	}
	// The packets each flow's record carries at the pod's veth, and whose
	// it must be.
	want := map[uint16]struct {
		packets uint64
		owner   flow.K8sEnd
	}{
		5001: {3, jobPod}, 6001: {2, jobPod},
		5003: {6, dbPod}, // across the switch: its last packet is the new pod's
		5002: {5, dbPod}, 6002: {3, dbPod},
	}
	const slack = 20 * time.Millisecond
	got := map[uint16]uint64{}
	var checked int
	for _, r := range a.exported() {
		if r.DstIP() != netip.MustParseAddr(podIP) && r.SrcIP() != netip.MustParseAddr(podIP) {
			continue
		}
		checked++
		if r.K8s == nil {
			t.Errorf("record %s:%d -> %s:%d on %s has no names", r.SrcIP(), r.SrcPort, r.DstIP(), r.DstPort, r.Iface)
			continue
		}
		// Whatever the record, its pod is the address's holder at its
		// last packet: none fell between the two. A record's times are
		// the kernel's clock turned into wall time, a few milliseconds
		// off the test's.
		podEnd, otherEnd, other := r.K8s.Dst, r.K8s.Src, r.SrcIP().String()
		if r.SrcIP() == netip.MustParseAddr(podIP) {
			podEnd, otherEnd, other = r.K8s.Src, r.K8s.Dst, r.DstIP().String()
		}
		before, after := r.LastSeen.Before(beforeEnd.Add(slack)), r.LastSeen.After(afterStart.Add(-slack))
		switch {
		case before && podEnd != jobPod:
			t.Errorf("%s:%d -> %s:%d, last seen before the switch: %+v, want the Job's pod", r.SrcIP(), r.SrcPort, r.DstIP(), r.DstPort, podEnd)
		case after && podEnd != dbPod:
			t.Errorf("%s:%d -> %s:%d, last seen after the switch: %+v, want the StatefulSet's pod", r.SrcIP(), r.SrcPort, r.DstIP(), r.DstPort, podEnd)
		case !before && !after:
			t.Errorf("%s:%d -> %s:%d last seen during the switch (%v), when the test sent nothing", r.SrcIP(), r.SrcPort, r.DstIP(), r.DstPort, r.LastSeen)
		}
		if w, ok := others[other]; ok && otherEnd != w {
			t.Errorf("%s:%d -> %s:%d: %s is %+v, want %+v", r.SrcIP(), r.SrcPort, r.DstIP(), r.DstPort, other, otherEnd, w)
		}
		// The interface's pod is named as it is at eviction.
		if r.Iface == podVeth && (r.K8s.IfacePod != "db-0" || r.K8s.IfaceNamespace != "lk2-db") {
			t.Errorf("record on the pod's veth: interface pod %s/%s, want lk2-db/db-0", r.K8s.IfaceNamespace, r.K8s.IfacePod)
		}
		if r.Iface == extVeth && r.K8s.IfacePod != "" {
			t.Errorf("record on the external peer's veth: interface pod %q, want none", r.K8s.IfacePod)
		}
		if r.Iface != podVeth || r.Direction != flow.Egress || r.Proto != flow.ProtoUDP {
			continue
		}
		w, ok := want[r.SrcPort]
		if !ok {
			continue
		}
		got[r.SrcPort] += r.Packets
		if podEnd != w.owner {
			t.Errorf("flow from port %d: %+v, want %+v", r.SrcPort, podEnd, w.owner)
		}
	}
	for port, w := range want {
		if got[port] != w.packets {
			t.Errorf("flow from port %d: %d packets at the pod's veth, sent %d", port, got[port], w.packets)
		}
	}
	t.Logf("%d records of %s checked", checked, podIP)
}

// TestKubernetesAPIOutage stops the API server while the agent runs. The
// agent names records from its last view throughout, reports the outage
// (loupe status, loupe_kubernetes_api_up and _outages_total), and when the
// server is back catches up: a pod created meanwhile, through another API
// server on the same etcd, is named after the resync. Records evicted
// during the outage named that pod's address "external", as nothing held
// it in the agent's view: names are fixed at eviction.
func TestKubernetesAPIOutage(t *testing.T) {
	const (
		nodeName = "lk2-node-2"
		nodeIP   = "192.168.79.10"
		webIP    = "10.244.9.2"
		newIP    = "10.244.9.3"
		extIP    = "203.0.113.79"
	)
	n := newK8sNode(t, nodeName, nodeIP)
	_, _ = n.pod(t, webIP, 7000)
	newVeth, _ := n.pod(t, newIP, 7000) // its sandbox is there before its pod object
	_, extNS := n.pod(t, extIP, 7001)
	n.obj.Namespace("lk2-shop")
	rs := n.obj.Workload("ReplicaSet", "lk2-shop", "web-5c7d8", n.obj.Workload("Deployment", "lk2-shop", "web", nil))
	n.obj.Pod(kubeapi.Pod{Namespace: "lk2-shop", Name: "web-5c7d8-aaaaa", Node: nodeName, IP: webIP, Owner: rs, NetworkReady: time.Now().Add(-time.Minute)})
	a := n.startAgent(t, "200ms", 1)

	// exportedFrom waits until the records of a flow from extIP:port
	// are exported (evicted, and so named), and returns their packets at
	// the pod's veth (egress) and the names of its destination.
	exportedFrom := func(port uint16, packets uint64) flow.K8sEnd {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var sum uint64
			var end flow.K8sEnd
			for _, r := range a.exported() {
				if r.SrcPort != port || r.SrcIP() != netip.MustParseAddr(extIP) || r.Direction != flow.Egress || r.DstPort != 7000 {
					continue
				}
				if r.K8s == nil || r.K8s.Src != (flow.K8sEnd{Kind: flow.K8sExternal}) {
					t.Fatalf("flow from port %d: names %+v, want an external source", port, r.K8s)
				}
				sum += r.Packets
				end = r.K8s.Dst
			}
			if sum == packets {
				return end
			}
			if sum > packets || time.Now().After(deadline) {
				t.Fatalf("flow from port %d: %d packets exported at the pod's veth, sent %d", port, sum, packets)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	webPod := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "lk2-shop", Pod: "web-5c7d8-aaaaa", Workload: "web", WorkloadKind: "Deployment", Node: nodeName}
	newPod := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "lk2-shop", Pod: "web-5c7d8-bbbbb", Workload: "web", WorkloadKind: "Deployment", Node: nodeName}

	sendUDP(t, extNS, extIP+":5001", webIP+":7000", 3)
	if got := exportedFrom(5001, 3); got != webPod {
		t.Errorf("before the outage: %+v, want %+v", got, webPod)
	}

	n.c.StopAPIServer()
	waitMetrics(t, a, 20*time.Second, "the agent to report the outage", func(m map[string]float64) bool {
		return m["loupe_kubernetes_api_up"] == 0 && m["loupe_kubernetes_api_outages_total"] == 1
	})
	st := k8sStatus(t, a)
	if st["connected"] != false || st["outages"] != float64(1) || st["down_since"] == nil || st["last_error"] == nil {
		t.Errorf("loupe status during the outage: %v, want disconnected since a time, one outage and the error", st)
	}
	sendUDP(t, extNS, extIP+":5002", webIP+":7000", 4)
	if got := exportedFrom(5002, 4); got != webPod {
		t.Errorf("during the outage: %+v, want the last view's %+v", got, webPod)
	}

	// The cluster changes while the agent's API server is down.
	spare, stopSpare := n.c.Spare(t)
	kubeapi.NewObjects(t, spare).Pod(kubeapi.Pod{Namespace: "lk2-shop", Name: "web-5c7d8-bbbbb", Node: nodeName, IP: newIP, Owner: rs, NetworkReady: time.Now()})
	stopSpare()
	sendUDP(t, extNS, extIP+":5003", newIP+":7000", 2)
	if got := exportedFrom(5003, 2); got != (flow.K8sEnd{Kind: flow.K8sExternal}) {
		t.Errorf("a pod created during the outage, before the resync: %+v, want external", got)
	}

	back := time.Now()
	n.c.RestartAPIServer(t)
	// The informers retry with a backoff of up to 30 s.
	waitMetrics(t, a, 90*time.Second, "the agent to resync", func(m map[string]float64) bool {
		return m["loupe_kubernetes_api_up"] == 1 && m[`loupe_kubernetes_objects{resource="pods"}`] == 2
	})
	t.Logf("resynced %s after the API server was back", time.Since(back).Round(time.Millisecond))
	if st := k8sStatus(t, a); st["connected"] != true || st["outages"] != float64(1) || st["down_since"] != nil {
		t.Errorf("loupe status after the resync: %v, want connected after one outage", st)
	}
	sendUDP(t, extNS, extIP+":5004", newIP+":7000", 5)
	if got := exportedFrom(5004, 5); got != newPod {
		t.Errorf("after the resync: %+v, want %+v", got, newPod)
	}
	a.stop()
	for _, r := range a.exported() {
		if r.Iface == newVeth && r.SrcPort == 5004 && (r.K8s == nil || r.K8s.IfacePod != newPod.Pod) {
			t.Errorf("record on the new pod's veth after the resync: %+v, want interface pod %s", r.K8s, newPod.Pod)
		}
	}
}
