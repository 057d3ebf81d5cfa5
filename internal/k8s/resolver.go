package k8s

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/client-go/rest"
)

// Options are what the resolver takes besides its configuration.
type Options struct {
	Logger *slog.Logger
	// Now is the clock of event times and of IfaceOwner; nil: time.Now.
	Now func() time.Time
	// Netlink reads this host's addresses, routes and neighbours; nil: a
	// handle on the namespace the agent runs in. Tests give a handle on a
	// namespace of their own.
	Netlink *netlink.Handle
	// ProbeInterval is how often the API server's /readyz is asked while
	// it is unreachable, and how often it is checked otherwise; 0: 5s.
	ProbeInterval time.Duration
	// NetRefresh is how often the host's routes and neighbours are read
	// again (interfaces to pods); 0: 5s.
	NetRefresh time.Duration
}

// maxSpansPerAddr bounds the past of one address: enough for a Job that
// reuses an address every few seconds over the default ten minutes, and
// small enough that a lookup scans a few cache lines.
const maxSpansPerAddr = 64

// Resolver names addresses by (address, time). It is safe for concurrent
// use. The zero of its answers, Names{}, means enrichment is off.
type Resolver struct {
	log  *slog.Logger
	now  func() time.Time
	cfg  Config
	node string // this node's name: only its pods are watched ("": all)

	on     bool
	source string // where the cluster's configuration came from
	rest   *rest.Config
	opts   Options

	addrs     *history[netip.Addr]
	nodePorts *history[portProto]
	net       *netView

	// wmu serialises the writers: the informers' handlers each run on
	// their informer's goroutine, and a pod's names depend on its owners'
	// objects, so computing and storing them must not interleave.
	wmu  sync.Mutex
	held map[string]holding // by object key ("pod/UID")

	health health
	// informers is set once Run has built them, for Status and Synced.
	informers informerSet
	started   chan struct{} // closed once informers is set
}

// New returns a resolver for cfg. Without a cluster it returns a resolver
// that is off (every lookup answers Names{}) and logs why; with a
// kubeconfig that cannot be read, an error. It contacts nothing: Run does.
func New(cfg Config, opts Options) (*Resolver, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = 5 * time.Second
	}
	if opts.NetRefresh == 0 {
		opts.NetRefresh = 5 * time.Second
	}
	if cfg.History == 0 {
		cfg.History = DefaultConfig().History
	}
	r := &Resolver{
		log:       opts.Logger.With("component", "k8s"),
		now:       opts.Now,
		cfg:       cfg,
		node:      cfg.node(),
		opts:      opts,
		addrs:     newHistory[netip.Addr](cfg.History, maxSpansPerAddr),
		nodePorts: newHistory[portProto](cfg.History, maxSpansPerAddr),
		held:      map[string]holding{},
		started:   make(chan struct{}),
	}
	rc, source, err := cfg.restConfig()
	if errors.Is(err, errNoCluster) {
		r.log.Info("kubernetes names off", "reason", err.Error())
		r.source = err.Error()
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	r.on, r.rest, r.source = true, rc, source
	r.net = newNetView(opts.Netlink, r.log)
	return r, nil
}

// On reports whether the resolver watches a cluster.
func (r *Resolver) On() bool { return r.on }

// Run watches the cluster and the host until ctx is done. Off, it returns
// at once. The API server's being unreachable, at start or later, is no
// error: the resolver keeps what it knew, reports the outage in Status and
// the metrics, and catches up when the server answers again.
func (r *Resolver) Run(ctx context.Context) error {
	if !r.on {
		return nil
	}
	routeKlog(r.log)
	set, err := r.newInformers()
	if err != nil {
		return err
	}
	r.informers = set
	close(r.started)
	r.log.Info("watching kubernetes", "config", r.source, "node", nodeOrAll(r.node), "history", r.cfg.History)

	var wg sync.WaitGroup
	wg.Go(func() { set.run(ctx) })
	wg.Go(func() { r.probe(ctx, set.probeClient) })
	wg.Go(func() { r.net.run(ctx, r.opts.NetRefresh) })
	wg.Go(func() { r.pruneLoop(ctx) })
	wg.Wait()
	return nil
}

