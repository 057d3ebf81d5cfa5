// Package rules is the rules capability's unit: it puts the measurement
// rules (the language: internal/rules) in the datapath, reloads the rules
// file when it changes, serves `loupe rules` through the control API, and
// counts what every rule matched, across replacements, by rule id.
package rules

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/api"
	"loupe/internal/capability"
	"loupe/internal/datapath"
	ruleset "loupe/internal/rules"
)

// Name is the capability's name (cfg_cap_rules in bpf/loupe.c).
const Name = "rules"

// Unit is the rules capability.
type Unit struct {
	cfg Config
	log *slog.Logger
	dp  *datapath.Datapath

	// change serialises the changes of the set (the API's, the file's),
	// so that none is lost to another made at the same time.
	change sync.Mutex

	mu       sync.Mutex
	set      ruleset.Set // in force
	compiled *ruleset.Compiled
	fileSum  [32]byte // of the rules file last read, good or not
	// totals are what each rule id matched in the sets replaced so far;
	// the set in force adds its live counts on top.
	totals  map[string]ruleTotals
	groups  map[uint32]uint64 // interface groups last written
	reloads struct{ ok, failed uint64 }
	lastErr string
}

type ruleTotals struct {
	action ruleset.Action
	counts datapath.RuleCounts
}

var (
	_ capability.Unit          = (*Unit)(nil)
	_ capability.RouteProvider = (*Unit)(nil)
)

// New returns the rules unit for cfg. The rules file is read when the unit
// opens: a file that does not parse stops the start, naming its lines.
func New(cfg Config, log *slog.Logger) *Unit {
	return &Unit{cfg: cfg, log: log.With("component", Name), totals: map[string]ruleTotals{}}
}

func (u *Unit) Name() string { return Name }

// Open puts the file's rules (or none) in force before the programs are
// attached, so that the first packet is judged by them.
func (u *Unit) Open(h *capability.Host) error {
	u.dp = h.Datapath
	var s ruleset.Set
	if u.cfg.File != "" {
		data, err := os.ReadFile(u.cfg.File)
		if err != nil {
			return fmt.Errorf("rules: %w", err)
		}
		u.fileSum = sha256.Sum256(data)
		if s, err = parse(u.cfg.File, data); err != nil {
			return fmt.Errorf("rules: %w", err)
		}
	}
	if err := u.install(s); err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	u.log.Info("rules in force", "rules", s.Len(), "file", u.cfg.File)
	return nil
}

