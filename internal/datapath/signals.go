package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"loupe/internal/flow"
)

// Kernel signals (bpf/signals.c): RTT and retransmissions per TCP socket,
// drops with the kernel's reason per dropped packet, each from a raw
// tracepoint, each loaded and attached alone so that a kernel that refuses
// one turns off that signal only. An object of its own, apart from the TC
// entry programs: nothing here runs per packet at the hooks.
//
// The tables are swapped and drained per interval as the flow tables are
// (grace.go), but neither pinned nor adopted: the tracepoints' links die
// with the agent, and a restart loses at most one interval of signals.

// Signal is one kernel signal.
type Signal int

const (
	// SignalRTT is the smoothed RTT of TCP sockets, from tcp_probe.
	SignalRTT Signal = iota
	// SignalRetransmits is the segments TCP sockets retransmitted, from
	// tcp_retransmit_skb.
	SignalRetransmits
	// SignalDrops is the packets the kernel dropped, by reason, from
	// kfree_skb.
	SignalDrops
	numSignals
)

// AllSignals lists every signal, in order.
func AllSignals() []Signal { return []Signal{SignalRTT, SignalRetransmits, SignalDrops} }

// String is the signal's name: its config key (signals.<name>) and metric
// label.
func (s Signal) String() string {
	switch s {
	case SignalRTT:
		return "rtt"
	case SignalRetransmits:
		return "retransmits"
	case SignalDrops:
		return "drops"
	}
	return "signal" + strconv.Itoa(int(s))
}

// Tracepoint is the raw tracepoint the signal's program attaches to.
func (s Signal) Tracepoint() string { return signalProgs[s].tracepoint }

var signalProgs = [numSignals]struct{ tracepoint, prog string }{
	SignalRTT:         {"tcp_probe", signalsProgSignalsTcpProbe},
	SignalRetransmits: {"tcp_retransmit_skb", signalsProgSignalsTcpRetransmitSkb},
	SignalDrops:       {"kfree_skb", signalsProgSignalsKfreeSkb},
}

// SignalsOptions say which signals to load and size their tables.
type SignalsOptions struct {
	// On is the signals to load and attach; the others stay off.
	On map[Signal]bool
	// TableSize is the number of 5-tuples each table holds per interval
	// (one socket table and one drop table are written at a time; each
	// has a standby twin). Events of further 5-tuples are counted in the
	// map_full counters and lost.
	TableSize int
	// Tracepoints renames a signal's tracepoint: the tests name one the
	// kernel does not have, to see that signal alone turn off.
	Tracepoints map[Signal]string
	// Logger is where the signals say what the kernel refused; the caller
	// names the component.
	Logger *slog.Logger
}

// SignalState says whether a signal is attached and, if not, why.
type SignalState struct {
	Up bool
	// Reason is why the signal is off: "disabled" when the configuration
	// turned it off, else what the kernel refused.
	Reason string
}

// ReasonDisabled is the Reason of a signal the configuration turned off.
const ReasonDisabled = "disabled"

// Signals is the loaded kernel-signals object: its tables and the
// programs that are attached.
type Signals struct {
	opts  SignalsOptions
	log   *slog.Logger
	ncpu  int
	maps  signalsMaps // zero when no signal is on, or the maps were refused
	progs [numSignals]*ebpf.Program
	links [numSignals]link.Link
	state [numSignals]SignalState
	grace *grace
	// reasons names the running kernel's drop reasons (enum
	// skb_drop_reason), read from its BTF.
	reasons map[uint32]string

	mu     sync.Mutex // serialises Drain
	active uint32     // the tables the programs write: 0 the _a ones
	sockK  []signalsSignalKey
	sockV  []signalsSockSignals
	dropK  []signalsDropKey
	dropV  []signalsDropSignals
}

