// Package capture is the capture capability's userspace half: it puts the
// triggers in force in the datapath (bpf/capture/), reads the traces the
// kernel starts and the packets it sends, and writes them as pcapng to
// rotating files and to the clients that follow the capture through the
// control API (`loupe capture --follow`). The mirror interface gets its
// clones from the kernel directly.
//
// Packets are not flow records: they never enter the flow pipeline. The
// path is datapath (perf buffer) -> this unit -> pcapng files and followers.
//
// Configuration: the capture section (Config). Control API: the triggers
// (GET, POST /api/v1/triggers, DELETE /api/v1/triggers/{name}) and the
// live stream (GET /api/v1/capture/follow). CLI: `loupe triggers`,
// `loupe capture` (commands.go).
package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/api"
	"loupe/internal/capability"
	"loupe/internal/datapath"
	"loupe/internal/flow"
	"loupe/internal/pcapfilter"
	"loupe/internal/pcapng"
)

// Name is the capability's name.
const Name = "capture"

// Unit is the capture capability.
type Unit struct {
	cfg     Config
	log     *slog.Logger
	version string
	clock   flow.Clock

	dp        *datapath.Datapath
	ifaceName func(uint32) string
	mirror    uint32 // ifindex; 0: none

	mu       sync.Mutex // guards triggers, slots and followers' effect on the datapath
	triggers []Trigger
	slots    [datapath.MaxRules]string // rule slot -> trigger name ("" free)
	// named is, per rule slot, the triggers that held it, oldest first:
	// the name a packet's comment gives is that of the trigger that held
	// its slot when the packet crossed the hook (slotName).
	named [datapath.MaxRules][]slotHolder
	// namedGen counts the changes to named, for the readers' caches of
	// it (packetConv.slotName).
	namedGen atomic.Uint64

	events  *ringbuf.Reader
	packets *perf.Reader
	files   *pcapng.Rotator
	series  *pcapng.Series
	follow  *followers
	recent  traceLog
	// onDemand is held by the on-demand capture running (one at a time:
	// the datapath has one filter slot per direction).
	onDemand sync.Mutex

	state atomic.Value // string
	stats stats
	// fileClock is the capture files' clock (names, ages): the wall
	// clock as the packet reader last read it, at each release of
	// packets (every readWake when packets are few, within about a
	// second under load: files age that much later). Read for every
	// packet written, time.Now was the reader's biggest cost at high
	// rates.
	fileClock atomic.Int64 // Unix ns
}

// stats are the unit's own counters.
type stats struct {
	traces, packets, kept, bytes atomic.Uint64
	readerLost                   atomic.Uint64 // perf: records the kernel could not store
	writeErrors                  atomic.Uint64
	onDemandLost                 atomic.Uint64 // on-demand captures: records the kernel could not store
	late                         atomic.Uint64 // live packets written behind a later one (reorder)
	lastTrace                    atomic.Value  // traceInfo
}

var (
	_ capability.Unit          = (*Unit)(nil)
	_ capability.RouteProvider = (*Unit)(nil)
)

// New returns the capture unit for cfg; version names the files' writer.
// It checks the triggers now, so that a bad one stops the start.
func New(cfg Config, version string, log *slog.Logger) (*Unit, error) {
	ts, err := parseTriggers(cfg.Triggers)
	if err != nil {
		return nil, fmt.Errorf("capture.triggers: %w", err)
	}
	u := &Unit{cfg: cfg, version: version, clock: flow.SystemClock{}, log: log.With("component", Name), follow: newFollowers()}
	for _, t := range ts {
		if err := u.addLocked(t); err != nil {
			return nil, err
		}
	}
	u.state.Store("starting")
	return u, nil
}

// Name implements capability.Unit.
func (u *Unit) Name() string { return Name }

// Sizes are the datapath sizes the configuration asks for.
func (c Config) Sizes() datapath.CaptureSizes {
	return datapath.CaptureSizes{Connections: c.Connections, KeepPackets: c.KeepPackets,
		KeepSlotsPerCPU: c.KeepSlots, KeepSnap: c.KeepBytes, HTTPSeries: c.HTTPMaxSeries}
}

