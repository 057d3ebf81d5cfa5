package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"loupe/internal/hop"
)

// The latency capability's maps (bpf/latency/hop.h): the ring of stamps
// and trace contexts, the scans in progress (an LRU) with their slots, and
// counters. The latency unit (internal/capability/latency) reads the ring
// into a hop.Sink; the datapath sizes the maps, sets the sampling rate and
// the scan limit, and decodes the records.

// LatencySizes configure the latency capability.
type LatencySizes struct {
	// Sampling stamps 1 in Sampling TCP segments with payload (0: none
	// but requests).
	Sampling int
	// UntracedSampling stamps 1 in UntracedSampling HTTP requests whose
	// header block holds no trace context, or one that says its trace is
	// not sampled (1: all, 0: none); a request of a sampled trace is
	// always stamped.
	UntracedSampling int
	// ScanLimit is the bytes of a request's header block scanned for its
	// trace context, at most.
	ScanLimit int
	// Scans is the requests whose header block is scanned at once, per
	// hook (an LRU: past it, the oldest scan is forgotten and counted).
	Scans int
	// RingSize is the ring buffer's bytes: a power of two, at least a
	// page.
	RingSize int
}

// DefaultLatencySizes are the sizes when the configuration says nothing.
func DefaultLatencySizes() LatencySizes {
	return LatencySizes{Sampling: 0, UntracedSampling: DefaultUntracedSampling, ScanLimit: 16 << 10, Scans: 16384, RingSize: 1 << 20}
}

// DefaultUntracedSampling is LatencySizes.UntracedSampling's default: 1
// request in 16 without a trace context is stamped. Every stamped request
// costs a ring record per hook, the matcher's work and a record in the
// latency log, and without a context it links to no trace: stamping all
// of them cost HTTP a third of its requests per second (bench/RESULTS.md,
// "Per-hop latency"), while 1 in 16, decided by the 5-tuple and sequence
// number alike at every hook, still fills the hop histograms.
const DefaultUntracedSampling = 16

// Bounds of LatencySizes.ScanLimit: the kernel scans at most 64 KiB of
// one buffer, any number of buffers.
const (
	MinLatencyScanLimit = 256
	MaxLatencyScanLimit = 1 << 20
)

// latencyRecordSize is struct latency_event's size: 104 bytes.
const latencyRecordSize = int(unsafe.Sizeof(loupeLatencyEvent{}))

// sizeLatency sizes the latency maps of spec; off, at their smallest.
func sizeLatency(spec *ebpf.CollectionSpec, s LatencySizes, on bool) error {
	page := os.Getpagesize()
	if !on {
		s = LatencySizes{ScanLimit: MinLatencyScanLimit, Scans: 1, RingSize: page}
	}
	if err := checkTableSize("latency scans", s.Scans); err != nil {
		return err
	}
	if s.ScanLimit < MinLatencyScanLimit || s.ScanLimit > MaxLatencyScanLimit {
		return fmt.Errorf("latency header scan limit %d: must be %d to %d", s.ScanLimit, MinLatencyScanLimit, MaxLatencyScanLimit)
	}
	if s.Sampling < 0 {
		return fmt.Errorf("latency sampling 1:%d: must not be negative", s.Sampling)
	}
	if s.UntracedSampling < 0 {
		return fmt.Errorf("latency untraced sampling 1:%d: must not be negative", s.UntracedSampling)
	}
	if s.RingSize < page || s.RingSize&(s.RingSize-1) != 0 {
		return fmt.Errorf("latency ring size %d: must be a power of two of at least %d", s.RingSize, page)
	}
	spec.Maps[loupeMapLatencyScans].MaxEntries = uint32(s.Scans)
	spec.Maps[loupeMapLatencyEvents].MaxEntries = uint32(s.RingSize)
	// Twice the scans' slots, so that few connections share one.
	slots := roundPow2(2 * s.Scans)
	if !on {
		slots = 1
	}
	spec.Maps[loupeMapLatencySlots].MaxEntries = uint32(slots)
	if err := spec.Variables[loupeVarLatencySlotMask].Set(uint32(slots - 1)); err != nil {
		return fmt.Errorf("set latency slots: %w", err)
	}
	// A record wakes the reader only past a quarter of the ring; below
	// it the reader drains on its own period (bpf/latency/hop.h).
	if err := spec.Variables[loupeVarLatencyWakeBytes].Set(uint64(s.RingSize / 4)); err != nil {
		return fmt.Errorf("set latency wake-up: %w", err)
	}
	if err := spec.Variables[loupeVarLatencyScanLimit].Set(uint32(s.ScanLimit)); err != nil {
		return fmt.Errorf("set latency scan limit: %w", err)
	}
	if err := spec.Variables[loupeVarLatencySampleThreshold].Set(sampleThreshold(s.Sampling)); err != nil {
		return fmt.Errorf("set latency sampling: %w", err)
	}
	// 1 in 1: 2^32, above every hash.
	if err := spec.Variables[loupeVarLatencyUntracedThreshold].Set(sampleThreshold(s.UntracedSampling)); err != nil {
		return fmt.Errorf("set latency untraced sampling: %w", err)
	}
	return nil
}

