package datapath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/perf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// What the capture sends once its trigger fired: the packets kept before
// it, the trace's packets within the rule's limits, and what decides which
// connections can fire at all (sampling, the trigger rate, the size of the
// connection table, the keep ring).

// tcxNext is what the entry programs return for every packet (TCX_NEXT,
// -1): capture watches, it never decides a packet's fate.
const tcxNext = ^uint32(0)

// capConn is a TCP connection between a client (port) and a server on port
// 80: the server is v4A or v6A, the client v4B or v6B unless client says.
type capConn struct {
	l3     string // "" (IPv4) or "ipv6"
	client netip.Addr
	server netip.Addr // zero: v4A or v6A
	port   uint16
}

func (c capConn) ends() (client, server netip.AddrPort) {
	cl, sv := v4B, v4A
	if c.l3 == "ipv6" {
		cl, sv = v6B, v6A
	}
	if c.client.IsValid() {
		cl = c.client
	}
	if c.server.IsValid() {
		sv = c.server
	}
	return netip.AddrPortFrom(cl, c.port), netip.AddrPortFrom(sv, 80)
}

// frame is one segment of the connection, the client's or the server's.
// Ethernet pads frames to 60 bytes, as a sender on a wire does: a segment
// without payload is then 6 bytes longer than its headers.
func (c capConn) frame(t testing.TB, toServer bool, seq uint32, rst bool, payload []byte) []byte {
	t.Helper()
	src, dst := c.ends()
	smac, dmac := macA, macB
	if toServer {
		smac, dmac = macB, macA
	} else {
		src, dst = dst, src
	}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), Seq: seq, Ack: 1,
		ACK: true, PSH: len(payload) > 0, RST: rst, Window: 512}
	if src.Addr().Is4() {
		return frame(t, &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()},
			tcp, gopacket.Payload(payload))
	}
	return frame(t, &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()},
		tcp, gopacket.Payload(payload))
}

// onOneCPU keeps the test's goroutine on one thread and that thread on one
// CPU until the test ends. BPF_PROG_TEST_RUN runs the program on the
// caller's CPU: every run then writes the same CPU's part of the keep ring
// and the same perf buffer, which the reader empties in the order written.
func onOneCPU(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	var was, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("get CPU affinity: %v", err)
	}
	for cpu := 0; one.Count() == 0; cpu++ { // the first CPU the thread may use
		if was.IsSet(cpu) {
			one.Set(cpu)
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("set CPU affinity: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.SchedSetaffinity(0, &was); err != nil {
			t.Errorf("restore CPU affinity: %v", err)
		}
		runtime.UnlockOSThread()
	})
}

// capturedPackets reads the captured packets until the perf buffers are
// empty; a lost one fails the test.
func capturedPackets(t *testing.T, r *perf.Reader) []CapturedPacket {
	t.Helper()
	var out []CapturedPacket
	for {
		r.SetDeadline(time.Now().Add(50 * time.Millisecond))
		rec, err := r.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatalf("read captured packet: %v", err)
		}
		if rec.LostSamples != 0 {
			t.Fatalf("the perf buffer lost %d captured packets", rec.LostSamples)
		}
		var p CapturedPacket
		if err := DecodeCapturedPacket(rec.RawSample, &p); err != nil {
			t.Fatal(err)
		}
		p.Data = bytes.Clone(p.Data)
		out = append(out, p)
	}
}

// openCapture loads the datapath with flows and capture, puts cfg in force
// and opens both readers.
func openCapture(t *testing.T, sizes CaptureSizes, cfg CaptureConfig) (*Datapath, func() []CaptureEvent, func() []CapturedPacket) {
	t.Helper()
	dp := loadForTest(t, Options{FlowBudget: 256, RingBufSize: 1 << 16, Capabilities: []string{"flows", "capture"}, Capture: sizes})
	if err := dp.SetCaptureConfig(cfg); err != nil {
		t.Fatal(err)
	}
	evr, err := dp.OpenCaptureEvents()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { evr.Close() })
	pr, err := dp.OpenCapturePackets(1 << 18)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	return dp, func() []CaptureEvent { return captureEvents(t, evr) }, func() []CapturedPacket { return capturedPackets(t, pr) }
}

