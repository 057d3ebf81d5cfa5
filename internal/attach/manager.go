package attach

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"loupe/internal/ifnames"
)

// Config configures a Manager.
type Config struct {
	Programs Programs
	Mode     Mode
	Position Position
	// Include are interface name globs (path.Match). Empty means every
	// interface but loopback.
	Include []string
	// Exclude globs win over Include.
	Exclude []string
	// PinDir, if set, is where TCX links are pinned (pins.go): they then
	// outlive the agent, and the next agent adopts them. With it, the
	// first resynchronisation also removes what an earlier agent left on
	// interfaces this one does not monitor.
	PinDir string
	// Names is told every interface's name as the watcher sees it, and
	// when it goes (nil: a table of the manager's own).
	Names  *ifnames.Table
	Logger *slog.Logger
}

// Stats are the manager's counters.
type Stats struct {
	Mode     Mode // the mechanism in use (Auto until the first attach)
	Attached int  // interfaces attached now
	Attaches uint64
	Detaches uint64
	Errors   uint64 // failed attaches and detaches
	Resyncs  uint64 // netlink subscriptions restarted after an error
}

type attachment struct {
	name   string
	closer io.Closer // nil when the interface is known but not monitored
}

// Manager attaches the programs to every matching interface of the current
// network namespace, follows interfaces as they appear and disappear
// (netlink), and tells its names table (internal/ifnames) what it sees.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	att      attacher
	links    map[int]*attachment // by ifindex: every interface seen
	attached int
	// adopted are pinned links an earlier agent left, by ifindex, until
	// they are updated (monitored) or detached; firstSync is set until
	// the first resynchronisation settled them all.
	adopted   map[int]*adoptedLinks
	firstSync bool

	attaches, detaches, errs, resyncs atomic.Uint64
	ready                             chan struct{}
}

// NewManager validates the configuration. Nothing is attached before Run.
func NewManager(cfg Config) (*Manager, error) {
	for _, g := range append(append([]string{}, cfg.Include...), cfg.Exclude...) {
		if _, err := path.Match(g, ""); err != nil {
			return nil, fmt.Errorf("interface pattern %q: %w", g, err)
		}
	}
	if cfg.Programs.Ingress == nil || cfg.Programs.Egress == nil {
		return nil, errors.New("attach: both programs are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Names == nil {
		cfg.Names = ifnames.New(nil)
	}
	m := &Manager{
		cfg:   cfg,
		log:   cfg.Logger.With("component", "attach"),
		links: make(map[int]*attachment),
		ready: make(chan struct{}),
	}
	switch cfg.Mode {
	case TCX:
		m.att = tcxAttacher{pinDir: cfg.PinDir}
	case TC:
		m.att = tcAttacher{}
	}
	return m, nil
}

// Ready is closed once the interfaces present at start have been attached.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// Matches reports whether an interface name is to be monitored.
func (m *Manager) Matches(name string) bool {
	for _, g := range m.cfg.Exclude {
		if ok, _ := path.Match(g, name); ok {
			return false
		}
	}
	if len(m.cfg.Include) == 0 {
		return name != "lo"
	}
	for _, g := range m.cfg.Include {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// Run attaches to the existing interfaces, then follows link changes until
// ctx is done, and finally detaches everything. It returns only after every
// link it made is closed.
func (m *Manager) Run(ctx context.Context) error {
	defer m.detachAll()
	if m.cfg.PinDir != "" {
		if err := os.MkdirAll(m.cfg.PinDir, 0o700); err != nil {
			return fmt.Errorf("create link pin directory: %w", err)
		}
		m.mu.Lock()
		m.adopted = loadPinnedLinks(m.cfg.PinDir, m.log)
		m.firstSync = true
		m.mu.Unlock()
	}
	readyOnce := sync.OnceFunc(func() { close(m.ready) })
	defer readyOnce()
	warnOnce := sync.OnceFunc(m.warnUnmatched)

	for {
		updates := make(chan netlink.LinkUpdate, 256)
		done := make(chan struct{})
		subErr := make(chan error, 1)
		// Subscribe before listing, so that no interface can appear
		// unseen in between; handling is idempotent, so seeing one
		// twice is harmless.
		err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
			ErrorCallback: func(err error) {
				select {
				case subErr <- err:
				default:
				}
			},
			ReceiveBufferSize: 1 << 20,
		})
		if err != nil {
			return fmt.Errorf("subscribe to link changes: %w", err)
		}
		if err := m.resync(); err != nil {
			close(done)
			return err
		}
		warnOnce()
		readyOnce()

		err = m.follow(ctx, updates)
		close(done)
		for range updates { // the subscription goroutine closes it
		}
		if ctx.Err() != nil {
			return nil
		}
		m.resyncs.Add(1)
		select {
		case e := <-subErr:
			err = errors.Join(err, e)
		default:
		}
		m.log.Warn("link subscription lost, resynchronising", "err", err)
	}
}

func (m *Manager) follow(ctx context.Context, updates <-chan netlink.LinkUpdate) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-updates:
			if !ok {
				return errors.New("subscription closed")
			}
			idx := int(u.Attrs().Index)
			switch u.Header.Type {
			case unix.RTM_NEWLINK:
				m.seen(idx, u.Attrs().Name)
			case unix.RTM_DELLINK:
				m.removed(idx)
			}
		}
	}
}

