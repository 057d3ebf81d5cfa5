package datapath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"

	"loupe/internal/flow"
)

// The capture capability's maps (bpf/capture/): its rules, the connections
// it follows, the packets it keeps before a trigger, its trigger events,
// captured packets and counters. The capture unit
// (internal/capability/capture) drives them; the datapath loads and sizes
// them and translates between their layout and Go types.

// CaptureSizes size the capture capability's maps at load.
type CaptureSizes struct {
	// Connections is the number of connections followed at once (an LRU
	// table: past it, the least recently seen is forgotten).
	Connections int
	// KeepPackets is the number of packets kept per connection before a
	// trigger (at most MaxKeepPackets; 0: none).
	KeepPackets int
	// KeepSlotsPerCPU is the number of packet slots of each CPU's part of
	// the keep ring, rounded up to a power of two.
	KeepSlotsPerCPU int
	// KeepSnap is the number of bytes kept of each packet (at most
	// MaxKeepSnap).
	KeepSnap int
	// HTTPSeries caps the HTTP metrics' entries (server and class): six
	// a server (requests and five status classes), six of them "other",
	// where servers past the cap are counted. HTTPSeries/6 servers in
	// all, "other" included.
	HTTPSeries int
}

// Limits of the kept packets, as bpf/capture/keep.h and conn.h fix them.
const (
	MaxKeepPackets = 8
	MaxKeepSnap    = 2048
	// MaxRules is the number of trigger rules the datapath holds.
	MaxRules = 8
	// keepSlotBytes is a slot's size: generation, header, bytes.
	keepSlotBytes = 8 + 32 + MaxKeepSnap
)

// DefaultCaptureSizes are the sizes when the configuration says nothing:
// 16 384 connections, 4 packets of up to 2 KB each kept per connection, in
// a ring of 1 024 slots per CPU.
func DefaultCaptureSizes() CaptureSizes {
	return CaptureSizes{Connections: 16384, KeepPackets: 4, KeepSlotsPerCPU: 1024, KeepSnap: MaxKeepSnap, HTTPSeries: 4096}
}

func (s CaptureSizes) check() error {
	switch {
	case s.Connections < 1:
		return fmt.Errorf("capture connections %d: must be positive", s.Connections)
	case s.KeepPackets < 0 || s.KeepPackets > MaxKeepPackets:
		return fmt.Errorf("capture keep packets %d: must be 0 to %d", s.KeepPackets, MaxKeepPackets)
	case s.KeepSnap < 1 || s.KeepSnap > MaxKeepSnap:
		return fmt.Errorf("capture keep snap %d: must be 1 to %d", s.KeepSnap, MaxKeepSnap)
	case s.KeepSlotsPerCPU < 0 || s.KeepSlotsPerCPU > 1<<20:
		return fmt.Errorf("capture keep slots %d: must be 0 to %d", s.KeepSlotsPerCPU, 1<<20)
	case s.HTTPSeries < 16 || s.HTTPSeries > 1<<20:
		return fmt.Errorf("capture HTTP series %d: must be 16 to %d", s.HTTPSeries, 1<<20)
	}
	return nil
}

func roundPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// sizeCapture sizes the capture maps of spec and sets its load-time
// constants.
func sizeCapture(spec *ebpf.CollectionSpec, s CaptureSizes, ncpu int) error {
	if s.HTTPSeries == 0 {
		s.HTTPSeries = DefaultCaptureSizes().HTTPSeries
	}
	if err := s.check(); err != nil {
		return err
	}
	slots := 0
	if s.KeepPackets > 0 && s.KeepSlotsPerCPU > 0 {
		slots = roundPow2(s.KeepSlotsPerCPU)
	}
	spec.Maps[loupeMapCaptureConns].MaxEntries = uint32(s.Connections)
	servers := httpServers(s.HTTPSeries)
	spec.Maps[loupeMapCaptureHttp].MaxEntries = uint32(servers * httpClasses)
	spec.Maps[loupeMapCaptureHttpServers].MaxEntries = uint32(servers - 1) // "other" has no entry
	spec.Maps[loupeMapCaptureKeep].MaxEntries = uint32(max(1, slots*ncpu))
	for name, v := range map[string]uint32{
		loupeVarKeepPackets: uint32(s.KeepPackets), loupeVarKeepSlotsPerCpu: uint32(slots), loupeVarKeepSnap: uint32(s.KeepSnap),
		loupeVarCfgHttpServers: uint32(servers),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return nil
}

// CaptureMemoryBytes is what the capture maps take in the kernel, roughly:
// the connection table and the keep ring.
func (d *Datapath) CaptureMemoryBytes() uint64 {
	if d.objs.CaptureConns == nil {
		return 0
	}
	conns := uint64(d.objs.CaptureConns.MaxEntries()) * uint64(d.objs.CaptureConns.KeySize()+d.objs.CaptureConns.ValueSize())
	return conns + uint64(d.objs.CaptureKeep.MaxEntries())*keepSlotBytes
}

// RuleKind is what a trigger rule fires on.
type RuleKind uint8

// The kinds of rule (enum capture_rule_kind).
const (
	RuleHTTPStatus RuleKind = 1
	RuleTCPReset   RuleKind = 2
)

// Rule is one trigger rule in the datapath's terms.
type Rule struct {
	Kind               RuleKind
	StatusLo, StatusHi uint16        // RuleHTTPStatus: the codes that fire
	Sample             uint32        // 1 in Sample connections are candidates; 0, 1: all
	MaxPackets         uint32        // per trace; 0: no limit
	MaxBytes           uint64        // per trace, never passed: the packet that would pass it ends the trace
	MaxDuration        time.Duration // whole seconds; 0: no limit
}

// CaptureConfig is what the capture datapath does, changeable at any time.
type CaptureConfig struct {
	Rules          []Rule
	MirrorIfindex  uint32 // 0: no mirror
	MaxTriggersSec uint32 // over every rule; 0: no limit
	Snaplen        uint32 // bytes captured of each packet, kept ones too (cut as they are kept); 0: all
	Output         bool   // send the traces' packets to userspace
	Idle           time.Duration
	MaxAge         time.Duration
	// Filters are the rules (a bit each, by index) whose candidates a pcap
	// filter decides: the admission programs (InstallAdmission) must be
	// in place before they are set.
	Filters uint8
}

// SetCaptureConfig puts c in force from the next packet on: it writes the
// config slot the programs do not read, then flips the selector, so that a
// packet sees the old rules or the new, never a mix, and no program is
// reloaded.
func (d *Datapath) SetCaptureConfig(c CaptureConfig) error {
	if len(c.Rules) > MaxRules {
		return fmt.Errorf("%d trigger rules: the datapath holds %d", len(c.Rules), MaxRules)
	}
	var b loupeCaptureConfig
	b.Nrules = uint32(len(c.Rules))
	b.MirrorIfindex = c.MirrorIfindex
	b.MaxTriggersPerSec = c.MaxTriggersSec
	b.Snaplen = c.Snaplen
	b.Output = uint32(boolByte(c.Output))
	b.IdleNs = uint64(c.Idle)
	b.MaxAgeNs = uint64(c.MaxAge)
	b.Filters = uint32(c.Filters)
	for i, r := range c.Rules {
		if r.Kind == RuleHTTPStatus {
			if r.StatusLo < 100 || r.StatusHi > 599 || r.StatusLo > r.StatusHi {
				return fmt.Errorf("rule %d: status %d-%d: want codes from 100 to 599, low to high", i, r.StatusLo, r.StatusHi)
			}
			for code := r.StatusLo; code <= r.StatusHi; code++ {
				bit := code - 100
				b.Codes.Bits[bit/64] |= 1 << (bit % 64)
			}
		}
		if r.Kind == RuleTCPReset {
			b.Rst = 1
		}
		b.Rules[i] = loupeCaptureRule{
			StatusLo: r.StatusLo, StatusHi: r.StatusHi, Kind: uint8(r.Kind), Sample: r.Sample,
			MaxPackets: r.MaxPackets, MaxBytes: r.MaxBytes, MaxSeconds: uint32(r.MaxDuration / time.Second),
		}
	}
	if d.objs.CaptureConfigs == nil {
		return errors.New("the capture capability is not loaded")
	}
	d.captureMu.Lock()
	defer d.captureMu.Unlock()
	next := d.captureSel ^ 1
	if err := d.objs.CaptureConfigs.Put(next, &b); err != nil {
		return fmt.Errorf("write capture config: %w", err)
	}
	if err := d.objs.CaptureConfigSel.Put(uint32(0), next); err != nil {
		return fmt.Errorf("switch capture config: %w", err)
	}
	d.captureSel = next
	return nil
}

// CaptureEvent is a trace started by the trigger.
type CaptureEvent struct {
	Key     flow.Key // the packet that fired it, keyed as flows would
	TraceID uint32
	Time    uint64 // CLOCK_MONOTONIC, ns
	Seq     uint32 // TCP sequence number of the status line's first byte
	Status  uint16 // 0: a reset
	Split   bool   // the status line started in the connection's previous segment
	Rule    uint8
	Kept    uint8 // packets kept before the trigger that were sent
}

// OpenCaptureEvents opens a reader of the trigger events; DecodeCaptureEvent
// decodes what it reads.
func (d *Datapath) OpenCaptureEvents() (*ringbuf.Reader, error) {
	r, err := ringbuf.NewReader(d.objs.CaptureEvents)
	if err != nil {
		return nil, fmt.Errorf("open capture events: %w", err)
	}
	return r, nil
}

// DecodeCaptureEvent decodes one record of the capture events ring buffer.
func DecodeCaptureEvent(raw []byte) (CaptureEvent, error) {
	var b loupeCaptureEvent
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &b); err != nil {
		return CaptureEvent{}, fmt.Errorf("decode capture event (%d bytes): %w", len(raw), err)
	}
	ev := CaptureEvent{TraceID: b.TraceId, Time: b.Time, Seq: b.Seq, Status: b.Status, Split: b.Split != 0, Rule: b.Rule, Kept: b.Kept}
	keyFromBPF(&ev.Key, &b.Key)
	return ev, nil
}