const (
	request  = "GET /bar HTTP/1.1\r\nHost: x\r\n\r\n"
	failure  = "HTTP/1.1 500 Internal Server Error\r\n\r\n" // 38 bytes
	ok       = "HTTP/1.1 200 OK\r\n\r\n"
	hdrs4    = 14 + 20 + 20 // Ethernet, IPv4, TCP
	sameSize = uint64(hdrs4 + len(failure))
)

// capStep is a segment of the connection of the client's port: the
// client's to the server, or the server's answer. The agent runs on the
// client: what the client sends crosses egress, what it receives ingress.
type capStep struct {
	port     uint16
	toServer bool
	seq      uint32
	payload  string
	rst      bool
}

// wantEvent is a trace the segment of step fired.
type wantEvent struct {
	step   int
	status uint16
	rule   uint8
	kept   uint8
}

// wantPacket is the frame of step, sent for the trace of event; caplen 0:
// the whole frame.
type wantPacket struct {
	step   int
	event  int
	kept   bool
	caplen int
}

var (
	statusRule = Rule{Kind: RuleHTTPStatus, StatusLo: 500, StatusHi: 599}
	resetRule  = Rule{Kind: RuleTCPReset}
)

// withLimits is the status rule with limits.
func withLimits(packets uint32, bytes uint64) Rule {
	r := statusRule
	r.MaxPackets, r.MaxBytes = packets, bytes
	return r
}

