package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"loupe/internal/rules"
)

// Rules (bpf/rules/rules.h) decide what the flows capability measures. The
// datapath holds two sets; SetRules fills the one the programs do not read,
// flips the selector, waits until no program can still read the old one,
// and hands back the old one's counters, so that a replacement is atomic
// for every packet and no count is lost or given to the wrong rule.
//
// The selector holds a generation, not just the set: the programs keep
// each flow's verdict tagged with the generation it was judged under, and
// a new generation makes every kept verdict stale at once. SetRules moves
// it by one (the other set), SetRuleIfaces by two (the same set, judged
// again with the interfaces' new groups).

// Limits of one rule set, as rules.h has them.
const (
	MaxRuleSlots      = 16384
	MaxRuleCandidates = 32
)

// Rule actions (enum rule_action).
const (
	RuleMeasure   uint8 = 0
	RuleSkip      uint8 = 1
	RuleSample    uint8 = 2
	RuleAggregate uint8 = 3
)

// Port sides (enum rule_port_side).
const (
	RulePortEither uint8 = 0
	RulePortSrc    uint8 = 1
	RulePortDst    uint8 = 2
)

// RuleEntry is one compiled rule (struct rule); a zero field matches
// anything.
type RuleEntry struct {
	PortLo, PortHi uint16
	SampleN        uint16
	IfaceGroup     uint16 // 0: any; 1..64
	Proto          uint8
	PortSide       uint8
	Direction      uint8 // 0: both; 1: ingress; 2: egress
	Action         uint8
	TCPFlagsMask   uint8
	TCPFlagsValue  uint8
	AggPrefix      uint8
}

// RulePrefix is a trie key: an address (IPv4 mapped) and a prefix length
// of the mapped form (96 + P for IPv4).
type RulePrefix struct {
	Addr [16]byte
	Len  uint8
}

// RuleCandidate is one rule a trie entry lists.
type RuleCandidate struct {
	Slot uint16
	Plen uint8
}

// RuleSet is a compiled rule set: the rules by slot, the tries' entries
// (their candidates best first) and the rules without a CIDR.
type RuleSet struct {
	Rules    []RuleEntry
	Src, Dst map[RulePrefix][]RuleCandidate
	Wild     []RuleCandidate
	HasIface bool
	// IfaceGroups are the interface groups each interface is in, a bit
	// each (group g is bit g-1), as this set numbers them.
	IfaceGroups map[uint32]uint64
}

// RulesFrom is the rule set of c (internal/rules' compiled form), with
// the interface groups of the interfaces present (nil when c names none).
func RulesFrom(c *rules.Compiled, groups map[uint32]uint64) RuleSet {
	rs := RuleSet{
		Rules: make([]RuleEntry, len(c.Rules)), HasIface: c.HasIface != 0, IfaceGroups: groups,
		Src: make(map[RulePrefix][]RuleCandidate, len(c.Src)),
		Dst: make(map[RulePrefix][]RuleCandidate, len(c.Dst)),
	}
	for i, e := range c.Rules {
		rs.Rules[i] = RuleEntry{PortLo: e.PortLo, PortHi: e.PortHi, SampleN: e.SampleN, IfaceGroup: e.IfaceGroup,
			Proto: e.Proto, PortSide: e.PortSide, Direction: e.Direction, Action: e.Action,
			TCPFlagsMask: e.TCPFlagsMask, TCPFlagsValue: e.TCPFlagsValue, AggPrefix: e.AggPrefix}
	}
	cands := func(c rules.Candidates) []RuleCandidate {
		slots, plens := c.List()
		out := make([]RuleCandidate, len(slots))
		for i := range slots {
			out[i] = RuleCandidate{Slot: slots[i], Plen: plens[i]}
		}
		return out
	}
	for k, v := range c.Src {
		rs.Src[RulePrefix{Addr: k.Addr, Len: uint8(k.PrefixLen)}] = cands(v)
	}
	for k, v := range c.Dst {
		rs.Dst[RulePrefix{Addr: k.Addr, Len: uint8(k.PrefixLen)}] = cands(v)
	}
	rs.Wild = cands(c.Wild)
	return rs
}

// RuleCounts is what one rule matched.
type RuleCounts struct {
	Packets, Bytes                 uint64
	MeasuredPackets, MeasuredBytes uint64
}

// Add adds o to c.
func (c *RuleCounts) Add(o RuleCounts) {
	c.Packets += o.Packets
	c.Bytes += o.Bytes
	c.MeasuredPackets += o.MeasuredPackets
	c.MeasuredBytes += o.MeasuredBytes
}