// Open resolves the mirror interface, opens the capture directory and the
// readers, and puts the triggers in force.
func (u *Unit) Open(h *capability.Host) error {
	u.dp, u.ifaceName = h.Datapath, h.IfaceName
	if u.cfg.Mirror != "" {
		ifc, err := net.InterfaceByName(u.cfg.Mirror)
		if err != nil {
			return fmt.Errorf("capture.mirror %q: %w", u.cfg.Mirror, err)
		}
		u.mirror = uint32(ifc.Index)
	}
	if u.cfg.Dir != "" {
		u.tickFileClock()
		r, err := pcapng.NewRotator(u.cfg.Dir, pcapng.RotatorOptions{
			Writer:       pcapng.Options{UserAppl: "loupe " + u.version, Comment: "triggered capture"},
			MaxFileBytes: int64(u.cfg.FileMaxSize), MaxFileAge: u.cfg.FileMaxAge,
			MaxFiles: u.cfg.MaxFiles, MaxBytes: int64(u.cfg.MaxSize), Logger: u.log,
			Now: func() time.Time { return time.Unix(0, u.fileClock.Load()) },
		})
		if err != nil {
			return fmt.Errorf("capture.dir: %w", err)
		}
		u.files = r
		if u.series, err = r.Open(pcapng.DefaultPrefix); err != nil {
			return fmt.Errorf("capture.dir: %w", err)
		}
	}
	var err error
	if u.events, err = u.dp.OpenCaptureEvents(); err != nil {
		return err
	}
	if u.packets, err = u.dp.OpenCapturePackets(int(u.cfg.BufferSize)); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.applyLocked()
}

// applyLocked writes the triggers and the outputs to the datapath.
func (u *Unit) applyLocked() error {
	c := datapath.CaptureConfig{
		MirrorIfindex:  u.mirror,
		MaxTriggersSec: uint32(u.cfg.MaxTriggersPerSec),
		Snaplen:        uint32(u.cfg.Snaplen),
		Output:         u.files != nil || u.follow.count() > 0,
		Idle:           u.cfg.IdleTimeout,
		MaxAge:         u.cfg.MaxAge,
	}
	// Slots keep their index while their trigger lives: a running trace
	// finds its limits by it. A free slot is a rule of no kind.
	last := -1
	for i, name := range u.slots {
		if name != "" {
			last = i
		}
	}
	c.Rules = make([]datapath.Rule, last+1)
	var filters [datapath.MaxRules]*pcapfilter.Filter
	for _, t := range u.triggers {
		rs := t.rules()
		k := 0
		for i, name := range u.slots {
			if name == t.Name {
				c.Rules[i] = rs[k]
				k++
				if t.compiled != nil {
					filters[i] = t.compiled
					c.Filters |= 1 << i
				}
			}
		}
	}
	if u.dp == nil {
		return nil
	}
	// The admission programs before the rules that need them; the rules
	// that no longer do before their programs go.
	if c.Filters != 0 {
		if err := u.dp.InstallAdmission(filters); err != nil {
			return err
		}
		return u.dp.SetCaptureConfig(c)
	}
	if err := u.dp.SetCaptureConfig(c); err != nil {
		return err
	}
	return u.dp.RemoveAdmission()
}

// addLocked takes slots for t's rules.
func (u *Unit) addLocked(t Trigger) error {
	for _, have := range u.triggers {
		if have.Name == t.Name {
			return fmt.Errorf("%w: %q", errTriggerExists, t.Name)
		}
	}
	need := len(t.rules())
	var free []int
	for i, name := range u.slots {
		if name == "" {
			free = append(free, i)
		}
	}
	if len(free) < need {
		return fmt.Errorf("%w: trigger %q needs %d rules, %d of %d are free", errTooManyRules, t.Name, need, len(free), datapath.MaxRules)
	}
	// Before the datapath switches: no packet of t's rules comes earlier.
	since := u.clock.Mono()
	for _, i := range free[:need] {
		u.slots[i] = t.Name
		u.named[i] = append(u.named[i], slotHolder{since: since, name: t.Name})
		if n := len(u.named[i]); n > slotHistory {
			u.named[i] = append(u.named[i][:0], u.named[i][n-slotHistory:]...)
		}
	}
	u.namedGen.Add(1)
	u.triggers = append(u.triggers, t)
	return nil
}

var (
	errTriggerExists = errors.New("a trigger of that name exists")
	errTooManyRules  = errors.New("too many rules")
	errNoTrigger     = errors.New("no such trigger")
)

// AddTrigger puts t in force from the next packet on.
func (u *Unit) AddTrigger(t Trigger) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.addLocked(t); err != nil {
		return err
	}
	return u.applyLocked()
}