// TestCapturePackets runs connections through the capture and checks every
// trigger event and every packet it sends: the kept request first,
// byte-identical, then the trace's packets both ways and no other
// connection's; nothing without output; the packet and byte limits; the
// snap length; resets; the keep ring's order and its overwritten slots.
// Besides each case's counters, packets, bytes, kept_sent and triggers must
// match what was sent.
func TestCapturePackets(t *testing.T) {
	testutil.RequirePrivileged(t)
	longRequest := "GET /bar HTTP/1.1\r\nHost: x\r\nUser-Agent: " + strings.Repeat("u", 120) + "\r\n\r\n"
	longFailure := "HTTP/1.1 500 Internal Server Error\r\n\r\n" + strings.Repeat("b", 120)
	// A trace after its trigger: 38-byte segments both ways, all frames
	// sameSize bytes long.
	trace := []capStep{{40000, false, 1000, failure, false}}
	for i := range 5 {
		trace = append(trace, capStep{40000, i%2 == 0, uint32(2000 + 100*i), strings.Repeat("x", len(failure)), false})
	}
	for _, tc := range []struct {
		name     string
		l3       string
		sizes    CaptureSizes
		cfg      CaptureConfig
		steps    []capStep
		events   []wantEvent
		packets  []wantPacket
		counters map[string]uint64
	}{
		{
			name: "kept before",
			cfg:  CaptureConfig{Rules: []Rule{statusRule}, Output: true},
			steps: []capStep{
				{40000, true, 1, request, false},
				{40001, true, 1, "GET /other HTTP/1.1\r\n\r\n", false}, // another connection
				{40000, false, 1000, failure, false},
				{40000, true, 1 + uint32(len(request)), "", false}, // the client's ACK
				{40001, false, 1000, ok, false},
				{40001, false, 1000 + uint32(len(ok)), "more of the 200", false},
			},
			events:  []wantEvent{{step: 2, status: 500, kept: 1}},
			packets: []wantPacket{{step: 0, kept: true}, {step: 2}, {step: 3}},
			// Only the clients' segments are kept: the two requests.
			counters: map[string]uint64{"kept": 2, "conns_new": 2, "status_lines": 2, "traces_limited": 0, "packets_lost": 0},
		},
		{
			name: "kept before, ipv6",
			l3:   "ipv6",
			cfg:  CaptureConfig{Rules: []Rule{statusRule}, Output: true},
			steps: []capStep{
				{40000, true, 1, request, false},
				{40000, false, 1000, failure, false},
				{40000, false, 1000 + uint32(len(failure)), "", false},
			},
			events:   []wantEvent{{step: 1, status: 500, kept: 1}},
			packets:  []wantPacket{{step: 0, kept: true}, {step: 1}, {step: 2}},
			counters: map[string]uint64{"kept": 1},
		},
		{
			// A segment without payload is not kept, even padded to
			// Ethernet's 60 bytes, as a frame from a wire still is at TC
			// ingress: it would take the request's place.
			name: "padded ACK not kept",
			cfg:  CaptureConfig{Rules: []Rule{statusRule}, Output: true},
			steps: []capStep{
				{40000, true, 1, request, false},
				{40000, false, 1000, "", false},
				{40000, false, 1000, failure, false},
			},
			events:  []wantEvent{{step: 2, status: 500, kept: 1}},
			packets: []wantPacket{{step: 0, kept: true}, {step: 2}},
			// The request is a client's: kept, not scanned.
			counters: map[string]uint64{"kept": 1, "segments_scanned": 1, "bytes_scanned": uint64(len(failure)), "not_scanned_client": 1},
		},
		{
			name: "last four kept, oldest first",
			cfg:  CaptureConfig{Rules: []Rule{statusRule}, Output: true},
			steps: []capStep{
				{40000, true, 1, "POST /a HTTP/1.1\r\n", false},
				{40000, true, 19, "Host: x\r\n", false},
				{40000, true, 28, "Content-Length: 3\r\n", false},
				{40000, true, 47, "Expect: nothing\r\n", false},
				{40000, true, 64, "\r\nabc", false},
				{40000, false, 500, failure, false},
			},
			events:   []wantEvent{{step: 5, status: 500, kept: 4}},
			packets:  []wantPacket{{step: 1, kept: true}, {step: 2, kept: true}, {step: 3, kept: true}, {step: 4, kept: true}, {step: 5}},
			counters: map[string]uint64{"kept": 5, "kept_overwritten": 0},
		},
		{
			name: "no output",
			cfg:  CaptureConfig{Rules: []Rule{statusRule}},
			steps: []capStep{
				{40000, true, 1, request, false},
				{40000, false, 1000, failure, false},
				{40000, true, 1 + uint32(len(request)), "", false},
			},
			events:   []wantEvent{{step: 1, status: 500, kept: 0}},
			counters: map[string]uint64{"kept": 1},
		},
		{
			name:     "max packets",
			cfg:      CaptureConfig{Rules: []Rule{withLimits(3, 0)}, Output: true},
			steps:    trace,
			events:   []wantEvent{{step: 0, status: 500}},
			packets:  []wantPacket{{step: 0}, {step: 1}, {step: 2}},
			counters: map[string]uint64{"traces_limited": 1},
		},
		{
			name:     "max bytes, three packets' worth",
			cfg:      CaptureConfig{Rules: []Rule{withLimits(0, 3*sameSize)}, Output: true},
			steps:    trace,
			events:   []wantEvent{{step: 0, status: 500}},
			packets:  []wantPacket{{step: 0}, {step: 1}, {step: 2}},
			counters: map[string]uint64{"traces_limited": 1},
		},
		{
			// The fourth packet would take the trace past its limit.
			name:     "max bytes, three and a half packets' worth",
			cfg:      CaptureConfig{Rules: []Rule{withLimits(0, 3*sameSize+sameSize/2)}, Output: true},
			steps:    trace,
			events:   []wantEvent{{step: 0, status: 500}},
			packets:  []wantPacket{{step: 0}, {step: 1}, {step: 2}},
			counters: map[string]uint64{"traces_limited": 1},
		},
		{
			name:     "max bytes, below one packet",
			cfg:      CaptureConfig{Rules: []Rule{withLimits(0, sameSize/2)}, Output: true},
			steps:    trace,
			events:   []wantEvent{{step: 0, status: 500}},
			counters: map[string]uint64{"traces_limited": 1},
		},
		{
			name: "snaplen",
			cfg:  CaptureConfig{Rules: []Rule{statusRule}, Output: true, Snaplen: 100},
			steps: []capStep{
				{40000, true, 1, longRequest, false},
				{40000, false, 1000, longFailure, false},
				{40000, true, 1 + uint32(len(longRequest)), "", false}, // 60 bytes: whole
			},
			events:  []wantEvent{{step: 1, status: 500, kept: 1}},
			packets: []wantPacket{{step: 0, kept: true, caplen: 100}, {step: 1, caplen: 100}, {step: 2}},
		},
		{
			name: "reset",
			cfg:  CaptureConfig{Rules: []Rule{resetRule}, Output: true},
			steps: []capStep{
				{40000, true, 1, request, false},
				{40000, false, 777, "", true},
				{40000, true, 1 + uint32(len(request)), "", true},
			},
			events:   []wantEvent{{step: 1, status: 0, kept: 1}},
			packets:  []wantPacket{{step: 0, kept: true}, {step: 1}, {step: 2}},
			counters: map[string]uint64{"status_lines": 0},
		},
		{
			// A server's segments are not kept: the 200 is not.
			name: "reset, by the second rule",
			cfg:  CaptureConfig{Rules: []Rule{statusRule, resetRule}, Output: true},
			steps: []capStep{
				{40000, false, 1000, ok, false},
				{40000, true, 1, "", true},
			},
			events:  []wantEvent{{step: 1, status: 0, rule: 1, kept: 0}},
			packets: []wantPacket{{step: 1}},
		},
		{
			name: "reset without a reset rule",
			cfg:  CaptureConfig{Rules: []Rule{statusRule}, Output: true},
			steps: []capStep{
				{40000, true, 1, request, false},
				{40000, false, 777, "", true},
			},
			counters: map[string]uint64{"kept": 1},
		},
		{
			name: "500 without a status rule",
			cfg:  CaptureConfig{Rules: []Rule{resetRule}, Output: true},
			steps: []capStep{
				{40000, true, 1, request, false},
				{40000, false, 1000, failure, false},
			},
			counters: map[string]uint64{"kept": 1, "status_lines": 1},
		},
		{
			// One slot per CPU: the second connection's request takes
			// the first one's, which must not be sent for the first.
			name:  "keep slot overwritten",
			sizes: CaptureSizes{Connections: 64, KeepPackets: 4, KeepSlotsPerCPU: 1, KeepSnap: MaxKeepSnap},
			cfg:   CaptureConfig{Rules: []Rule{statusRule}, Output: true},
			steps: []capStep{
				{40000, true, 1, request, false},
				{40001, true, 1, "GET /other HTTP/1.1\r\n\r\n", false},
				{40000, false, 1000, failure, false},
				{40001, false, 1000, "HTTP/1.1 503 Service Unavailable\r\n\r\n", false},
			},
			events:   []wantEvent{{step: 2, status: 500, kept: 0}, {step: 3, status: 503, kept: 1}},
			packets:  []wantPacket{{step: 2, event: 0}, {step: 1, event: 1, kept: true}, {step: 3, event: 1}},
			counters: map[string]uint64{"kept": 2, "kept_overwritten": 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onOneCPU(t)
			sizes := tc.sizes
			if sizes == (CaptureSizes{}) {
				sizes = DefaultCaptureSizes()
			}
			dp, events, packets := openCapture(t, sizes, tc.cfg)
			frames := make([][]byte, len(tc.steps))
			dirs := make([]flow.Direction, len(tc.steps))
			for i, s := range tc.steps {
				frames[i] = capConn{l3: tc.l3, port: s.port}.frame(t, s.toServer, s.seq, s.rst, []byte(s.payload))
				dirs[i] = flow.Ingress
				if s.toServer {
					dirs[i] = flow.Egress
				}
				if ret := runProg(t, dp, dirs[i], frames[i]); ret != tcxNext {
					t.Fatalf("step %d: the program returned %d, want TCX_NEXT", i, int32(ret))
				}
			}

			gotEv := events()
			if len(gotEv) != len(tc.events) {
				t.Fatalf("%d events %+v, want %d", len(gotEv), gotEv, len(tc.events))
			}
			for i, w := range tc.events {
				g, s := gotEv[i], tc.steps[w.step]
				src, dst := capConn{l3: tc.l3, port: s.port}.ends()
				if !s.toServer {
					src, dst = dst, src
				}
				if g.Status != w.status || g.Rule != w.rule || g.Kept != w.kept || g.Seq != s.seq || g.Split || g.TraceID&1 == 0 ||
					g.Key.SrcAddr != src.Addr().As16() || g.Key.DstAddr != dst.Addr().As16() ||
					g.Key.SrcPort != src.Port() || g.Key.DstPort != dst.Port() || g.Key.Proto != 6 || g.Key.Direction != dirs[w.step] {
					t.Errorf("event %d: %+v, want %+v from step %d (%v -> %v, seq %d)", i, g, w, w.step, src, dst, s.seq)
				}
			}

			got := packets()
			if len(got) != len(tc.packets) {
				t.Errorf("%d packets sent, want %d:", len(got), len(tc.packets))
				for _, g := range got {
					t.Errorf("  %s", describePacket(g))
				}
				t.FailNow()
			}
			var live, liveBytes, kept uint64
			last := map[uint32]uint64{}
			for i, w := range tc.packets {
				g, f, ev := got[i], frames[w.step], gotEv[w.event]
				want := f
				if w.caplen > 0 {
					want = f[:w.caplen]
				}
				if g.Kept != w.kept || g.Len != uint32(len(f)) || !bytes.Equal(g.Data, want) || g.TraceID != ev.TraceID ||
					g.Status != ev.Status || g.Rule != ev.Rule || g.Direction != dirs[w.step] {
					t.Errorf("packet %d: %s\nwant step %d's frame (%d bytes, %d captured), kept %v, trace %#x, status %d, rule %d, %s",
						i, describePacket(g), w.step, len(f), len(want), w.kept, ev.TraceID, ev.Status, ev.Rule, dirs[w.step])
				}
				if g.Time < last[g.TraceID] {
					t.Errorf("packet %d: time %d before the trace's previous packet's %d", i, g.Time, last[g.TraceID])
				}
				last[g.TraceID] = g.Time
				if w.kept {
					kept++
				} else {
					live++
					liveBytes += uint64(len(f))
				}
			}

			c := captureCounterMap(t, dp)
			want := map[string]uint64{"packets": live, "bytes": liveBytes, "kept_sent": kept, "triggers": uint64(len(tc.events))}
			for k, v := range tc.counters {
				want[k] = v
			}
			for k, v := range want {
				if c[k] != v {
					t.Errorf("counter %s = %d, want %d", k, c[k], v)
				}
			}
		})
	}
}