// LoadSignals loads and attaches the signals opts switches on. It fails
// only on invalid options: whatever the kernel refuses turns off the
// signals it concerns, each with its reason (State), and the others run.
func LoadSignals(opts SignalsOptions) (*Signals, error) {
	if opts.TableSize < 1 {
		return nil, fmt.Errorf("signals table size %d: must be positive", opts.TableSize)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Signals{opts: opts, log: opts.Logger}
	anyOn := false
	for _, sig := range AllSignals() {
		s.state[sig] = SignalState{Reason: ReasonDisabled}
		anyOn = anyOn || opts.On[sig]
	}
	if !anyOn {
		return s, nil
	}
	if err := s.load(); err != nil {
		// Nothing can run without the tables: every signal asked for
		// is off, for the same reason.
		for _, sig := range AllSignals() {
			if opts.On[sig] {
				s.off(sig, err)
			}
		}
		s.Close()
		s.maps = signalsMaps{}
	}
	return s, nil
}

// load creates the tables, then loads and attaches each program asked for.
func (s *Signals) load() error {
	var err error
	if s.ncpu, err = ebpf.PossibleCPU(); err != nil {
		return fmt.Errorf("count possible CPUs: %w", err)
	}
	// CO-RE needs the kernel's BTF anyway; it also says which arguments
	// the tracepoints have and names the drop reasons.
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("read the kernel's BTF: %w", err)
	}
	spec, err := loadSignals()
	if err != nil {
		return fmt.Errorf("parse signals program: %w", err)
	}
	for _, name := range []string{signalsMapSockA, signalsMapSockB, signalsMapDropsA, signalsMapDropsB} {
		spec.Maps[name].MaxEntries = uint32(s.opts.TableSize)
	}
	n, known := tracepointArgs(kernel, s.tracepoint(SignalRetransmits))
	if err := spec.Variables[signalsVarCfgRetransmitErrArg].Set(boolByte(known && n >= 3)); err != nil {
		return fmt.Errorf("set tcp_retransmit_skb's arguments: %w", err)
	}
	if err := spec.LoadAndAssign(&s.maps, nil); err != nil {
		return fmt.Errorf("create signal tables: %w", err)
	}
	if s.grace, err = newGrace(s.log); err != nil {
		return err
	}
	s.reasons = dropReasons(kernel)
	maps := map[string]*ebpf.Map{
		signalsMapSockA: s.maps.SockA, signalsMapSockB: s.maps.SockB,
		signalsMapDropsA: s.maps.DropsA, signalsMapDropsB: s.maps.DropsB,
		signalsMapSignalsState: s.maps.SignalsState, signalsMapSignalCounters: s.maps.SignalCounters,
	}
	for _, sig := range AllSignals() {
		if !s.opts.On[sig] {
			continue
		}
		tp := s.tracepoint(sig)
		if sig == SignalDrops {
			if n, known := tracepointArgs(kernel, tp); known && n < 3 {
				s.off(sig, fmt.Errorf("the kernel's %s tracepoint carries no drop reason (Linux 5.17 added it)", tp))
				continue
			}
		}
		if err := s.attach(sig, spec, maps); err != nil {
			s.off(sig, err)
			continue
		}
		s.state[sig] = SignalState{Up: true}
		s.log.Info("signal attached", "signal", sig, "tracepoint", tp)
	}
	s.sockK = make([]signalsSignalKey, drainBatch)
	s.sockV = make([]signalsSockSignals, drainBatch)
	s.dropK = make([]signalsDropKey, drainBatch)
	s.dropV = make([]signalsDropSignals, drainBatch)
	return nil
}

func (s *Signals) tracepoint(sig Signal) string {
	if tp := s.opts.Tracepoints[sig]; tp != "" {
		return tp
	}
	return sig.Tracepoint()
}

// attach loads sig's program alone, against the tables already created,
// and attaches it to its raw tracepoint.
func (s *Signals) attach(sig Signal, spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map) error {
	name := signalProgs[sig].prog
	one := spec.Copy()
	one.Programs = map[string]*ebpf.ProgramSpec{name: one.Programs[name]}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: maps})
	if err != nil {
		return fmt.Errorf("load %s program: %w", sig, err)
	}
	prog := coll.DetachProgram(name)
	coll.Close()
	tp := s.tracepoint(sig)
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: prog})
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach raw tracepoint %s: %w", tp, err)
	}
	s.progs[sig], s.links[sig] = prog, l
	return nil
}