// CapturedPacket is a packet of a trace, as the datapath sent it.
type CapturedPacket struct {
	Time      uint64 // CLOCK_MONOTONIC, ns
	Ifindex   uint32
	Len       uint32 // the packet's length at the hook
	TraceID   uint32
	Status    uint16
	Direction flow.Direction
	Kept      bool // kept before the trigger, sent when it fired
	Filtered  bool // matched an on-demand filter (OpenFilteredPackets)
	Rule      uint8
	// VLAN is the tag the kernel held in the skb's metadata, not in Data:
	// 0 none, 0x8100 or 0x88a8, with VLANTCI.
	VLAN    uint16
	VLANTCI uint16
	Data    []byte // the first bytes of the packet (caplen of them)
}

const capturePktHeader = 32

// OpenCapturePackets opens a reader of the traces' packets with a buffer of
// perCPUBytes per CPU (rounded up to pages); a packet the buffer cannot
// hold is lost and counted, by the datapath (packets_lost) and by the
// reader (perf.Record.LostSamples).
func (d *Datapath) OpenCapturePackets(perCPUBytes int) (*perf.Reader, error) {
	r, err := newPacketReader(d.objs.CapturePackets, perCPUBytes)
	if err != nil {
		return nil, fmt.Errorf("open capture packets: %w", err)
	}
	return r, nil
}

// newPacketReader opens a perf reader woken only once a CPU's buffer holds
// a quarter of its bytes. Woken for every packet, the kernel pays a wake-up
// in the softirq of the packet's sender: measured 8.9 us per captured
// packet against 0.41 with a 1 MiB watermark (bench/RESULTS.md, section
// 8). A reader that sets deadlines still gets what is below the watermark
// when one passes (perf.Reader reads every ring then), which the capture
// unit does every 200 ms.
func newPacketReader(m *ebpf.Map, perCPUBytes int) (*perf.Reader, error) {
	return perf.NewReaderWithOptions(m, perCPUBytes, perf.ReaderOptions{Watermark: max(perCPUBytes/4, 1)})
}

// DecodeCapturedPacket decodes one perf record of captured packets. Data
// points into raw.
func DecodeCapturedPacket(raw []byte, p *CapturedPacket) error {
	if len(raw) < capturePktHeader {
		return fmt.Errorf("captured packet record of %d bytes: shorter than its header", len(raw))
	}
	ne := binary.NativeEndian
	caplen := ne.Uint32(raw[16:])
	if int(caplen) > len(raw)-capturePktHeader {
		return fmt.Errorf("captured packet record of %d bytes: caplen %d does not fit", len(raw), caplen)
	}
	*p = CapturedPacket{
		Time:      ne.Uint64(raw[0:]),
		Ifindex:   ne.Uint32(raw[8:]),
		Len:       ne.Uint32(raw[12:]),
		TraceID:   ne.Uint32(raw[20:]),
		Status:    ne.Uint16(raw[24:]),
		Direction: flow.Direction(raw[26]),
		Kept:      raw[27] == 1,
		Filtered:  raw[27] == kindFiltered,
		Rule:      raw[28],
		VLANTCI:   ne.Uint16(raw[30:]),
		Data:      raw[capturePktHeader : capturePktHeader+int(caplen)],
	}
	switch raw[29] {
	case 1:
		p.VLAN = 0x8100
	case 2:
		p.VLAN = 0x88a8
	}
	return nil
}