func describePacket(p CapturedPacket) string {
	return fmt.Sprintf("kept %v, len %d, %d captured, trace %#x, status %d, rule %d, %s, data % x",
		p.Kept, p.Len, len(p.Data), p.TraceID, p.Status, p.Rule, p.Direction, p.Data[:min(len(p.Data), 16)])
}

// connHash is conn_hash (bpf/capture/conn.h) of the TCP connection between
// a and b: struct conn_key (the lower address and port first, addresses
// compared as big-endian numbers, IPv4 mapped into IPv6) read as five
// native-endian words and mixed.
func connHash(a, b netip.AddrPort) uint32 {
	a16, b16 := a.Addr().As16(), b.Addr().As16()
	if c := bytes.Compare(a16[:], b16[:]); c > 0 || (c == 0 && a.Port() > b.Port()) {
		a, b, a16, b16 = b, a, b16, a16
	}
	var k [40]byte
	copy(k[0:], a16[:])
	copy(k[16:], b16[:])
	binary.NativeEndian.PutUint16(k[32:], a.Port())
	binary.NativeEndian.PutUint16(k[34:], b.Port())
	k[36] = 6 // IPPROTO_TCP; the pad stays zero
	h := uint64(0x9e3779b97f4a7c15)
	for i := 0; i < len(k); i += 8 {
		h ^= binary.NativeEndian.Uint64(k[i:])
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
	}
	return uint32(h >> 32)
}