// warnUnmatched warns about the Include globs that match no interface
// present at start: a typo looks like an interface yet to come, and the
// manager keeps watching for both.
func (m *Manager) warnUnmatched() {
	m.mu.Lock()
	names := make([]string, 0, len(m.links))
	for _, a := range m.links {
		names = append(names, a.name)
	}
	m.mu.Unlock()
	if globs := unmatched(m.cfg.Include, names); len(globs) > 0 {
		m.log.Warn("interface patterns match no interface yet; watching for them",
			"patterns", strings.Join(globs, ","))
	}
}

// unmatched returns the globs that match none of names.
func unmatched(globs, names []string) []string {
	var out []string
	for _, g := range globs {
		if !slices.ContainsFunc(names, func(n string) bool { ok, _ := path.Match(g, n); return ok }) {
			out = append(out, g)
		}
	}
	return out
}

// resync makes the attached set equal to what the interface list says.
func (m *Manager) resync() error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	present := make(map[int]bool, len(links))
	for _, l := range links {
		present[l.Attrs().Index] = true
		m.seen(l.Attrs().Index, l.Attrs().Name)
	}
	m.mu.Lock()
	var stale []int
	for idx := range m.links {
		if !present[idx] {
			stale = append(stale, idx)
		}
	}
	m.mu.Unlock()
	for _, idx := range stale {
		m.removed(idx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.firstSync {
		for idx, a := range m.adopted {
			m.dropAdopted(idx, a, "its interface is not in this namespace")
		}
		m.firstSync = false
	}
	return nil
}

// dropAdopted detaches an earlier agent's pinned links; m.mu is held.
func (m *Manager) dropAdopted(idx int, a *adoptedLinks, why string) {
	delete(m.adopted, idx)
	if err := a.detach(); err != nil {
		m.errs.Add(1)
		m.log.Warn("detaching an earlier agent's pinned links failed", "ifindex", idx, "err", err)
		return
	}
	m.log.Info("detached an earlier agent's pinned links", "ifindex", idx, "reason", why)
}

// seen handles an interface that exists (new, renamed, or listed again).
func (m *Manager) seen(idx int, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.links[idx]
	if a == nil {
		a = &attachment{}
		m.links[idx] = a
	}
	a.name = name
	m.cfg.Names.Set(uint32(idx), name)
	want := m.Matches(name)
	switch {
	case want && a.closer == nil:
		c, err := m.attachLocked(idx)
		if err != nil {
			m.errs.Add(1)
			if errors.Is(err, unix.ENODEV) {
				m.log.Debug("interface vanished before attach", "iface", name, "ifindex", idx)
			} else {
				m.log.Error("attach failed", "iface", name, "ifindex", idx, "err", err)
			}
			return
		}
		a.closer = c
		m.attached++
		m.attaches.Add(1)
		m.log.Info("attached", "iface", name, "ifindex", idx, "mode", m.att.mode())
	case !want && a.closer != nil:
		m.detachLocked(idx, a) // renamed out of the monitored set
	case !want && m.firstSync:
		// Monitored by an earlier agent, not by this configuration.
		if ad := m.adopted[idx]; ad != nil {
			m.dropAdopted(idx, ad, "the interface is not monitored any more")
		}
		m.removeFilters(idx, name)
	}
}

// removeFilters deletes the cls_bpf filters an earlier agent left on an
// interface; m.mu is held.
func (m *Manager) removeFilters(idx int, name string) {
	if m.cfg.PinDir == "" {
		return
	}
	n, err := removeOurFilters(idx)
	if err != nil && !errors.Is(err, unix.ENODEV) {
		m.errs.Add(1)
		m.log.Warn("removing an earlier agent's tc filters failed", "iface", name, "ifindex", idx, "err", err)
	} else if n > 0 {
		m.log.Info("removed an earlier agent's tc filters", "iface", name, "ifindex", idx, "filters", n)
	}
}

func (m *Manager) attachLocked(idx int) (io.Closer, error) {
	if ad := m.adopted[idx]; ad != nil {
		if m.cfg.Mode != TC {
			c, err := ad.update(m.cfg.Programs)
			if err == nil {
				delete(m.adopted, idx)
				if m.att == nil {
					m.att = tcxAttacher{pinDir: m.cfg.PinDir}
				}
				m.log.Info("adopted an earlier agent's pinned links: programs replaced in place", "ifindex", idx)
				return c, nil
			}
			m.log.Warn("cannot adopt pinned links; attaching anew", "ifindex", idx, "err", err)
		}
		// Detached before this agent attaches, so that no packet is
		// counted by both: a switch of attach mode across a restart
		// misses the packets of that instant instead.
		m.dropAdopted(idx, ad, "attach mode tc")
	}
	if _, ok := m.att.(tcAttacher); !ok {
		// An earlier agent's cls_bpf filter would count every packet a
		// second time beside a TCX link.
		name := ""
		if a := m.links[idx]; a != nil {
			name = a.name
		}
		m.removeFilters(idx, name)
	}
	if m.att != nil {
		return m.att.attach(idx, m.cfg.Programs, m.cfg.Position)
	}
	// Auto: the first attach decides, once, what this kernel has.
	tcx := tcxAttacher{pinDir: m.cfg.PinDir}
	c, err := tcx.attach(idx, m.cfg.Programs, m.cfg.Position)
	if err == nil {
		m.att = tcx
		return c, nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return nil, err
	}
	m.log.Warn("TCX is not supported by this kernel; falling back to clsact + cls_bpf", "err", err)
	m.att = tcAttacher{}
	return m.att.attach(idx, m.cfg.Programs, m.cfg.Position)
}

// removed handles an interface that disappeared.
func (m *Manager) removed(idx int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.links[idx]
	if a == nil {
		return
	}
	if a.closer != nil {
		m.detachLocked(idx, a)
	}
	delete(m.links, idx)
	m.cfg.Names.Remove(uint32(idx))
}

func (m *Manager) detachLocked(idx int, a *attachment) {
	if err := a.closer.Close(); err != nil {
		m.errs.Add(1)
		m.log.Warn("detach failed", "iface", a.name, "ifindex", idx, "err", err)
	} else {
		m.log.Info("detached", "iface", a.name, "ifindex", idx)
	}
	a.closer = nil
	m.attached--
	m.detaches.Add(1)
}

func (m *Manager) detachAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for idx, a := range m.links {
		if a.closer != nil {
			m.detachLocked(idx, a)
		}
	}
	for idx, a := range m.adopted {
		m.dropAdopted(idx, a, "stopping")
	}
}

// Stats returns a snapshot of the manager's counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	mode, attached := Auto, m.attached
	if m.att != nil {
		mode = m.att.mode()
	}
	m.mu.Unlock()
	return Stats{
		Mode:     mode,
		Attached: attached,
		Attaches: m.attaches.Load(),
		Detaches: m.detaches.Load(),
		Errors:   m.errs.Load(),
		Resyncs:  m.resyncs.Load(),
	}
}

// Attached returns the names of the interfaces attached now, sorted.
func (m *Manager) Attached() []string {
	m.mu.Lock()
	names := make([]string, 0, m.attached)
	for _, a := range m.links {
		if a.closer != nil {
			names = append(names, a.name)
		}
	}
	m.mu.Unlock()
	slices.Sort(names)
	return names
}