func (d *Datapath) rulesLoaded() error {
	if d.objs.RulesSel == nil || !d.hasCapability("rules") {
		return errors.New("rules are off in this datapath (load it with the rules capability)")
	}
	return nil
}

// SetRules puts rs in force from the next packet on and returns the counts
// of the set it replaced, by slot. It waits for an RCU grace period: no
// packet is judged by a mix of the two sets, and the old set's counters are
// final when read.
func (d *Datapath) SetRules(rs RuleSet) ([]RuleCounts, error) {
	if err := d.rulesLoaded(); err != nil {
		return nil, err
	}
	if len(rs.Rules) > MaxRuleSlots {
		return nil, fmt.Errorf("%d rules: a set holds %d", len(rs.Rules), MaxRuleSlots)
	}
	d.rulesMu.Lock()
	defer d.rulesMu.Unlock()
	gen := nextRulesGen(d.rulesGen, 1)
	next := gen & 1
	rules, src, dst, ifaces := d.ruleMaps(next)
	if err := writeRules(rules, rs.Rules); err != nil {
		return nil, err
	}
	if err := writeIfaces(ifaces, rs.IfaceGroups); err != nil {
		return nil, err
	}
	if err := writeTrie(src, rs.Src); err != nil {
		return nil, fmt.Errorf("source prefixes: %w", err)
	}
	if err := writeTrie(dst, rs.Dst); err != nil {
		return nil, fmt.Errorf("destination prefixes: %w", err)
	}
	cfg := loupeRulesConfig{Nrules: uint32(len(rs.Rules)), HasSrc: boolByte(len(rs.Src) > 0),
		HasDst: boolByte(len(rs.Dst) > 0), HasIface: boolByte(rs.HasIface)}
	for _, r := range rs.Rules {
		cfg.TcpFlags |= r.TCPFlagsMask
	}
	if err := fillCandidates(&cfg.Wild, rs.Wild); err != nil {
		return nil, fmt.Errorf("rules without a prefix: %w", err)
	}
	// The new set's counters start at zero: what the slots counted when
	// this set was last replaced was read then.
	if err := d.clearRuleStats(next); err != nil {
		return nil, err
	}
	if err := d.objs.RulesCfg.Put(next, &cfg); err != nil {
		return nil, fmt.Errorf("write rules config: %w", err)
	}
	if err := d.objs.RulesSel.Put(uint32(0), gen); err != nil {
		return nil, fmt.Errorf("switch rule sets: %w", err)
	}
	prev := d.rulesGen & 1
	d.rulesGen = gen
	d.rulesLen[next] = len(rs.Rules)
	d.waitGrace()
	return d.ruleCounts(prev, d.rulesLen[prev])
}

// RuleCounts returns the counts of the set in force, by slot, since it was
// put in force.
func (d *Datapath) RuleCounts() ([]RuleCounts, error) {
	if err := d.rulesLoaded(); err != nil {
		return nil, err
	}
	d.rulesMu.Lock()
	defer d.rulesMu.Unlock()
	set := d.rulesGen & 1
	return d.ruleCounts(set, d.rulesLen[set])
}

// nextRulesGen is the generation step after gen: step 1 is the other
// set, step 2 the same set. It skips 0, which no set with rules may have
// (rules.h: an empty verdict cache entry holds 0).
func nextRulesGen(gen, step uint32) uint32 {
	if next := gen + step; next != 0 {
		return next
	}
	return 2
}

// SetRuleIfaces says which interface groups of the set in force (bits,
// group g is bit g-1) each interface is in; interfaces not in groups are in
// none. Verdicts the programs kept are judged again: a flow's interface
// may have joined or left a rule's group.
func (d *Datapath) SetRuleIfaces(groups map[uint32]uint64) error {
	if err := d.rulesLoaded(); err != nil {
		return err
	}
	d.rulesMu.Lock()
	defer d.rulesMu.Unlock()
	_, _, _, m := d.ruleMaps(d.rulesGen & 1)
	if err := writeIfaces(m, groups); err != nil {
		return err
	}
	// After the groups are written: a packet that reads the new
	// generation reads the new groups, and a verdict judged with the old
	// ones is tagged with the old generation.
	gen := nextRulesGen(d.rulesGen, 2)
	if err := d.objs.RulesSel.Put(uint32(0), gen); err != nil {
		return fmt.Errorf("renew rule verdicts: %w", err)
	}
	d.rulesGen = gen
	return nil
}