// TestCaptureSampling: a rule with Sample=N admits exactly the connections
// whose hash is a multiple of N, whichever end has the lower address; the
// others cost no table entry and are counted per packet.
func TestCaptureSampling(t *testing.T) {
	testutil.RequirePrivileged(t)
	const conns = 200
	for _, tc := range []struct {
		name   string
		l3     string
		lower  netip.Addr // a client address below the server's
		sample uint32
	}{
		{"ipv4, 1 in 4", "", netip.MustParseAddr("10.0.0.9"), 4},
		{"ipv4, 1 in 7", "", netip.MustParseAddr("10.0.0.9"), 7},
		{"ipv6, 1 in 4", "ipv6", netip.MustParseAddr("2001:db7::9"), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := statusRule
			rule.Sample = tc.sample
			dp, events, _ := openCapture(t, DefaultCaptureSizes(), CaptureConfig{Rules: []Rule{rule}})
			want := map[netip.AddrPort]bool{}
			for i := range conns {
				c := capConn{l3: tc.l3, port: uint16(40000 + i)}
				if i%2 == 1 {
					c.client = tc.lower
				}
				client, server := c.ends()
				if connHash(client, server)%tc.sample == 0 {
					want[client] = true
				}
				runProg(t, dp, flow.Ingress, c.frame(t, false, 1000, false, []byte(failure)))
				// The client's ACK: another packet of the same entry, or
				// of none.
				runProg(t, dp, flow.Egress, c.frame(t, true, 1, false, nil))
			}
			if len(want) == 0 || len(want) == conns {
				t.Fatalf("the hash samples %d connections of %d: the test proves nothing", len(want), conns)
			}
			got := map[netip.AddrPort]bool{}
			for _, ev := range events() {
				got[netip.AddrPortFrom(ev.Key.DstIP(), ev.Key.DstPort)] = true
			}
			for a := range want {
				if !got[a] {
					t.Errorf("%v: sampled by the hash, no trigger", a)
				}
			}
			for a := range got {
				if !want[a] {
					t.Errorf("%v: triggered, not sampled by the hash", a)
				}
			}
			n := uint64(len(want))
			c := captureCounterMap(t, dp)
			if c["triggers"] != n || c["conns_new"] != n || c["conns_not_admitted"] != 2*(conns-n) {
				t.Errorf("%d connections sampled: triggers %d, conns_new %d, conns_not_admitted %d (want %d packets)",
					n, c["triggers"], c["conns_new"], c["conns_not_admitted"], 2*(conns-n))
			}
			if n, err := dp.CaptureConnections(); err != nil || n != len(want) {
				t.Errorf("%d connections in the table (%v), want %d", n, err, len(want))
			}
		})
	}
}

