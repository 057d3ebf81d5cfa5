package hop

import (
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

// resolverTTL is how long a looked-up interface is trusted: an index can be
// reused by a new interface once the old one is gone.
const resolverTTL = 30 * time.Second

// NetlinkResolver names the interfaces of the caller's network namespace
// and their link kinds through netlink, caching each answer for a while
// (the matcher asks for every hook of every record).
type NetlinkResolver struct {
	// Name, if set, names an index first (the agent's table, which also
	// knows interfaces removed a moment ago); netlink names the rest.
	Name func(ifindex uint32) string
	// Pod, if set, names the pod behind an interface ("namespace/name",
	// "" for none): the Kubernetes names' host-side veths.
	Pod func(ifindex uint32) string
	Now func() time.Time

	mu    sync.Mutex
	cache map[uint32]cached
}

type cached struct {
	Iface
	at time.Time
}

// Iface implements Resolver.
func (n *NetlinkResolver) Iface(ifindex uint32) Iface {
	now := time.Now
	if n.Now != nil {
		now = n.Now
	}
	return n.IfaceAt(ifindex, now())
}

// IfaceAt implements TimedResolver: Iface at t, the caller's reading of
// the clock (Now is not read).
func (n *NetlinkResolver) IfaceAt(ifindex uint32, t time.Time) Iface {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.cache[ifindex]; ok && t.Sub(c.at) < resolverTTL {
		return c.Iface
	}
	var ifc Iface
	if n.Name != nil {
		ifc.Name = n.Name(ifindex)
	}
	if n.Pod != nil {
		ifc.Pod = n.Pod(ifindex)
	}
	if l, err := netlink.LinkByIndex(int(ifindex)); err == nil {
		ifc.Kind = l.Type()
		if ifc.Name == "" {
			ifc.Name = l.Attrs().Name
		}
	}
	if n.cache == nil {
		n.cache = map[uint32]cached{}
	}
	if len(n.cache) > 4096 {
		clear(n.cache)
	}
	n.cache[ifindex] = cached{ifc, t}
	return ifc
}