// sampleThreshold is the kernel's threshold for 1 in n: a segment is kept
// when the top 32 bits of its hash are below it.
func sampleThreshold(n int) uint64 {
	if n <= 0 {
		return 0
	}
	return ((1 << 32) + uint64(n) - 1) / uint64(n)
}

// The records of the ring (enum latency_record).
const (
	latencyRecStamp   = 1
	latencyRecContext = 2
	// latencyRecBoth is a request's stamp and the context found in its
	// first segment, in one record.
	latencyRecBoth = 3
)

// LatencyReader reads the latency ring and hands its records to a sink.
type LatencyReader struct {
	r   *ringbuf.Reader
	rec ringbuf.Record
	// The records of a read, for a hop.BatchSink.
	stamps []hop.Stamp
	ctxs   []hop.Context
}

// latencyBatch is the most records handed to a hop.BatchSink at once.
const latencyBatch = 512

// OpenLatency opens the reader of the latency ring.
func (d *Datapath) OpenLatency() (*LatencyReader, error) {
	if !d.hasCapability("latency") {
		return nil, errors.New("the latency capability is not loaded")
	}
	r, err := ringbuf.NewReader(d.objs.LatencyEvents)
	if err != nil {
		return nil, fmt.Errorf("open latency ring: %w", err)
	}
	return &LatencyReader{r: r}, nil
}

// ErrLatencyClosed is returned by Read once the reader is closed.
var ErrLatencyClosed = errors.New("latency reader closed")

// errLatencyTimeout is what ringbuf returns when the deadline passes.
var errLatencyTimeout = os.ErrDeadlineExceeded

// Read hands the records the ring holds to sink, once the ring wakes it
// or wait has passed (0: at once). Records wake it only past a quarter of
// the ring (latency_wake_bytes), so below that it reads what the ring
// gathered in wait. It returns the stamps and contexts handed
// and the records it could not decode. It returns ErrLatencyClosed once
// Close was called. A hop.BatchSink is handed the records in batches.
func (l *LatencyReader) Read(sink hop.Sink, wait time.Duration) (stamps, contexts, bad int, err error) {
	bs, batched := sink.(hop.BatchSink)
	if batched {
		defer l.deliver(bs)
	}
	l.r.SetDeadline(time.Now().Add(wait))
	for n := 0; ; n++ {
		if n == 1 {
			// Once something came, take what else is there without
			// waiting: a deadline past already, set once (the reader
			// looks at it only when the ring is empty), not a clock
			// read per record.
			l.r.SetDeadline(time.Unix(1, 0))
		}
		if err := l.r.ReadInto(&l.rec); err != nil {
			switch {
			case errors.Is(err, errLatencyTimeout):
				return stamps, contexts, bad, nil
			case errors.Is(err, ringbuf.ErrClosed):
				return stamps, contexts, bad, ErrLatencyClosed
			}
			return stamps, contexts, bad, fmt.Errorf("read latency ring: %w", err)
		}
		st, ctx, kind, err := DecodeLatencyRecord(l.rec.RawSample)
		if err != nil {
			bad++
			continue
		}
		if kind != latencyRecContext {
			stamps++
			if batched {
				l.stamps = append(l.stamps, st)
			} else {
				sink.Stamp(st)
			}
		}
		if kind != latencyRecStamp {
			contexts++
			if batched {
				l.ctxs = append(l.ctxs, ctx)
			} else {
				sink.Context(ctx)
			}
		}
		if len(l.stamps)+len(l.ctxs) >= latencyBatch {
			l.deliver(bs)
		}
	}
}

// deliver hands the records gathered to bs.
func (l *LatencyReader) deliver(bs hop.BatchSink) {
	if len(l.stamps)+len(l.ctxs) == 0 {
		return
	}
	bs.Batch(l.stamps, l.ctxs)
	l.stamps, l.ctxs = l.stamps[:0], l.ctxs[:0]
}

// Close stops the reader; a Read in progress returns ErrLatencyClosed.
func (l *LatencyReader) Close() error { return l.r.Close() }

// Offsets in struct latency_event, from the generated type.
const (
	latOffKey      = int(unsafe.Offsetof(loupeLatencyEvent{}.Key))
	latOffSeq      = int(unsafe.Offsetof(loupeLatencyEvent{}.Seq))
	latOffLen      = int(unsafe.Offsetof(loupeLatencyEvent{}.Len))
	latOffRecord   = int(unsafe.Offsetof(loupeLatencyEvent{}.Record))
	latOffKind     = int(unsafe.Offsetof(loupeLatencyEvent{}.Kind))
	latOffTunneled = int(unsafe.Offsetof(loupeLatencyEvent{}.Tunneled))
	latOffSource   = int(unsafe.Offsetof(loupeLatencyEvent{}.Source))
	latOffTraceID  = int(unsafe.Offsetof(loupeLatencyEvent{}.TraceId))
	latOffSpanID   = int(unsafe.Offsetof(loupeLatencyEvent{}.SpanId))
)

