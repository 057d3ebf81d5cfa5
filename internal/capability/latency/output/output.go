// Package output is what becomes of the latency capability's stamps once
// the kernel reader hands them over: the matcher (internal/hop) joins
// them into hops, and every matched record goes to the store's latency
// log (for `loupe latency`), to the loupe_hop_latency_seconds histograms,
// and to every OTLP target as spans on the request's trace.
//
// The latency unit opens a Pipeline, gives it to its reader as the
// hop.Sink, runs it, and closes it after the reader stopped.
package output

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/export/otlp"
	"loupe/internal/hop"
	"loupe/internal/store"
)

const (
	// flushEvery is how often matched records are written to the store
	// and the queue is checked.
	flushEvery = 100 * time.Millisecond
	// maxPending bounds the records waiting for the store's writer; past
	// it they are counted and lost (a store that cannot keep up).
	maxPending = 1 << 14
)

// Options configure a Pipeline.
type Options struct {
	Config hop.Config
	// StoreDir is the store directory (store.path); "" keeps no records.
	StoreDir  string
	Retention time.Duration
	MaxSize   int64
	// OTLPTargets are otlp:// targets (the otlp ones of export), each sent
	// the spans with OTLP's options.
	OTLPTargets []string
	OTLP        otlp.Options
	// Resolver names interfaces (default: netlink, with IfaceName first).
	Resolver  hop.Resolver
	IfaceName func(ifindex uint32) string
	// IfacePod names the pod behind an interface (Kubernetes names on);
	// nil: hops name interfaces only.
	IfacePod func(ifindex uint32) string
	Logger   *slog.Logger
}

// Pipeline is the latency capability's userspace output. It implements
// hop.Sink.
type Pipeline struct {
	*hop.Matcher
	log     *slog.Logger
	hops    *store.HopLog // nil without a store
	metrics *hop.Metrics
	spans   []*otlp.SpanExporter

	// pending holds the matched records not yet written, encoded as the
	// latency log keeps them (the matcher reuses a record's memory once
	// it is emitted); pendingN of them. spare is the buffer the last
	// flush wrote, for the next.
	mu       sync.Mutex
	pending  []byte
	pendingN int
	spare    []byte
	// writeErrors is the latency log's WriteErrors already counted in
	// lost; only flush touches it.
	writeErrors uint64

	lost *prometheus.CounterVec
}

// OTLPTargets picks the otlp:// targets out of the export list.
func OTLPTargets(exports []string) []string {
	var out []string
	for _, t := range exports {
		if strings.HasPrefix(t, otlp.Scheme+"://") {
			out = append(out, t)
		}
	}
	return out
}

// Open opens the store's latency log and the span exporters.
func Open(o Options) (*Pipeline, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cfg := o.Config
	node := cfg.NodeName
	if node == "" {
		node, _ = os.Hostname()
	}
	if o.Resolver == nil {
		o.Resolver = &hop.NetlinkResolver{Name: o.IfaceName, Pod: o.IfacePod}
	}
	p := &Pipeline{log: o.Logger.With("component", "latency")}
	p.lost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loupe_hop_records_lost_total",
		Help: "Matched latency records not stored, by reason: queue_full (the store did not keep up), write_error.",
	}, []string{"reason"})
	if o.StoreDir != "" {
		h, err := store.OpenHopLog(o.StoreDir, store.HopOptions{Retention: o.Retention, MaxSize: o.MaxSize, Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		p.hops = h
	}
	for _, t := range o.OTLPTargets {
		e, err := otlp.NewSpanExporter(t, o.OTLP, 0)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("latency spans: %w", err)
		}
		p.spans = append(p.spans, e)
	}
	p.Matcher = hop.NewMatcher(hop.Options{
		TableSize: cfg.TableSize, Window: cfg.MatchWindow, Resolver: o.Resolver,
		Node: node, BootID: bootID(), ClockSync: cfg.ClockSync, Emit: p.emit,
	})
	p.metrics = hop.NewMetrics(cfg.MaxPairs, p.Matcher.Stats)
	return p, nil
}