func nodeOrAll(node string) string {
	if node == "" {
		return "(every node)"
	}
	return node
}

// Synced reports whether every informer has listed its objects once.
func (r *Resolver) Synced() bool {
	select {
	case <-r.started:
		return r.informers.synced()
	default:
		return false
	}
}

// WaitSynced waits until Synced or ctx is done, and says which.
func (r *Resolver) WaitSynced(ctx context.Context) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !r.Synced() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// Resolve names addr as it was at time t (a record's time): the pod,
// service or node that held it then, else host (an address of this
// machine) or external. Off, it returns Names{}. It takes well under a
// microsecond and allocates nothing (bench/k8s).
func (r *Resolver) Resolve(addr netip.Addr, t time.Time) Names {
	return r.resolve(addr, t, portProto{})
}

// ResolveEndpoint is Resolve for one end of a flow, with its port and IP
// protocol (6 TCP, 17 UDP, 132 SCTP): a node's or this host's address on a
// service's node port names that service too, and a pod that is an
// endpoint of several services names the one serving that port.
func (r *Resolver) ResolveEndpoint(addr netip.Addr, port uint16, proto uint8, t time.Time) Names {
	return r.resolve(addr, t, portProto{port: port, proto: proto})
}

func (r *Resolver) resolve(addr netip.Addr, t time.Time, pp portProto) Names {
	if !r.on || !addr.IsValid() {
		return Names{}
	}
	addr = addr.Unmap()
	at := t.UnixNano()
	n, ok := r.addrs.names(addr, at, pp)
	if !ok {
		if r.net.local(addr) {
			n = Names{Kind: KindHost, Node: r.node}
		} else {
			n = Names{Kind: KindExternal}
		}
	}
	if pp.port != 0 && (n.Kind == KindNode || n.Kind == KindHost) {
		if s, ok := r.nodePorts.names(pp, at, portProto{}); ok {
			n.Namespace, n.Service = s.Namespace, s.Service
		}
	}
	return n
}

// IfaceOwner names the pod on the other end of a host-side interface (a
// veth whose peer is in the pod's namespace): the pod whose IP the host
// routes to that interface, or has as a neighbour on it, or whose MAC a
// bridge learnt on that port. Names{} when the interface is no pod's, or
// enrichment is off. It names the pod as it is now: an interface index is
// only ever the current interface's.
func (r *Resolver) IfaceOwner(ifindex int) Names {
	if !r.on {
		return Names{}
	}
	now := r.now()
	for _, a := range r.net.ifaceAddrs(ifindex) {
		if n := r.Resolve(a, now); n.Kind == KindPod {
			return n
		}
	}
	return Names{}
}

// apply makes what the object key holds next. Addresses it no longer holds
// (or holds for another holder: an EndpointSlice whose endpoint changed
// pod) are closed at c.seen; the others are opened, or their names updated
// in place. Called with wmu held.
func (r *Resolver) apply(key string, src source, next holding, c claim) {
	prev := r.held[key]
	for a, o := range prev.addrs {
		if n, ok := next.addrs[a]; !ok || n.who != o.who {
			r.addrs.close(a, key, c.seen)
		}
	}
	for p, o := range prev.ports {
		if n, ok := next.ports[p]; !ok || n.who != o.who {
			r.nodePorts.close(p, key, c.seen)
		}
	}
	for a, o := range next.addrs {
		r.addrs.open(a, src, key, o, c)
	}
	for p, o := range next.ports {
		r.nodePorts.open(p, src, key, o, c)
	}
	if len(next.addrs) == 0 && len(next.ports) == 0 {
		delete(r.held, key)
	} else {
		r.held[key] = next
	}
}

// pruneLoop drops the spans older than the history.
func (r *Resolver) pruneLoop(ctx context.Context) {
	every := min(r.cfg.History/4, 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := r.now().UnixNano()
			r.addrs.prune(now)
			r.nodePorts.prune(now)
		}
	}
}