func parse(path string, data []byte) (ruleset.Set, error) {
	s, err := ruleset.ParseFile(bytes.NewReader(data))
	if err != nil {
		return ruleset.Set{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// install compiles s and puts it in force: atomically, for every packet.
// What the replaced set's rules counted is added to their ids' totals.
func (u *Unit) install(s ruleset.Set) error {
	c, err := ruleset.Compile(s)
	if err != nil {
		return err
	}
	groups, err := ifaceGroups(c)
	if err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	old, err := u.dp.SetRules(datapath.RulesFrom(c, groups))
	if err != nil {
		return err
	}
	u.addTotals(u.set, old)
	u.set, u.compiled, u.groups = s, c, groups
	return nil
}

// addTotals adds the counts of set's rules, by slot, to their ids.
func (u *Unit) addTotals(set ruleset.Set, counts []datapath.RuleCounts) {
	for i, c := range counts {
		if i >= set.Len() {
			break
		}
		r := set.Rule(i)
		t := u.totals[r.ID]
		t.action = r.Action
		t.counts.Add(c)
		u.totals[r.ID] = t
	}
}

// ifaceGroups maps the interfaces present now to c's interface groups.
func ifaceGroups(c *ruleset.Compiled) (map[uint32]uint64, error) {
	if c.HasIface == 0 {
		return nil, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	out := map[uint32]uint64{}
	for _, ifc := range ifs {
		if g := c.IfaceGroups(ifc.Name); g != 0 {
			out[uint32(ifc.Index)] = g
		}
	}
	return out, nil
}

// Run reloads the rules file when its contents change, and follows the
// interfaces that the rules' globs name, until ctx is done.
func (u *Unit) Run(ctx context.Context) error {
	t := time.NewTicker(u.cfg.Reload)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			u.reloadFile()
			u.refreshIfaces()
		}
	}
}

// reloadFile puts the file's rules in force if the file changed. A file
// that does not parse leaves the rules in force as they are, and says why,
// naming the lines.
func (u *Unit) reloadFile() {
	if u.cfg.File == "" {
		return
	}
	u.change.Lock()
	defer u.change.Unlock()
	data, err := os.ReadFile(u.cfg.File)
	if err != nil {
		u.reloadFailed(err)
		return
	}
	sum := sha256.Sum256(data)
	u.mu.Lock()
	same := sum == u.fileSum
	u.fileSum = sum
	u.mu.Unlock()
	if same {
		return
	}
	s, err := parse(u.cfg.File, data)
	if err == nil {
		err = u.install(s)
	}
	if err != nil {
		u.reloadFailed(err)
		return
	}
	u.mu.Lock()
	u.reloads.ok++
	u.lastErr = ""
	u.mu.Unlock()
	u.log.Info("rules file reloaded", "file", u.cfg.File, "rules", s.Len())
}

func (u *Unit) reloadFailed(err error) {
	u.mu.Lock()
	u.reloads.failed++
	u.lastErr = err.Error()
	u.mu.Unlock()
	u.log.Error("rules file not reloaded: the rules in force stay", "file", u.cfg.File, "err", err)
}

// refreshIfaces writes the interface groups again when interfaces came or
// went.
func (u *Unit) refreshIfaces() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.compiled == nil || u.compiled.HasIface == 0 {
		return
	}
	groups, err := ifaceGroups(u.compiled)
	if err != nil {
		u.log.Warn("following the interfaces of the rules", "err", err)
		return
	}
	if maps.Equal(groups, u.groups) {
		return
	}
	if err := u.dp.SetRuleIfaces(groups); err != nil {
		u.log.Warn("writing the interfaces of the rules", "err", err)
		return
	}
	u.groups = groups
}

func (u *Unit) Close() error { return nil }

// Status says how many rules are in force and how the file's reloads went.
func (u *Unit) Status() capability.Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	d := map[string]any{"rules": u.set.Len(), "file": u.cfg.File, "reloads": u.reloads.ok, "reloads_failed": u.reloads.failed}
	if u.lastErr != "" {
		d["last_error"] = u.lastErr
	}
	return capability.Status{Name: Name, Enabled: true, State: "running", Detail: d}
}

// RuleStatus is a rule in force and what it matched since the agent
// started (through every set it was in).
type RuleStatus struct {
	Rule ruleset.Rule `json:"rule"`
	Counts
}

// Counts are what a rule matched: every packet, and of them those counted
// in a flow (all for measure, 1 in N for sample, none for skip).
type Counts struct {
	Packets         uint64 `json:"packets"`
	Bytes           uint64 `json:"bytes"`
	MeasuredPackets uint64 `json:"measured_packets"`
	MeasuredBytes   uint64 `json:"measured_bytes"`
}

// snapshot returns the rules in force with their counts, and the totals of
// every id ever in force, live counts included.
func (u *Unit) snapshot() ([]RuleStatus, map[string]ruleTotals, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	live, err := u.dp.RuleCounts()
	if err != nil {
		return nil, nil, err
	}
	all := make(map[string]ruleTotals, len(u.totals)+u.set.Len())
	for id, t := range u.totals {
		all[id] = t
	}
	out := make([]RuleStatus, u.set.Len())
	for i := range out {
		r := u.set.Rule(i)
		t := all[r.ID]
		t.action = r.Action
		if i < len(live) {
			t.counts.Add(live[i])
		}
		all[r.ID] = t
		c := t.counts
		out[i] = RuleStatus{Rule: r, Counts: Counts{Packets: c.Packets, Bytes: c.Bytes,
			MeasuredPackets: c.MeasuredPackets, MeasuredBytes: c.MeasuredBytes}}
	}
	return out, all, nil
}

// Collectors are the per-rule counters.
func (u *Unit) Collectors() []prometheus.Collector { return []prometheus.Collector{newCollector(u)} }

// Routes are the control API's rules routes.
func (u *Unit) Routes() []api.Route { return u.routes() }

// apply changes the set in force with f, atomically.
func (u *Unit) apply(f func(ruleset.Set) (ruleset.Set, error)) (ruleset.Set, error) {
	u.change.Lock()
	defer u.change.Unlock()
	u.mu.Lock()
	cur := u.set
	u.mu.Unlock()
	next, err := f(cur)
	if err != nil {
		return ruleset.Set{}, err
	}
	if err := u.install(next); err != nil {
		return ruleset.Set{}, err
	}
	return next, nil
}