// monotonic is CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func monotonic(t *testing.T) time.Duration {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// nextSecond sleeps to just past the next whole second of the monotonic
// clock: the trigger rate's window.
func nextSecond(t *testing.T) {
	t.Helper()
	now := monotonic(t)
	time.Sleep(now.Truncate(time.Second) + time.Second + time.Millisecond - now)
}

// TestCaptureTriggerRate: at most MaxTriggersSec traces start in one second
// of the monotonic clock, over every connection; the triggers over it are
// counted, and the next second allows more. Each try runs within one
// second, checked on the same clock: one that straddled two is retried.
func TestCaptureTriggerRate(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, tc := range []struct {
		name  string
		limit uint32
		conns int
		want  int
	}{
		{"2 a second", 2, 5, 2},
		{"at the limit", 5, 5, 5},
		{"no limit", 0, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp, events, _ := openCapture(t, DefaultCaptureSizes(), CaptureConfig{Rules: []Rule{statusRule}, MaxTriggersSec: tc.limit})
			port := uint16(40000)
			fail := func() {
				runProg(t, dp, flow.Ingress, capConn{port: port}.frame(t, false, 1000, false, []byte(failure)))
				port++
			}
			for try := 1; ; try++ {
				before := captureCounterMap(t, dp)
				nextSecond(t)
				start := monotonic(t)
				for range tc.conns {
					fail()
				}
				end := monotonic(t)
				evs := events()
				c := captureCounterMap(t, dp)
				if start/time.Second != end/time.Second {
					if try == 3 {
						t.Fatalf("three tries straddled a second")
					}
					t.Logf("try %d straddled a second (%v to %v): again", try, start, end)
					continue
				}
				triggers, limited := c["triggers"]-before["triggers"], c["triggers_rate_limited"]-before["triggers_rate_limited"]
				if len(evs) != tc.want || triggers != uint64(tc.want) || limited != uint64(tc.conns-tc.want) {
					t.Fatalf("%d failing connections in one second: %d events, triggers %d, triggers_rate_limited %d; want %d, %d, %d",
						tc.conns, len(evs), triggers, limited, tc.want, tc.want, tc.conns-tc.want)
				}
				break
			}
			// A new second, a new allowance.
			before := captureCounterMap(t, dp)["triggers"]
			nextSecond(t)
			fail()
			if n, tr := len(events()), captureCounterMap(t, dp)["triggers"]-before; n != 1 || tr != 1 {
				t.Fatalf("the next second: %d events, triggers %d; want 1 and 1", n, tr)
			}
		})
	}
}