func writeIfaces(m *ebpf.Map, groups map[uint32]uint64) error {
	var (
		k    uint32
		v    uint64
		gone []uint32
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if _, ok := groups[k]; !ok {
			gone = append(gone, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read interface groups: %w", err)
	}
	for _, k := range gone {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete interface %d's groups: %w", k, err)
		}
	}
	for k, v := range groups {
		if err := m.Put(k, v); err != nil {
			return fmt.Errorf("write interface %d's groups: %w", k, err)
		}
	}
	return nil
}

// sizeRules shrinks the rules' maps to one entry when rules are off: the
// programs then never read them, and a full-size set costs about 3.5 MiB
// on two CPUs (two sets of 16 384 rules and their per-CPU counters), the
// verdict cache 288 KiB more a CPU (4 096 verdicts of 72 bytes).
func sizeRules(spec *ebpf.CollectionSpec, on bool) {
	if on {
		return
	}
	for _, name := range []string{"rules_0", "rules_1", "rules_stats", "rules_src_0", "rules_src_1",
		"rules_dst_0", "rules_dst_1", "rules_ifaces_0", "rules_ifaces_1", "rules_cache"} {
		if m, ok := spec.Maps[name]; ok {
			m.MaxEntries = 1
		}
	}
}

func (d *Datapath) ruleMaps(set uint32) (rules, src, dst, ifaces *ebpf.Map) {
	if set == 1 {
		return d.objs.Rules1, d.objs.RulesSrc1, d.objs.RulesDst1, d.objs.RulesIfaces1
	}
	return d.objs.Rules0, d.objs.RulesSrc0, d.objs.RulesDst0, d.objs.RulesIfaces0
}

func writeRules(m *ebpf.Map, rules []RuleEntry) error {
	keys := make([]uint32, MaxRuleSlots)
	vals := make([]loupeRule, MaxRuleSlots)
	for i := range keys {
		keys[i] = uint32(i)
	}
	for i, r := range rules {
		vals[i] = loupeRule{PortLo: r.PortLo, PortHi: r.PortHi, SampleN: r.SampleN, IfaceGroup: r.IfaceGroup,
			Proto: r.Proto, PortSide: r.PortSide, Direction: r.Direction, Action: r.Action,
			TcpFlagsMask: r.TCPFlagsMask, TcpFlagsValue: r.TCPFlagsValue, AggPrefix: r.AggPrefix, Used: 1}
	}
	if _, err := m.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	return nil
}

func writeTrie(m *ebpf.Map, entries map[RulePrefix][]RuleCandidate) error {
	var (
		k    loupeRuleLpmKey
		v    loupeRuleCandidates
		keys []loupeRuleLpmKey
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	for _, k := range keys {
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear: %w", err)
		}
	}
	for p, cands := range entries {
		if p.Len > 128 {
			return fmt.Errorf("prefix length %d", p.Len)
		}
		k := loupeRuleLpmKey{Prefixlen: uint32(p.Len), Addr: p.Addr}
		var v loupeRuleCandidates
		if err := fillCandidates(&v, cands); err != nil {
			return err
		}
		if err := m.Put(&k, &v); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	return nil
}

func fillCandidates(v *loupeRuleCandidates, cands []RuleCandidate) error {
	if len(cands) > MaxRuleCandidates {
		return fmt.Errorf("%d candidate rules: an entry holds %d", len(cands), MaxRuleCandidates)
	}
	v.N = uint16(len(cands))
	for i, c := range cands {
		v.Slots[i] = c.Slot
		v.Plen[i] = c.Plen
	}
	return nil
}

// clearRuleStats zeroes set's counters on every CPU.
func (d *Datapath) clearRuleStats(set uint32) error {
	keys := make([]uint32, MaxRuleSlots)
	vals := make([]loupeRuleStats, MaxRuleSlots*d.ncpu)
	for i := range keys {
		keys[i] = set*MaxRuleSlots + uint32(i)
	}
	if _, err := d.objs.RulesStats.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("clear rule counters: %w", err)
	}
	return nil
}

// ruleCounts sums set's counters over the CPUs, for its first n slots.
func (d *Datapath) ruleCounts(set uint32, n int) ([]RuleCounts, error) {
	out := make([]RuleCounts, n)
	per := make([]loupeRuleStats, d.ncpu)
	for i := range out {
		if err := d.objs.RulesStats.Lookup(set*MaxRuleSlots+uint32(i), per); err != nil {
			return nil, fmt.Errorf("read rule counters: %w", err)
		}
		for _, s := range per {
			out[i].Add(RuleCounts{Packets: s.Packets, Bytes: s.Bytes, MeasuredPackets: s.MeasuredPackets, MeasuredBytes: s.MeasuredBytes})
		}
	}
	return out, nil
}