// DeleteTrigger removes the trigger named name. Traces it started end at
// their next packet (their rule is gone), unless a new trigger took its
// slot, whose limits then apply.
func (u *Unit) DeleteTrigger(name string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	i := -1
	for k, t := range u.triggers {
		if t.Name == name {
			i = k
		}
	}
	if i < 0 {
		return fmt.Errorf("%w: %q", errNoTrigger, name)
	}
	u.triggers = append(u.triggers[:i], u.triggers[i+1:]...)
	for k, n := range u.slots {
		if n == name {
			u.slots[k] = ""
		}
	}
	return u.applyLocked()
}

// Triggers returns the triggers in force.
func (u *Unit) Triggers() []Trigger {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Trigger(nil), u.triggers...)
}

// slotHolder is a trigger that took a rule slot at since (CLOCK_MONOTONIC).
type slotHolder struct {
	since uint64
	name  string
}

// slotHistory is how many holders of a slot are remembered: a packet read
// after its slot changed hands that many times names the oldest.
const slotHistory = 4

// slotName names the trigger of a packet (or trace event) the datapath
// stamped with rule at mono: the trigger that held the slot then. The
// reader runs behind the datapath, so the slot may have been freed or
// taken by another trigger since; and a trace outlives its trigger's
// deletion until its next packet. A freed slot keeps naming its last
// holder until another trigger takes it.
func (u *Unit) slotName(rule uint8, mono uint64) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if int(rule) >= len(u.named) || len(u.named[rule]) == 0 {
		return ""
	}
	held := u.named[rule]
	for i := len(held) - 1; i > 0; i-- {
		if mono >= held[i].since {
			return held[i].name
		}
	}
	return held[0].name
}

// newestHolder returns the trigger that took rule slot rule last, if any,
// and the generation of named it was read in.
func (u *Unit) newestHolder(rule uint8) (h slotHolder, ok bool, gen uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	gen = u.namedGen.Load()
	if int(rule) >= len(u.named) || len(u.named[rule]) == 0 {
		return slotHolder{}, false, gen
	}
	return u.named[rule][len(u.named[rule])-1], true, gen
}

// Run reads traces and packets until ctx is done (the programs are
// detached by then), then what the kernel still holds.
func (u *Unit) Run(ctx context.Context) error {
	u.state.Store("running")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		u.readEvents(ctx)
	}()
	err := u.readPackets(ctx)
	wg.Wait()
	u.state.Store("stopping")
	return err
}

// Close flushes and closes the files and stops the followers.
func (u *Unit) Close() error {
	var errs []error
	u.follow.closeAll()
	if u.packets != nil {
		errs = append(errs, u.packets.Close())
	}
	if u.events != nil {
		errs = append(errs, u.events.Close())
	}
	if u.series != nil {
		errs = append(errs, u.series.Close())
	}
	if u.files != nil {
		errs = append(errs, u.files.Close())
	}
	u.state.Store("stopped")
	return errors.Join(errs...)
}

// Collectors implements capability.Unit.
func (u *Unit) Collectors() []prometheus.Collector { return []prometheus.Collector{newCollector(u)} }

// Status implements capability.Unit.
func (u *Unit) Status() capability.Status {
	s := capability.Status{Name: Name, Enabled: true, State: u.state.Load().(string), Detail: map[string]any{}}
	var names []string
	for _, t := range u.Triggers() {
		names = append(names, t.Text)
	}
	s.Detail["triggers"] = names
	s.Detail["traces"] = u.stats.traces.Load()
	s.Detail["packets_written"] = u.stats.packets.Load()
	s.Detail["followers"] = u.follow.count()
	if u.files != nil {
		s.Detail["dir"] = u.files.Dir()
		s.Detail["files_started"] = u.files.Stats().Files
	}
	if u.cfg.Mirror != "" {
		s.Detail["mirror"] = u.cfg.Mirror
	}
	if u.dp != nil {
		s.Detail["kernel_memory_bytes"] = u.dp.CaptureMemoryBytes()
	}
	return s
}

// Routes implements capability.RouteProvider.
func (u *Unit) Routes() []api.Route { return u.routes() }

// tickFileClock reads the wall clock for the capture files.
func (u *Unit) tickFileClock() { u.fileClock.Store(u.clock.Now().UnixNano()) }

// monoToWall converts a CLOCK_MONOTONIC time from the datapath to Unix
// nanoseconds.
func (u *Unit) monoToWall(mono uint64) int64 {
	now := u.clock.Now().UnixNano()
	return now - int64(u.clock.Mono()-mono)
}

// deadline wakes the readers to look at their context.
const readWake = 200 * time.Millisecond

func isDeadline(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