// off records that sig, asked for, is off for err, and says so.
func (s *Signals) off(sig Signal, err error) {
	s.state[sig] = SignalState{Reason: err.Error()}
	s.log.Warn("signal unavailable: it is off, the others run", "signal", sig, "err", err)
}

// tracepointArgs is the number of arguments of the raw tracepoint tp, from
// the kernel's BTF (the btf_trace_<tp> typedef, whose first parameter is
// the tracepoint's own data); known is false when BTF does not say.
func tracepointArgs(kernel *btf.Spec, tp string) (n int, known bool) {
	var td *btf.Typedef
	if err := kernel.TypeByName("btf_trace_"+tp, &td); err != nil {
		return 0, false
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return 0, false
	}
	fn, ok := ptr.Target.(*btf.FuncProto)
	if !ok || len(fn.Params) == 0 {
		return 0, false
	}
	return len(fn.Params) - 1, true
}

// dropReasonPrefix starts every drop reason's name in the kernel's enum.
const dropReasonPrefix = "SKB_DROP_REASON_"

// dropReasons names the values of the running kernel's enum
// skb_drop_reason, without the SKB_DROP_REASON_ prefix (NETFILTER_DROP).
// Kernels add and renumber reasons, so the names come from the kernel
// itself, never from a table built in. Empty without the enum.
func dropReasons(kernel *btf.Spec) map[uint32]string {
	var e *btf.Enum
	if err := kernel.TypeByName("skb_drop_reason", &e); err != nil {
		return nil
	}
	out := make(map[uint32]string, len(e.Values))
	for _, v := range e.Values {
		out[uint32(v.Value)] = strings.TrimPrefix(v.Name, dropReasonPrefix)
	}
	return out
}

// DropReason names a drop reason value of the running kernel; a value its
// enum does not name (a subsystem's reason) is printed as a number.
func (s *Signals) DropReason(v uint32) string {
	if name, ok := s.reasons[v]; ok {
		return name
	}
	return strconv.FormatUint(uint64(v), 10)
}

// State says whether sig is attached, and if not why.
func (s *Signals) State(sig Signal) SignalState { return s.state[sig] }

// SignalKey is a 5-tuple in the flow key's conventions: 16-byte addresses,
// IPv4 as IPv4-mapped IPv6, ports in host order (ICMP: type and code). A
// socket's key has its local end as source, as the egress records of its
// connection have; a dropped packet's key is its own headers'. The zero
// key holds the drops whose 5-tuple could not be read.
type SignalKey struct {
	SrcAddr, DstAddr [16]byte
	SrcPort, DstPort uint16
	Proto            uint8
}

// SignalKeyOf is the key of a flow record's 5-tuple: what the record's
// signals are found under.
func SignalKeyOf(k flow.Key) SignalKey {
	return SignalKey{SrcAddr: k.SrcAddr, DstAddr: k.DstAddr, SrcPort: k.SrcPort, DstPort: k.DstPort, Proto: k.Proto}
}

func (k SignalKey) String() string {
	return fmt.Sprintf("%s:%d > %s:%d proto %d", netip.AddrFrom16(k.SrcAddr).Unmap(), k.SrcPort,
		netip.AddrFrom16(k.DstAddr).Unmap(), k.DstPort, k.Proto)
}

// RTT is what tcp_probe saw of a socket's smoothed RTT over one interval.
type RTT struct {
	MinNs, MaxNs, LastNs uint64
	// Samples is the number of segments the socket received with an
	// estimate: how many values min, max and last were taken from.
	Samples uint64
}

