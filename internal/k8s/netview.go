package k8s

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// netView is what the host's own network tables say, read with netlink in
// the agent's namespace alone: entering a pod's namespace to read its
// interfaces would need CAP_SYS_ADMIN, which the agent does not have.
//
//   - local: this machine's addresses, which resolve as host when nothing
//     in the cluster claims them;
//   - ifaces: for each interface, the addresses the host reaches through
//     it. A pod's host-side veth is found by the pod's IP: a /32 (/128)
//     route to it through the veth (Calico, Cilium, the ptp plugin), or a
//     neighbour entry on the veth, or for a bridge (the bridge plugin,
//     flannel) the bridge port on which the neighbour's MAC was learnt.
//
// The tables are read again every refresh interval, and sooner when asked
// for an interface they do not know (rate-limited), so a new pod's veth
// gets its name within a second of its first lookup.
type netView struct {
	h      *netlink.Handle
	log    *slog.Logger
	locals atomic.Pointer[map[netip.Addr]struct{}]
	ifaces atomic.Pointer[map[int][]netip.Addr]
	kick   chan struct{}
}

func newNetView(h *netlink.Handle, log *slog.Logger) *netView {
	v := &netView{h: h, log: log, kick: make(chan struct{}, 1)}
	v.locals.Store(&map[netip.Addr]struct{}{})
	v.ifaces.Store(&map[int][]netip.Addr{})
	return v
}

// minKick is the shortest time between two reads asked for by lookups.
const minKick = time.Second

func (v *netView) run(ctx context.Context, every time.Duration) {
	if v.h == nil {
		h, err := netlink.NewHandle()
		if err != nil {
			v.log.Warn("no netlink: interfaces are not named after pods, and only loopback resolves as host", "err", err)
			return
		}
		defer h.Close()
		v.h = h
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last time.Time
	for {
		v.refresh()
		last = time.Now()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-v.kick:
			if wait := minKick - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
	}
}

// refresh reads the tables once. A table that cannot be read keeps its
// last view.
func (v *netView) refresh() {
	if addrs, err := v.h.AddrList(nil, netlink.FAMILY_ALL); err == nil {
		locals := make(map[netip.Addr]struct{}, len(addrs))
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				locals[ip.Unmap()] = struct{}{}
			}
		}
		v.locals.Store(&locals)
	} else {
		v.log.Debug("reading addresses", "err", err)
	}

	ifaces := map[int][]netip.Addr{}
	add := func(ifindex int, ip net.IP) {
		if a, ok := netip.AddrFromSlice(ip); ok && ifindex > 0 {
			ifaces[ifindex] = append(ifaces[ifindex], a.Unmap())
		}
	}
	routes, err := v.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		v.log.Debug("reading routes", "err", err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Type != unix.RTN_UNICAST {
			continue
		}
		if ones, bits := r.Dst.Mask.Size(); ones == bits && bits > 0 {
			add(r.LinkIndex, r.Dst.IP)
		}
	}
	// A bridge's forwarding table: which port each MAC was learnt on.
	type fdbKey struct {
		bridge int
		mac    string
	}
	ports := map[fdbKey]int{}
	if fdb, err := v.h.NeighList(0, unix.AF_BRIDGE); err == nil {
		for _, n := range fdb {
			if n.MasterIndex > 0 && len(n.HardwareAddr) > 0 {
				ports[fdbKey{n.MasterIndex, string(n.HardwareAddr)}] = n.LinkIndex
			}
		}
	}
	neighs, err := v.h.NeighList(0, netlink.FAMILY_ALL)
	if err != nil {
		v.log.Debug("reading neighbours", "err", err)
	}
	for _, n := range neighs {
		if n.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE|netlink.NUD_NOARP) != 0 || n.IP == nil {
			continue
		}
		if port, ok := ports[fdbKey{n.LinkIndex, string(n.HardwareAddr)}]; ok {
			add(port, n.IP)
		} else {
			add(n.LinkIndex, n.IP)
		}
	}
	v.ifaces.Store(&ifaces)
}

// local reports whether addr is one of this machine's addresses.
func (v *netView) local(addr netip.Addr) bool {
	if addr.IsLoopback() {
		return true
	}
	_, ok := (*v.locals.Load())[addr]
	return ok
}

// ifaceAddrs returns the addresses reached through an interface, and asks
// for a new read of the tables when it knows none.
func (v *netView) ifaceAddrs(ifindex int) []netip.Addr {
	addrs := (*v.ifaces.Load())[ifindex]
	if len(addrs) == 0 {
		select {
		case v.kick <- struct{}{}:
		default:
		}
	}
	return addrs
}
