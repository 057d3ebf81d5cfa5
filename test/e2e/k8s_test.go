package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"loupe/internal/flow"
	"loupe/internal/hop"
	"loupe/internal/k8s"
	"loupe/internal/testutil"
	"loupe/internal/testutil/kubeapi"
)

// apiProxy forwards connections to a listener inside ns to the API server
// at target on the host's loopback, which the agent's namespace cannot
// reach otherwise, and returns the listener's address.
func apiProxy(t *testing.T, ns *testutil.NS, target string) string {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				// A dial from this goroutine is on the host's loopback.
				up, err := net.DialTimeout("tcp", target, 2*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String()
}

// kubeconfigVia rewrites the agent's kubeconfig to reach the server
// through addr.
func kubeconfigVia(t *testing.T, path, addr string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// podNS is a namespace that stands for a pod: its eth0 holds the pod's
// /32, its default route goes to the node's link-local gateway over the
// veth (as Calico's does), and the node routes the /32 to the veth.
// Its name starts with prefix, the test's.
func podNS(t *testing.T, prefix string, node *testutil.NS, veth, ip string) *testutil.NS {
	t.Helper()
	p := testutil.NewNSPrefix(t, prefix)
	testutil.Veth(t, node, veth, p, "eth0")
	p.IP(t, "addr", "add", ip+"/32", "dev", "eth0")
	p.IP(t, "link", "set", "eth0", "up")
	p.IP(t, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
	p.IP(t, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	node.IP(t, "link", "set", veth, "up")
	node.IP(t, "route", "add", ip+"/32", "dev", veth)
	return p
}

// TestKubernetesNames runs the agent against a real API server on a node
// whose pods are namespaces: a Deployment's pod (through its ReplicaSet)
// behind a Service, a StatefulSet's pod, and the node itself (what a
// hostNetwork pod's traffic is). TCP and UDP between them; every record
// between those addresses names both ends field by field, and the pod of
// its interface.
func TestKubernetesNames(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := kubeapi.Start(t)
	obj := c.Objects(t)
	obj.GrantAgent(k8s.PolicyRules())

	const (
		nodeName = "lkw-node-1"
		nodeIP   = "192.168.77.10"
		webIP    = "10.244.7.2"
		cliIP    = "10.244.7.3"
		svcIP    = "10.0.77.1"
	)
	node := testutil.NewNSPrefix(t, "lkw-")
	node.IP(t, "addr", "add", nodeIP+"/32", "dev", "lo")
	// The pods' gateway: a local address answers their ARP on every veth;
	// of link scope, it is never the node's source towards a pod.
	node.IP(t, "addr", "add", "169.254.1.1/32", "dev", "lo", "scope", "link")
	node.Sysctl(t, "net.ipv4.ip_forward", "1")
	webVeth, cliVeth := testutil.UniqueName("lkwa"), testutil.UniqueName("lkwb")
	web := podNS(t, "lkw-", node, webVeth, webIP)
	cli := podNS(t, "lkw-", node, cliVeth, cliIP)

	obj.Node(nodeName, nodeIP)
	obj.Namespace("shop")
	obj.Namespace("tools")
	dep := obj.Workload("Deployment", "shop", "web", nil)
	rs := obj.Workload("ReplicaSet", "shop", "web-6d4f9", dep)
	ready := time.Now().Add(-time.Minute)
	obj.Pod(kubeapi.Pod{Namespace: "shop", Name: "web-6d4f9-abcde", Node: nodeName, IP: webIP, Owner: rs, NetworkReady: ready})
	sts := obj.Workload("StatefulSet", "tools", "cli", nil)
	obj.Pod(kubeapi.Pod{Namespace: "tools", Name: "cli-0", Node: nodeName, IP: cliIP, Owner: sts, NetworkReady: ready})
	ds := obj.Workload("DaemonSet", "tools", "agent", nil)
	obj.Pod(kubeapi.Pod{Namespace: "tools", Name: "agent-xyz", Node: nodeName, IP: nodeIP, HostNetwork: true, Owner: ds, NetworkReady: ready})
	obj.Service(kubeapi.Service{Namespace: "shop", Name: "web", ClusterIP: svcIP, Port: 8080})
	obj.EndpointSlice("shop", "web-1", "web", 8080, kubeapi.Endpoint{IP: webIP, Pod: "web-6d4f9-abcde", Node: nodeName})

	kc := c.Kubeconfig(t)
	kubeconfigVia(t, kc, apiProxy(t, node, c.Addr()))
	a := startAgent(t, node, agentOpts{args: []string{"--cache-active-timeout", "200ms",
		"--kubeconfig", kc, "--node-name", nodeName, "--latency"}})
	a.waitLog(20*time.Second, "watching kubernetes")
	deadline := time.Now().Add(20 * time.Second)
	for m := a.metrics(); m[`loupe_kubernetes_objects{resource="pods"}`] < 3 || m["loupe_kubernetes_api_up"] != 1; m = a.metrics() {
		if time.Now().After(deadline) {
			t.Fatalf("the resolver did not sync: %v", m)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// TCP cli -> web:8080, node -> web:8080; UDP cli -> web:5353.
	testutil.TCPTransfer(t, cli, web, netip.MustParseAddrPort(webIP+":8080"), 64<<10).Close()
	testutil.TCPTransfer(t, node, web, netip.MustParseAddrPort(webIP+":8080"), 16<<10).Close()
	const datagrams = 5
	var sink net.PacketConn
	if err := web.Do(func() (err error) { sink, err = net.ListenPacket("udp", net.JoinHostPort(webIP, "5353")); return err }); err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	err := cli.Do(func() error {
		conn, err := net.Dial("udp", net.JoinHostPort(webIP, "5353"))
		if err != nil {
			return err
		}
		defer conn.Close()
		for range datagrams {
			if _, err := conn.Write([]byte("lkw")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// One traced HTTP request cli -> web: its hop from cli's veth to
	// web's names both pods.
	serveHTTP(t, web, webIP+":8081")
	traced := sendTraced(t, cli, webIP+":8081", 1)[0]
	time.Sleep(500 * time.Millisecond)
	a.stop()
	checkHopPods(t, a, traced.trace, cliVeth, "tools/cli-0", webVeth, "shop/web-6d4f9-abcde")

	webEnd := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "shop", Pod: "web-6d4f9-abcde", Workload: "web", WorkloadKind: "Deployment", Service: "web", Node: nodeName}
	cliEnd := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "tools", Pod: "cli-0", Workload: "cli", WorkloadKind: "StatefulSet", Node: nodeName}
	nodeEnd := flow.K8sEnd{Kind: flow.K8sNode, Node: nodeName}
	ends := map[string]flow.K8sEnd{webIP: webEnd, cliIP: cliEnd, nodeIP: nodeEnd}
	ifacePods := map[string][2]string{webVeth: {"web-6d4f9-abcde", "shop"}, cliVeth: {"cli-0", "tools"}}

	var checked, udpPackets int
	seen := map[string]bool{}
	for _, r := range a.exported() {
		src, okS := ends[r.SrcIP().String()]
		dst, okD := ends[r.DstIP().String()]
		if !okS || !okD {
			continue
		}
		checked++
		if r.K8s == nil {
			t.Errorf("record %s -> %s on %s has no names", r.SrcIP(), r.DstIP(), r.Iface)
			continue
		}
		// The pod's service is the one of its endpoint: any port of web.
		if got := r.K8s.Src; got != src {
			t.Errorf("%s:%d -> %s:%d on %s: source %+v, want %+v", r.SrcIP(), r.SrcPort, r.DstIP(), r.DstPort, r.Iface, got, src)
		}
		if got := r.K8s.Dst; got != dst {
			t.Errorf("%s:%d -> %s:%d on %s: destination %+v, want %+v", r.SrcIP(), r.SrcPort, r.DstIP(), r.DstPort, r.Iface, got, dst)
		}
		want := ifacePods[r.Iface]
		if r.K8s.IfacePod != want[0] || r.K8s.IfaceNamespace != want[1] {
			t.Errorf("record on %s: interface pod %s/%s, want %s/%s", r.Iface, r.K8s.IfaceNamespace, r.K8s.IfacePod, want[1], want[0])
		}
		seen[r.SrcIP().String()+">"+r.DstIP().String()+"/"+strconv.Itoa(int(r.Proto))] = true
		if r.Proto == flow.ProtoUDP && r.DstPort == 5353 && r.Iface == webVeth && r.Direction == flow.Egress {
			udpPackets += int(r.Packets)
		}
	}
	for _, k := range []string{cliIP + ">" + webIP + "/6", webIP + ">" + cliIP + "/6", nodeIP + ">" + webIP + "/6", webIP + ">" + nodeIP + "/6", cliIP + ">" + webIP + "/17"} {
		if !seen[k] {
			t.Errorf("no record of %s (checked %d records)", k, checked)
		}
	}
	if udpPackets != datagrams {
		t.Errorf("%d UDP packets towards web at its veth, sent %d", udpPackets, datagrams)
	}
}

// checkHopPods checks that the stored per-hop record of trace has one hop,
// from the veth from to the veth to, naming the pods behind them.
func checkHopPods(t *testing.T, a *agent, trace, from, fromPod, to, toPod string) {
	t.Helper()
	out, err := exec.Command(loupeBin, "latency", "--store", filepath.Join(a.dir, "store"), "--since", "0", "--trace", trace, "--json").Output()
	if err != nil {
		t.Fatalf("loupe latency: %v", err)
	}
	var r struct {
		Hops []hop.Hop `json:"hops"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("loupe latency --trace %s: %q: %v", trace, out, err)
	}
	want := hop.Hop{FromIface: from, ToIface: to, Direction: hop.Out, FromPod: fromPod, ToPod: toPod}
	if len(r.Hops) != 1 {
		t.Fatalf("hops %+v, want one from %s to %s", r.Hops, from, to)
	}
	got := r.Hops[0]
	got.LatencyNs = 0
	if got != want || r.Hops[0].LatencyNs <= 0 {
		t.Errorf("hop %+v, want %+v with a latency above 0", r.Hops[0], want)
	}
}