// CaptureConnections counts the connections in the capture table.
func (d *Datapath) CaptureConnections() (int, error) {
	var (
		k loupeConnKey
		v loupeConnState // the iterator reads each value: it needs somewhere to put it
		n int
	)
	it := d.objs.CaptureConns.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("count capture connections: %w", err)
	}
	return n, nil
}

// captureCounterNames follows enum capture_counter.
var captureCounterNames = [loupeCaptureCounterCAPTURE_COUNTER_MAX]string{
	loupeCaptureCounterCAPTURE_SEGMENTS_SCANNED:      "segments_scanned",
	loupeCaptureCounterCAPTURE_BYTES_SCANNED:         "bytes_scanned",
	loupeCaptureCounterCAPTURE_STATUS_LINES:          "status_lines",
	loupeCaptureCounterCAPTURE_SPLIT_STATUS_LINES:    "split_status_lines",
	loupeCaptureCounterCAPTURE_TRIGGERS:              "triggers",
	loupeCaptureCounterCAPTURE_TRIGGERS_RATE_LIMITED: "triggers_rate_limited",
	loupeCaptureCounterCAPTURE_EVENTS_LOST:           "events_lost",
	loupeCaptureCounterCAPTURE_NOT_SCANNED_PARSE:     "not_scanned_parse",
	loupeCaptureCounterCAPTURE_NOT_SCANNED_LOAD:      "not_scanned_load",
	loupeCaptureCounterCAPTURE_NOT_SCANNED_TOO_LONG:  "not_scanned_too_long",
	loupeCaptureCounterCAPTURE_NOT_SCANNED_OPAQUE:    "not_scanned_opaque",
	loupeCaptureCounterCAPTURE_NOT_SCANNED_CLIENT:    "not_scanned_client",
	loupeCaptureCounterCAPTURE_CONNS_NEW:             "conns_new",
	loupeCaptureCounterCAPTURE_CONNS_NOT_ADMITTED:    "conns_not_admitted",
	loupeCaptureCounterCAPTURE_CONNS_TABLE_FULL:      "conns_table_full",
	loupeCaptureCounterCAPTURE_CONNS_EXPIRED:         "conns_expired",
	loupeCaptureCounterCAPTURE_KEPT:                  "kept",
	loupeCaptureCounterCAPTURE_KEPT_FAILED:           "kept_failed",
	loupeCaptureCounterCAPTURE_KEPT_SENT:             "kept_sent",
	loupeCaptureCounterCAPTURE_KEPT_OVERWRITTEN:      "kept_overwritten",
	loupeCaptureCounterCAPTURE_PACKETS:               "packets",
	loupeCaptureCounterCAPTURE_BYTES:                 "bytes",
	loupeCaptureCounterCAPTURE_PACKETS_LOST:          "packets_lost",
	loupeCaptureCounterCAPTURE_PACKETS_CUT:           "packets_cut",
	loupeCaptureCounterCAPTURE_MIRRORED:              "mirrored",
	loupeCaptureCounterCAPTURE_MIRROR_ERRORS:         "mirror_errors",
	loupeCaptureCounterCAPTURE_TRACES_LIMITED:        "traces_limited",
	loupeCaptureCounterCAPTURE_HTTP_REQUESTS:         "http_requests",
	loupeCaptureCounterCAPTURE_HTTP_RESPONSES:        "http_responses",
	loupeCaptureCounterCAPTURE_HTTP_FOLDED:           "http_folded",
}

// CaptureCounters reads and sums the capture capability's per-CPU counters.
func (d *Datapath) CaptureCounters() ([]Counter, error) {
	return sumCounters(d.objs.CaptureCounters, captureCounterNames[:], d.ncpu)
}
