package k8s

import (
	"net/netip"
	"testing"
	"time"
)

// Times in these tests are seconds from an arbitrary origin.
func sec(s float64) int64 { return int64(s * float64(time.Second)) }

var ip = netip.MustParseAddr("10.244.1.20")

func podOwner(name string) *owner {
	return &owner{names: Names{Kind: KindPod, Namespace: "ns", Pod: name}, who: podWho("ns", name)}
}

// at returns the pod name (or node, or service) that ip names at time s.
func at(h *history[netip.Addr], s float64) string {
	n, ok := h.names(ip, sec(s), portProto{})
	switch {
	case !ok:
		return "-"
	case n.Kind == KindNode:
		return "node:" + n.Node
	case n.Pod == "":
		return "svc:" + n.Service
	}
	return n.Pod
}

func expect(t *testing.T, h *history[netip.Addr], want map[float64]string) {
	t.Helper()
	for s, w := range want {
		if got := at(h, s); got != w {
			t.Errorf("at %gs: %s, want %s", s, got, w)
		}
	}
}

// An address given to a pod after its previous pod was seen gone: each
// names its own time, and the gap between them names no one.
func TestHistoryReuseAfterDeletion(t *testing.T) {
	h := newHistory[netip.Addr](time.Hour, 8)
	h.open(ip, srcPod, "pod/a", podOwner("a"), claim{seen: sec(10.4), claimed: sec(10), notBefore: sec(9)})
	h.close(ip, "pod/a", sec(20.3))
	h.open(ip, srcPod, "pod/b", podOwner("b"), claim{seen: sec(25.2), claimed: sec(25), notBefore: sec(24)})
	expect(t, h, map[float64]string{9.9: "-", 10: "a", 20.2: "a", 20.3: "-", 24.9: "-", 25: "b", 1e6: "b"})
}

// The new pod's claim arrives while the old pod still holds the address
// in the API (its sandbox is gone, its object not yet): the old span is
// cut at the end of the new pod's claim second, never before.
func TestHistoryReuseWhileOldStillListed(t *testing.T) {
	h := newHistory[netip.Addr](time.Hour, 8)
	h.open(ip, srcPod, "pod/a", podOwner("a"), claim{seen: sec(10.4), claimed: sec(10)})
	h.open(ip, srcPod, "pod/b", podOwner("b"), claim{seen: sec(31.5), claimed: sec(30)})
	// a's deletion, seen later still, does not move its end.
	h.close(ip, "pod/a", sec(33))
	expect(t, h, map[float64]string{10: "a", 30.99: "a", 31: "b", 32: "b"})
	// The event itself bounds the cut when it arrives within the second.
	h.open(ip, srcPod, "pod/c", podOwner("c"), claim{seen: sec(40.2), claimed: sec(40)})
	expect(t, h, map[float64]string{40.19: "b", 40.2: "c"})
}

// A deletion seen late (at the end of an API server outage) is cut back
// to the claim of the pod that took the address meanwhile.
func TestHistoryLateDeletion(t *testing.T) {
	h := newHistory[netip.Addr](time.Hour, 8)
	h.open(ip, srcPod, "pod/a", podOwner("a"), claim{seen: sec(10.4), claimed: sec(10)})
	h.close(ip, "pod/a", sec(90)) // seen after the outage
	h.open(ip, srcPod, "pod/b", podOwner("b"), claim{seen: sec(90.1), claimed: sec(50)})
	expect(t, h, map[float64]string{49: "a", 50.99: "a", 51: "b", 89: "b"})
}

// Holders that state no claim (EndpointSlices) take the address at the
// event when another has it, and back to the last end when it was free.
func TestHistoryWithoutClaim(t *testing.T) {
	h := newHistory[netip.Addr](time.Hour, 8)
	h.open(ip, srcEndpoint, "eps/1", podOwner("a"), claim{seen: sec(10), notBefore: sec(5)})
	expect(t, h, map[float64]string{4.9: "-", 5: "a"})
	h.open(ip, srcEndpoint, "eps/2", podOwner("b"), claim{seen: sec(20), notBefore: sec(1)})
	expect(t, h, map[float64]string{19.9: "a", 20: "b"})
	h.close(ip, "eps/2", sec(30))
	// Created before b's end: the address was free from 30 on.
	h.open(ip, srcEndpoint, "eps/3", podOwner("c"), claim{seen: sec(40), notBefore: sec(2)})
	expect(t, h, map[float64]string{29.9: "b", 30: "c"})
	h.close(ip, "eps/3", sec(50))
	// Created after c's end: not before its creation.
	h.open(ip, srcEndpoint, "eps/4", podOwner("d"), claim{seen: sec(60), notBefore: sec(55)})
	expect(t, h, map[float64]string{54.9: "-", 55: "d"})
}

// A stale event claiming an address before its current holder took it
// does not cut the current holder.
func TestHistoryStaleClaim(t *testing.T) {
	h := newHistory[netip.Addr](time.Hour, 8)
	h.open(ip, srcPod, "pod/e", podOwner("e"), claim{seen: sec(300.5), claimed: sec(300)})
	h.open(ip, srcPod, "pod/d", podOwner("d"), claim{seen: sec(301), claimed: sec(100)})
	expect(t, h, map[float64]string{100: "d", 299: "d", 300: "e", 400: "e"})
}