// TestCaptureTableFull: with a table of 8 connections and 50 connections,
// each new one is entered in place of the least recently seen, the table
// stays within its size, and the capture keeps working: the newest
// connection still has its request kept, the first is followed afresh,
// its kept request gone with its entry, and flows still counts every
// packet.
func TestCaptureTableFull(t *testing.T) {
	testutil.RequirePrivileged(t)
	onOneCPU(t)
	dp, events, packets := openCapture(t, CaptureSizes{Connections: 8, KeepPackets: 4, KeepSlotsPerCPU: 64, KeepSnap: MaxKeepSnap},
		CaptureConfig{Rules: []Rule{statusRule}, Output: true})
	const conns = 50
	reqs := make([][]byte, conns)
	for i := range conns {
		reqs[i] = capConn{port: uint16(40000 + i)}.frame(t, true, 1, false, []byte(request))
		if ret := runProg(t, dp, flow.Egress, reqs[i]); ret != tcxNext {
			t.Fatalf("connection %d: the program returned %d", i, int32(ret))
		}
	}
	if n, err := dp.CaptureConnections(); err != nil || n < 1 || n > 8 {
		t.Fatalf("%d connections in a table of 8 (%v)", n, err)
	}
	c := captureCounterMap(t, dp)
	if c["conns_new"] != conns || c["conns_table_full"] != 0 || c["kept"] != conns {
		t.Fatalf("50 connections through a table of 8: conns_new %d, conns_table_full %d, kept %d; want 50, 0, 50",
			c["conns_new"], c["conns_table_full"], c["kept"])
	}

	last, first := capConn{port: 40000 + conns - 1}, capConn{port: 40000}
	lastFail, firstFail := last.frame(t, false, 1000, false, []byte(failure)), first.frame(t, false, 1000, false, []byte(failure))
	runProg(t, dp, flow.Ingress, lastFail)
	runProg(t, dp, flow.Ingress, firstFail)
	evs := events()
	if len(evs) != 2 || evs[0].Key.DstPort != last.port || evs[0].Kept != 1 || evs[1].Key.DstPort != first.port || evs[1].Kept != 0 {
		t.Fatalf("events %+v: want connection %d's with its request kept, then connection %d's without", evs, last.port, first.port)
	}
	pkts := packets()
	if len(pkts) != 3 || !pkts[0].Kept || !bytes.Equal(pkts[0].Data, reqs[conns-1]) || pkts[0].TraceID != evs[0].TraceID ||
		pkts[1].Kept || !bytes.Equal(pkts[1].Data, lastFail) || pkts[1].TraceID != evs[0].TraceID ||
		pkts[2].Kept || !bytes.Equal(pkts[2].Data, firstFail) || pkts[2].TraceID != evs[1].TraceID {
		for _, p := range pkts {
			t.Errorf("  %s", describePacket(p))
		}
		t.Fatalf("%d packets: want the last connection's request and failure, then the first's failure", len(pkts))
	}
	if c := captureCounterMap(t, dp); c["conns_new"] != conns+1 || c["triggers"] != 2 {
		t.Errorf("conns_new %d, triggers %d: want %d and 2", c["conns_new"], c["triggers"], conns+1)
	}
	var flows uint64
	for _, d := range drainAll(t, dp) {
		flows += d.stats.Packets
	}
	if flows != conns+2 {
		t.Errorf("flows counted %d packets, want %d", flows, conns+2)
	}
}