// bootID tells two agents of one machine (one monotonic clock) apart
// from agents of two.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (p *Pipeline) emit(r *hop.Request) {
	p.metrics.Observe(r)
	if len(p.spans) > 0 && r.TraceID != "" && len(r.Hops) > 0 {
		// The exporters queue it; they only read it.
		c := r.Clone()
		for _, e := range p.spans {
			e.Export(c)
		}
	}
	if p.hops == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pendingN >= maxPending {
		p.lost.WithLabelValues("queue_full").Inc()
		return
	}
	var err error
	if p.pending, err = store.EncodeHop(p.pending, r); err != nil {
		p.lost.WithLabelValues("write_error").Inc()
		return
	}
	p.pendingN++
}

// Run matches, stores and exports until ctx is done, then finishes what
// the matcher holds, stores it and sends the last spans.
func (p *Pipeline) Run(ctx context.Context) error {
	// The exporters outlive ctx by their last send of what the matcher
	// finishes at the end.
	spanCtx, stopSpans := context.WithCancel(context.Background())
	defer stopSpans()
	var wg sync.WaitGroup
	for _, e := range p.spans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Run(spanCtx)
		}()
	}
	expire := time.NewTicker(max(p.Matcher.Window()/4, time.Millisecond))
	defer expire.Stop()
	flush := time.NewTicker(flushEvery)
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			p.Matcher.Flush()
			p.flush()
			stopSpans()
			wg.Wait()
			return nil
		case <-expire.C:
			p.Matcher.Expire()
		case <-flush.C:
			p.flush()
		}
	}
}

// flush writes the pending records to the latency log.
func (p *Pipeline) flush() {
	p.mu.Lock()
	if p.pendingN == 0 {
		p.mu.Unlock()
		return
	}
	batch := p.pending
	p.pending, p.pendingN, p.spare = p.spare[:0], 0, nil
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.spare = batch[:0]
		p.mu.Unlock()
	}()
	if err := p.hops.AppendEncoded(batch); err != nil {
		// Append counted each record it lost.
		n := p.hops.Stats().WriteErrors
		p.lost.WithLabelValues("write_error").Add(float64(n - p.writeErrors))
		p.writeErrors = n
		p.log.Warn("latency records not stored", "err", err)
	}
}

// Collectors are the capability's userspace metrics.
func (p *Pipeline) Collectors() []prometheus.Collector {
	cs := append(p.metrics.Collectors(), p.lost)
	if len(p.spans) == 0 {
		return cs
	}
	spans := func(pick func(otlp.SpanStats) uint64) func() float64 {
		return func() float64 {
			var n uint64
			for _, e := range p.spans {
				n += pick(e.Stats())
			}
			return float64(n)
		}
	}
	for outcome, pick := range map[string]func(otlp.SpanStats) uint64{
		"exported": func(s otlp.SpanStats) uint64 { return s.Requests },
		"dropped":  func(s otlp.SpanStats) uint64 { return s.Dropped },
		"failed":   func(s otlp.SpanStats) uint64 { return s.Failed },
		"rejected": func(s otlp.SpanStats) uint64 { return s.Rejected },
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "loupe_hop_span_requests_total",
			Help:        "Requests whose hops were sent as OTLP spans (exported), or not: the queue was full (dropped), retries found no room (failed), the collector refused them (rejected).",
			ConstLabels: prometheus.Labels{"outcome": outcome},
		}, spans(pick)))
	}
	return cs
}

// Detail is the userspace half's part of `loupe status`.
func (p *Pipeline) Detail() map[string]any {
	st := p.Matcher.Stats()
	d := map[string]any{
		"stamps": st.Stamps, "contexts": st.Contexts, "requests": st.Requests, "sampled": st.Sampled,
		"incomplete": st.Incomplete, "evicted": st.Evicted, "table_entries": st.Open,
	}
	if p.hops != nil {
		hs := p.hops.Stats()
		d["stored_records"], d["store_files"], d["store_bytes"] = hs.Records, hs.Files, hs.Bytes
	}
	var spans otlp.SpanStats
	for _, e := range p.spans {
		s := e.Stats()
		spans.Requests += s.Requests
		spans.Dropped += s.Dropped
	}
	if len(p.spans) > 0 {
		d["spans_requests"], d["spans_dropped"] = spans.Requests, spans.Dropped
	}
	return d
}

// Close closes the outputs (after Run returned).
func (p *Pipeline) Close() error {
	var errs []error
	for _, e := range p.spans {
		errs = append(errs, e.Close())
	}
	if p.hops != nil {
		errs = append(errs, p.hops.Close())
	}
	return errors.Join(errs...)
}