// A pod and the EndpointSlices that list it are one holder; a node's
// address is the node's even when an endpoint (a hostNetwork pod) or a
// pod lists it.
func TestHistorySourcesAndServices(t *testing.T) {
	h := newHistory[netip.Addr](time.Hour, 8)
	p := podOwner("a")
	p.names.Workload = "web"
	h.open(ip, srcPod, "pod/a", p, claim{seen: sec(10), claimed: sec(10)})
	web := &owner{names: Names{Kind: KindPod, Namespace: "ns", Pod: "a", Service: "web"}, who: p.who, ports: []portProto{{8080, 6}}}
	admin := &owner{names: Names{Kind: KindPod, Namespace: "ns", Pod: "a", Service: "admin"}, who: p.who, ports: []portProto{{9090, 6}}}
	h.open(ip, srcEndpoint, "eps/web", web, claim{seen: sec(11)})
	h.open(ip, srcEndpoint, "eps/admin", admin, claim{seen: sec(12)})
	for _, c := range []struct {
		t    float64
		pp   portProto
		want string
	}{
		{10.5, portProto{}, ""}, // no endpoint yet
		{11.5, portProto{}, "web"},
		{12.5, portProto{}, "admin"}, // first by name
		{12.5, portProto{8080, 6}, "web"},
		{12.5, portProto{9090, 6}, "admin"},
		{12.5, portProto{9090, 17}, "admin"}, // no port matches: first by name
	} {
		n, _ := h.names(ip, sec(c.t), c.pp)
		if n.Pod != "a" || n.Workload != "web" || n.Service != c.want {
			t.Errorf("at %gs port %v: %+v, want pod a of web, service %q", c.t, c.pp, n, c.want)
		}
	}
	h.open(ip, srcNode, "node/n1", &owner{names: Names{Kind: KindNode, Node: "n1"}, who: nodeWho("n1")}, claim{seen: sec(20)})
	expect(t, h, map[float64]string{19: "a", 20: "node:n1"})
}

// An open span's names change in place: a pod's workload learnt late
// names its whole span, and opens no new one.
func TestHistoryUpdateInPlace(t *testing.T) {
	h := newHistory[netip.Addr](time.Hour, 8)
	h.open(ip, srcPod, "pod/a", podOwner("a"), claim{seen: sec(10), claimed: sec(10)})
	renamed := podOwner("a")
	renamed.names.Workload = "web"
	h.open(ip, srcPod, "pod/a", renamed, claim{seen: sec(20)})
	if n, _ := h.names(ip, sec(10), portProto{}); n.Workload != "web" {
		t.Errorf("at 10s: %+v, want workload web", n)
	}
	if _, spans, _ := h.sizes(); spans != 1 {
		t.Errorf("%d spans, want 1", spans)
	}
}

// The past of one address is bounded in count, oldest first, and in time:
// a record older than the history names no one.
func TestHistoryBounds(t *testing.T) {
	h := newHistory[netip.Addr](time.Minute, 3)
	for i := range 5 {
		name := string(rune('a' + i))
		start := float64(10*i + 10)
		h.open(ip, srcPod, "pod/"+name, podOwner(name), claim{seen: sec(start), claimed: sec(start)})
		if i < 4 {
			h.close(ip, "pod/"+name, sec(start+5))
		}
	}
	keys, spans, dropped := h.sizes()
	if keys != 1 || spans != 3 || dropped != 2 {
		t.Errorf("keys %d spans %d dropped %d, want 1 3 2", keys, spans, dropped)
	}
	// a (10-15 s) and b (20-25 s) were dropped for the count.
	expect(t, h, map[float64]string{11: "-", 21: "-", 31: "c", 41: "d", 51: "e"})

	// At 100 s with a minute of history, c (ended at 35 s) goes, d (ended
	// at 45 s) stays, and so does e, open.
	h.prune(sec(100))
	expect(t, h, map[float64]string{31: "-", 41: "d", 51: "e"})
	h.close(ip, "pod/e", sec(110))
	h.prune(sec(169))
	expect(t, h, map[float64]string{41: "-", 51: "e"})
	h.prune(sec(171))
	if keys, spans, _ := h.sizes(); keys != 0 || spans != 0 {
		t.Errorf("after the history: %d keys, %d spans, want none", keys, spans)
	}
}

// A pod that lost its address to another keeps sending updates that list
// it (a terminating pod's last ones): they do not take it back, even when
// both claims fall in the same second.
func TestHistoryLostAddressStaysLost(t *testing.T) {
	h := newHistory[netip.Addr](time.Hour, 8)
	h.open(ip, srcPod, "pod/a", podOwner("a"), claim{seen: sec(10.1), claimed: sec(10)})
	h.open(ip, srcPod, "pod/b", podOwner("b"), claim{seen: sec(10.6), claimed: sec(10)})
	h.open(ip, srcPod, "pod/a", podOwner("a"), claim{seen: sec(10.8), claimed: sec(10)})
	h.close(ip, "pod/a", sec(11))
	expect(t, h, map[float64]string{10.5: "a", 10.6: "b", 11: "b", 20: "b"})
	// A new sandbox (a new claim) may hold it again.
	h.close(ip, "pod/b", sec(30))
	h.open(ip, srcPod, "pod/a", podOwner("a"), claim{seen: sec(40.5), claimed: sec(40)})
	expect(t, h, map[float64]string{35: "-", 40: "a"})
}