// DecodeLatencyRecord decodes one ring record: a stamp (kind 1), a
// context (kind 2), or both (kind 3: a request's stamp and the context of
// its first segment, which has the stamp's time and sequence number).
// Field by field in the host's byte order, without reflection: every
// segment of every request at every hook comes through here, and
// binary.Read cost more per record than the matcher.
func DecodeLatencyRecord(raw []byte) (hop.Stamp, hop.Context, int, error) {
	if len(raw) < latencyRecordSize {
		return hop.Stamp{}, hop.Context{}, 0, fmt.Errorf("latency record of %d bytes, want %d", len(raw), latencyRecordSize)
	}
	ne := binary.NativeEndian
	t, seq := ne.Uint64(raw), ne.Uint32(raw[latOffSeq:])
	tunneled := raw[latOffTunneled] != 0
	var (
		s hop.Stamp
		c hop.Context
	)
	rec := raw[latOffRecord]
	switch rec {
	case latencyRecStamp, latencyRecBoth:
		s = hop.Stamp{TimeNs: t, Tunneled: tunneled, Seq: seq, Len: ne.Uint32(raw[latOffLen:]), Kind: hop.Kind(raw[latOffKind])}
		keyFromBytes(&s.Key, raw[latOffKey:])
	case latencyRecContext:
	default:
		return hop.Stamp{}, hop.Context{}, 0, fmt.Errorf("latency record of type %d", rec)
	}
	if rec == latencyRecStamp {
		return s, c, int(rec), nil
	}
	c = hop.Context{TimeNs: t, Tunneled: tunneled, Seq: seq, Source: hop.Source(raw[latOffKind])}
	if rec == latencyRecBoth {
		c.Source = hop.Source(raw[latOffSource])
		c.Key = s.Key
	} else {
		keyFromBytes(&c.Key, raw[latOffKey:])
	}
	copy(c.TraceID[:], raw[latOffTraceID:])
	copy(c.SpanID[:], raw[latOffSpanID:])
	return s, c, int(rec), nil
}

// latencyCounterNames follows enum latency_counter.
var latencyCounterNames = [loupeLatencyCounterLATENCY_COUNTER_MAX]string{
	loupeLatencyCounterLATENCY_REQUESTS:          "requests",
	loupeLatencyCounterLATENCY_FOUND_TRACEPARENT: "found_traceparent",
	loupeLatencyCounterLATENCY_FOUND_B3:          "found_b3",
	loupeLatencyCounterLATENCY_FOUND_B3SINGLE:    "found_b3_single",
	loupeLatencyCounterLATENCY_FOUND_TCP_OPTION:  "found_tcp_option",
	loupeLatencyCounterLATENCY_FOUND_IP_OPTION:   "found_ip_option",
	loupeLatencyCounterLATENCY_NOT_FOUND:         "not_found",
	loupeLatencyCounterLATENCY_SCAN_LIMIT:        "scan_limit",
	loupeLatencyCounterLATENCY_SCAN_EVICTED:      "scan_evicted",
	loupeLatencyCounterLATENCY_SCAN_OUT_OF_ORDER: "scan_out_of_order",
	loupeLatencyCounterLATENCY_SCAN_LOAD_ERROR:   "scan_load_error",
	loupeLatencyCounterLATENCY_SCAN_ABANDONED:    "scan_abandoned",
	loupeLatencyCounterLATENCY_MALFORMED:         "malformed",
	loupeLatencyCounterLATENCY_NOT_HTTP:          "not_http",
	loupeLatencyCounterLATENCY_SCAN_TABLE_FULL:   "scan_table_full",
	loupeLatencyCounterLATENCY_SAMPLED:           "sampled",
	loupeLatencyCounterLATENCY_RING_FULL_REQUEST: "ring_full_request",
	loupeLatencyCounterLATENCY_RING_FULL_SAMPLED: "ring_full_sampled",
	loupeLatencyCounterLATENCY_RING_FULL_CONTEXT: "ring_full_context",
	loupeLatencyCounterLATENCY_SCAN_REUSED:       "scan_reused",
	loupeLatencyCounterLATENCY_UNTRACED_SKIPPED:  "untraced_skipped",
	loupeLatencyCounterLATENCY_UNSAMPLED_SKIPPED: "unsampled_skipped",
}

// LatencyCounters reads and sums the latency capability's per-CPU
// counters.
func (d *Datapath) LatencyCounters() ([]Counter, error) {
	return sumCounters(d.objs.LatencyCounters, latencyCounterNames[:], d.ncpu)
}

// LatencyScans counts the scans in progress (a walk of the table: for the
// status, not for every scrape).
func (d *Datapath) LatencyScans() (int, error) {
	var (
		k loupeFlowKey
		n int
	)
	v := make([]byte, d.objs.LatencyScans.ValueSize())
	it := d.objs.LatencyScans.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("count latency scans: %w", err)
	}
	return n, nil
}
