package k8s_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"loupe/internal/k8s"
	"loupe/internal/testutil"
	"loupe/internal/testutil/kubeapi"
)

// TestIfaceOwner builds a node's host side in a namespace of its own: pod
// veths the way the common CNI plugins wire them (a /32 route through the
// veth, a neighbour entry on it, a port of a bridge whose forwarding table
// has the pod's MAC), each peer in a namespace standing for the pod's, and
// checks that each host-side veth names its pod, read from the host side
// alone. No packet is sent.
func TestIfaceOwner(t *testing.T) {
	testutil.RequirePrivileged(t)
	host := testutil.NewNSPrefix(t, "lk8-")
	veth := func() (hostSide string) {
		podNS := testutil.NewNSPrefix(t, "lk8-")
		hostSide = testutil.UniqueName("lk8v")
		host.IP(t, "link", "add", hostSide, "type", "veth", "peer", "name", "eth0", "netns", podNS.Name)
		host.IP(t, "link", "set", hostSide, "up")
		podNS.IP(t, "link", "set", "eth0", "up")
		return hostSide
	}
	routed := veth() // Calico, Cilium, the ptp plugin
	host.IP(t, "route", "add", "10.244.1.40/32", "dev", routed)
	bridged := veth() // the bridge plugin, flannel
	host.IP(t, "link", "add", "lk8br0", "type", "bridge")
	host.IP(t, "link", "set", "lk8br0", "up")
	host.IP(t, "addr", "add", "10.244.1.1/24", "dev", "lk8br0")
	host.IP(t, "link", "set", bridged, "master", "lk8br0")
	host.IP(t, "neigh", "add", "10.244.1.41", "lladdr", "02:00:00:00:00:41", "dev", "lk8br0")
	host.Run(t, "bridge", "fdb", "add", "02:00:00:00:00:41", "dev", bridged, "master", "static")
	neighbour := veth() // a neighbour entry on the veth itself
	host.IP(t, "neigh", "add", "10.244.1.42", "lladdr", "02:00:00:00:00:42", "dev", neighbour)
	notPod := veth() // routes to an address no pod holds
	host.IP(t, "route", "add", "10.244.1.43/32", "dev", notPod)

	c := kubeapi.Start(t)
	o := c.Objects(t)
	o.Node(thisNode, nodeAIP)
	o.Namespace("lk8-shop")
	for _, i := range []string{"40", "41", "42", "44"} {
		o.Pod(kubeapi.Pod{Namespace: "lk8-shop", Name: "p" + i, Node: thisNode, IP: "10.244.1." + i, NetworkReady: time.Now()})
	}

	nsh, err := netns.GetFromName(host.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nsh.Close() })
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	r := startResolver(t, c, k8s.Options{Netlink: h, NetRefresh: time.Hour})

	index := func(name string) int {
		t.Helper()
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().Index
	}
	cases := map[string]k8s.Names{
		routed:    pod("lk8-shop", "p40", "", "", "", thisNode),
		bridged:   pod("lk8-shop", "p41", "", "", "", thisNode),
		neighbour: pod("lk8-shop", "p42", "", "", "", thisNode),
		notPod:    {},
		"lk8br0":  {}, // the bridge itself is no pod's
		"lo":      {},
	}
	for name, want := range cases {
		idx := index(name)
		eventually(t, 5*time.Second, func() (bool, string) {
			got := r.IfaceOwner(idx)
			return got == want, fmt.Sprintf("%s (ifindex %d) owner %+v, want %+v", name, idx, got, want)
		})
	}
	// The host's own addresses, in the namespace given, are host's.
	if got, want := r.Resolve(addr(t, "10.244.1.1"), time.Now()), (k8s.Names{Kind: k8s.KindHost, Node: thisNode}); got != want {
		t.Errorf("the bridge's address: %+v, want %+v", got, want)
	}

	// A veth that appears after the last read is found when first asked
	// for (the refresh interval is an hour here).
	late := veth()
	host.IP(t, "route", "add", "10.244.1.44/32", "dev", late)
	idx := index(late)
	want := pod("lk8-shop", "p44", "", "", "", thisNode)
	eventually(t, 5*time.Second, func() (bool, string) {
		got := r.IfaceOwner(idx)
		return got == want, fmt.Sprintf("late veth %s owner %+v, want %+v", late, got, want)
	})
}

// TestOff: without a kubeconfig and outside a pod, the resolver is off,
// says why, and names nothing.
func TestOff(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	r, err := k8s.New(k8s.DefaultConfig(), k8s.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.On() {
		t.Fatal("on without a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.Run(ctx); err != nil || ctx.Err() != nil {
		t.Errorf("Run off: %v, want an immediate return", err)
	}
	if got := r.Resolve(addr(t, "127.0.0.1"), time.Now()); got != (k8s.Names{}) {
		t.Errorf("off: %+v, want nothing", got)
	}
	if got := r.IfaceOwner(1); got != (k8s.Names{}) {
		t.Errorf("off: iface %+v, want nothing", got)
	}
	st := r.Status()
	if st.Enabled || st.Config == "" {
		t.Errorf("status off: %+v, want disabled with a reason", st)
	}

	// A kubeconfig that cannot be read is an error, not a silent off.
	cfg := k8s.DefaultConfig()
	cfg.Kubeconfig = t.TempDir() + "/missing"
	if _, err := k8s.New(cfg, k8s.Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing kubeconfig: %v, want a not-exist error", err)
	}
}