// DropCount is the drops of one 5-tuple for one reason.
type DropCount struct {
	Packets uint64 // buffers freed: a GSO buffer counts once
	Bytes   uint64 // their IP length (IP header on, no link-layer header)
}

// SignalValues are one 5-tuple's signals over one interval. A signal that
// saw nothing of the 5-tuple is absent: RTT nil, Retransmits 0, Drops
// empty; State tells a signal that is off from one that measured zero.
type SignalValues struct {
	RTT *RTT
	// Retransmits is the segments retransmitted, the unit of the
	// sender's own counters (ss's retrans total, TcpRetransSegs).
	Retransmits uint64
	// Drops is by the kernel's drop reason, named as its enum names it
	// without the SKB_DROP_REASON_ prefix (NETFILTER_DROP, TC_INGRESS).
	Drops map[string]DropCount
}

// Drain ends the interval: the programs move to the standby tables, and
// once none can still write the tables they left, those are read and
// emptied. It returns every 5-tuple's signals since the previous Drain.
// Safe to call from any goroutine; calls are serialised.
func (s *Signals) Drain() (map[SignalKey]SignalValues, error) {
	out := map[SignalKey]SignalValues{}
	if s.maps.SignalsState == nil {
		return out, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.active
	if err := s.maps.SignalsState.Put(uint32(0), prev^1); err != nil {
		return out, fmt.Errorf("swap signal tables: %w", err)
	}
	s.active = prev ^ 1
	s.grace.wait()

	sock, drops := s.maps.SockA, s.maps.DropsA
	if prev == 1 {
		sock, drops = s.maps.SockB, s.maps.DropsB
	}
	errSock := takeAll(sock, s.sockK, s.sockV, func(k *signalsSignalKey, v *signalsSockSignals) {
		key := signalKeyFromBPF(k)
		sv := out[key]
		if v.RttSamples > 0 {
			sv.RTT = &RTT{MinNs: usToNs(v.RttMinUs), MaxNs: usToNs(v.RttMaxUs), LastNs: usToNs(v.RttLastUs),
				Samples: v.RttSamples}
		}
		sv.Retransmits += v.RetransSegs
		out[key] = sv
	})
	errDrops := takeAll(drops, s.dropK, s.dropV, func(k *signalsDropKey, v *signalsDropSignals) {
		key := signalKeyFromBPF(&k.Key)
		sv := out[key]
		if sv.Drops == nil {
			sv.Drops = map[string]DropCount{}
		}
		name := s.DropReason(k.Reason)
		d := sv.Drops[name]
		d.Packets += v.Packets
		d.Bytes += v.Bytes
		sv.Drops[name] = d
		out[key] = sv
	})
	if err := errors.Join(errSock, errDrops); err != nil {
		return out, fmt.Errorf("drain signal tables: %w", err)
	}
	return out, nil
}

func usToNs(us uint32) uint64 { return uint64(us) * 1000 }

func signalKeyFromBPF(k *signalsSignalKey) SignalKey {
	return SignalKey{SrcAddr: k.SrcAddr, DstAddr: k.DstAddr, SrcPort: k.SrcPort, DstPort: k.DstPort, Proto: k.Proto}
}

// takeAll reads and deletes every entry of m, which no program writes
// any more, calling fn for each, in batches of len(keys).
func takeAll[K, V any](m *ebpf.Map, keys []K, vals []V, fn func(*K, *V)) error {
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookupAndDelete(&cursor, keys, vals, nil)
		for i := range n {
			fn(&keys[i], &vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil
		case errors.Is(err, ebpf.ErrNotSupported):
			return takeByIteration(m, fn)
		case err != nil:
			return err
		}
	}
}

// takeByIteration is takeAll for kernels without batch operations.
func takeByIteration[K, V any](m *ebpf.Map, fn func(*K, *V)) error {
	var (
		k    K
		v    V
		seen []K
	)
	iter := m.Iterate()
	for iter.Next(&k, &v) {
		fn(&k, &v)
		seen = append(seen, k)
	}
	if err := iter.Err(); err != nil {
		return err
	}
	for i := range seen {
		if err := m.Delete(&seen[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// signalCounterNames follows enum signal_counter in bpf/signals/signals.h;
// a test checks it against the generated code.
var signalCounterNames = [signalsSignalCounterSIGNAL_COUNTER_MAX]string{
	signalsSignalCounterSIGNAL_COUNTER_SOCK_MAP_FULL:  "sock_map_full",
	signalsSignalCounterSIGNAL_COUNTER_SOCK_MAP_BUSY:  "sock_map_busy",
	signalsSignalCounterSIGNAL_COUNTER_DROP_MAP_FULL:  "drop_map_full",
	signalsSignalCounterSIGNAL_COUNTER_DROP_MAP_BUSY:  "drop_map_busy",
	signalsSignalCounterSIGNAL_COUNTER_SOCK_FAMILY:    "sock_family",
	signalsSignalCounterSIGNAL_COUNTER_DROP_NO_HEADER: "drop_no_header",
	signalsSignalCounterSIGNAL_COUNTER_DROP_NOT_IP:    "drop_not_ip",
	signalsSignalCounterSIGNAL_COUNTER_DROP_TRUNCATED: "drop_truncated",
	signalsSignalCounterSIGNAL_COUNTER_READ_FAILED:    "read_failed",
}

// Counters reads the signals' failure counters, summed over the CPUs;
// none when no signal is loaded.
func (s *Signals) Counters() ([]Counter, error) {
	if s.maps.SignalCounters == nil {
		return nil, nil
	}
	return sumCounters(s.maps.SignalCounters, signalCounterNames[:], s.ncpu)
}

// ProgramStats are the kernel's statistics of sig's program: its runs,
// their total time (counted only while kernel.bpf_stats_enabled is 1), and
// the events it missed because a program was already running on that CPU
// (a drop inside an interrupted drop, say). ok is false when sig is off.
func (s *Signals) ProgramStats(sig Signal) (st *ebpf.ProgramStats, ok bool, err error) {
	p := s.progs[sig]
	if p == nil {
		return nil, false, nil
	}
	st, err = p.Stats()
	return st, true, err
}

// MemoryBytes is the kernel memory of the signals' maps, as the kernel
// accounts it (memlock).
func (s *Signals) MemoryBytes() (uint64, error) {
	var total uint64
	for _, m := range []*ebpf.Map{s.maps.SockA, s.maps.SockB, s.maps.DropsA, s.maps.DropsB, s.maps.SignalCounters, s.maps.SignalsState} {
		if m == nil {
			continue
		}
		info, err := m.Info()
		if err != nil {
			return 0, fmt.Errorf("map info: %w", err)
		}
		n, _ := info.Memlock()
		total += n
	}
	return total, nil
}

// Close detaches the programs and releases the tables.
func (s *Signals) Close() error {
	var errs []error
	for i := range s.links {
		if s.links[i] != nil {
			errs = append(errs, s.links[i].Close())
			s.links[i] = nil
		}
		if s.progs[i] != nil {
			errs = append(errs, s.progs[i].Close())
			s.progs[i] = nil
		}
	}
	errs = append(errs, s.grace.close(), s.maps.Close())
	s.grace = nil
	return errors.Join(errs...)
}

// SignalsMapBytes estimates the kernel memory of the signals' maps with
// tables of tableSize (mapBytes), for a memory budget that counts them
// (Options.Reserved).
func SignalsMapBytes(tableSize int) (uint64, error) {
	spec, err := loadSignals()
	if err != nil {
		return 0, fmt.Errorf("parse signals program: %w", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, err
	}
	for _, name := range []string{signalsMapSockA, signalsMapSockB, signalsMapDropsA, signalsMapDropsB} {
		spec.Maps[name].MaxEntries = uint32(tableSize)
	}
	var total uint64
	for _, m := range spec.Maps {
		total += mapBytes(m, ncpu)
	}
	return total, nil
}
