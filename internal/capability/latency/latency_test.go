package latency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/capability"
	"loupe/internal/capability/latency/output"
	"loupe/internal/datapath"
	"loupe/internal/hop"
	"loupe/internal/testutil"
)

const (
	testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	testSpanID  = "00f067aa0ba902b7"
)

// open loads a datapath and opens the unit on it as the agent would: with
// the unit's switches on, or, refused, told so and the datapath loaded
// without them. loadLatency false loads the datapath without the
// capability and does not tell the unit (its ring is then missing).
func open(t *testing.T, refused error, loadLatency bool) (*Unit, *datapath.Datapath) {
	t.Helper()
	testutil.RequirePrivileged(t)
	cfg := DefaultConfig()
	cfg.Enabled = true
	u := New(cfg, output.Options{StoreDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	caps := []string{"flows"}
	if refused != nil {
		u.Refused(refused)
	} else if loadLatency {
		caps = append(caps, u.Switches()...)
	}
	dp, err := datapath.Load(datapath.Options{FlowBudget: 64, RingBufSize: 1 << 16, Capabilities: caps, Latency: cfg.Sizes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	if err := u.Open(&capability.Host{Datapath: dp, IfaceName: func(uint32) string { return "lo" }}); err != nil {
		t.Fatal(err)
	}
	return u, dp
}

// request is one segment from 10.0.0.1:40000 to 10.0.0.2:80 carrying a
// whole HTTP request with traceparent after some other headers.
func request(t *testing.T, seq uint32) []byte {
	t.Helper()
	var b strings.Builder
	b.WriteString("GET /items HTTP/1.1\r\nHost: shop.example\r\n")
	for i := range 8 {
		fmt.Fprintf(&b, "X-Filler-%d: %s\r\n", i, strings.Repeat("v", 60))
	}
	fmt.Fprintf(&b, "traceparent: 00-%s-%s-01\r\n\r\n", testTraceID, testSpanID)
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 80, Seq: seq, Ack: 1, ACK: true, PSH: true, Window: 512}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4},
		ip, tcp, gopacket.Payload(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// recorder is a hop.Sink that keeps what it is handed.
type recorder struct {
	mu       sync.Mutex
	stamps   []hop.Stamp
	contexts []hop.Context
}

func (r *recorder) Stamp(s hop.Stamp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stamps = append(r.stamps, s)
}

func (r *recorder) Context(c hop.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.contexts = append(r.contexts, c)
}

func (r *recorder) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.stamps), len(r.contexts)
}

// gather reads every series of the collectors as "name/label values" ->
// value (a histogram's sample count).
func gather(t *testing.T, cs []prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return got
}

// TestOpenRunClose: the unit reads what the real entry program wrote to
// its ring (two requests with traceparent: a stamp and a context each)
// into its sink while it runs, counts it, serves the kernel's counters
// and its own, and says so in its status; Run returns once its context is
// done, and Close releases the reader and the output.
func TestOpenRunClose(t *testing.T) {
	u, dp := open(t, nil, true)
	if !u.Up() {
		t.Fatalf("unit not up: %+v", u.Status())
	}
	rec := &recorder{}
	u.SetSink(rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	for _, seq := range []uint32{1000, 5000} {
		if _, err := dp.Egress().Run(&ebpf.RunOptions{Data: request(t, seq)}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, cx := rec.counts(); st == 2 && cx == 2 {
			break
		}
		if time.Now().After(deadline) {
			st, cx := rec.counts()
			t.Fatalf("sink got %d stamps and %d contexts, want 2 and 2", st, cx)
		}
	}
	for i, c := range rec.contexts {
		if fmt.Sprintf("%x", c.TraceID) != testTraceID || fmt.Sprintf("%x", c.SpanID) != testSpanID || c.Source != hop.SourceTraceparent {
			t.Errorf("context %d: %+v", i, c)
		}
	}

	got := gather(t, u.Collectors())
	for name, want := range map[string]float64{
		"loupe_latency_up": 1, "loupe_latency_records_total/stamp": 2, "loupe_latency_records_total/context": 2,
		"loupe_latency_bad_records_total": 0, "loupe_latency_read_errors_total": 0,
		"loupe_latency_events_total/requests": 2, "loupe_latency_events_total/found_traceparent": 2,
		"loupe_latency_events_total/not_found": 0, "loupe_latency_events_total/malformed": 0,
		"loupe_latency_events_total/ring_full_request": 0,
		// The output's: nothing reached the matcher, the sink took it.
		"loupe_hop_stamps_total": 0, "loupe_hop_table_entries": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (served: %v), want %v", name, v, ok, want)
		}
	}
	for name := range got {
		if strings.HasPrefix(name, "loupe_signal_up") {
			t.Errorf("the latency unit serves %s: it is no kernel signal", name)
		}
	}

	st := u.Status()
	if st.Name != Name || !st.Enabled || st.State != "running" || st.Detail["latency"] != "running" ||
		st.Detail["stamps"] != uint64(2) || st.Detail["contexts"] != uint64(2) || st.Detail["matching"] == nil {
		t.Errorf("status %+v", st)
	}
	if _, ok := st.Detail["scans_in_progress"]; !ok {
		t.Errorf("status without scans_in_progress: %+v", st.Detail)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of its context's end")
	}
	if s := u.Status().State; s != "stopping" {
		t.Errorf("state after Run %q, want stopping", s)
	}
	if err := u.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestRefused: the kernel refused the entry programs with the capability
// (the agent loaded them without it and said why): the unit opens, is
// down with the reason in its status, serves loupe_latency_up 0 and none
// of the kernel's or the matcher's series, runs until its context ends
// and closes. A datapath without the capability that nobody said was
// refused degrades the same way, with its own reason.
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refused error
		reason  string
	}{
		{"refused", errors.New("verifier says no"), "verifier says no"},
		{"not loaded", nil, "not loaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, dp := open(t, tc.refused, false)
			if u.Up() {
				t.Fatal("unit up without the capability")
			}
			// The programs run without the capability: no record.
			if _, err := dp.Egress().Run(&ebpf.RunOptions{Data: request(t, 1000)}); err != nil {
				t.Fatal(err)
			}
			st := u.Status()
			if d, _ := st.Detail["latency"].(string); !strings.HasPrefix(d, "unavailable: ") || !strings.Contains(d, tc.reason) {
				t.Errorf("status detail latency %q, want unavailable: ...%s", d, tc.reason)
			}
			if _, ok := st.Detail["matching"]; ok {
				t.Errorf("status of a refused unit has matching: %+v", st.Detail)
			}
			got := gather(t, u.Collectors())
			if v, ok := got["loupe_latency_up"]; !ok || v != 0 {
				t.Errorf("loupe_latency_up = %v (served: %v), want 0", v, ok)
			}
			for name := range got {
				if strings.HasPrefix(name, "loupe_latency_events_total") || strings.HasPrefix(name, "loupe_hop_") {
					t.Errorf("refused unit serves %s", name)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := u.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
			if err := u.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}
