package datapath

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// tcpSeg is a TCP segment from port 80 to port 40000 (a server's answer)
// with the given sequence number and payload, over IPv4, IPv6, or IPv4
// behind a VLAN tag.
func tcpSeg(t *testing.T, l3 string, seq uint32, payload []byte) []byte {
	t.Helper()
	return tcpSegTo(t, l3, 40000, seq, payload)
}

// tcpSegTo is tcpSeg to the client port dport: another connection.
func tcpSegTo(t *testing.T, l3 string, dport uint16, seq uint32, payload []byte) []byte {
	t.Helper()
	tcp := &layers.TCP{SrcPort: 80, DstPort: layers.TCPPort(dport), Seq: seq, Ack: 1, ACK: true, PSH: true, Window: 512}
	switch l3 {
	case "ipv6":
		return frame(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolTCP), tcp, gopacket.Payload(payload))
	case "vlan":
		return frame(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeIPv4},
			ip4(layers.IPProtocolTCP), tcp, gopacket.Payload(payload))
	}
	return frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP), tcp, gopacket.Payload(payload))
}

// setStatusRule makes status codes lo to hi fire the trigger, on every
// connection, with no limit and no output.
func setStatusRule(t *testing.T, dp *Datapath, lo, hi uint16) {
	t.Helper()
	if err := dp.SetCaptureConfig(CaptureConfig{Rules: []Rule{{Kind: RuleHTTPStatus, StatusLo: lo, StatusHi: hi}}}); err != nil {
		t.Fatal(err)
	}
}

// captureEvents reads what the trigger sent until the ring buffer is empty.
func captureEvents(t *testing.T, r *ringbuf.Reader) []CaptureEvent {
	t.Helper()
	var out []CaptureEvent
	for {
		r.SetDeadline(time.Now().Add(50 * time.Millisecond))
		rec, err := r.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatalf("read capture event: %v", err)
		}
		ev, err := DecodeCaptureEvent(rec.RawSample)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

func captureCounterMap(t *testing.T, dp *Datapath) map[string]uint64 {
	t.Helper()
	cs, err := dp.CaptureCounters()
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]uint64)
	for _, c := range cs {
		m[c.Name] = c.Value
	}
	return m
}

// TestTriggerFindsStatusLineAtEveryOffset puts one status line at each
// offset of a 1 200-byte payload, across the scan's windows and the words
// it tests four at a time, in a body of bytes with no 'H' and in one of
// 'H's only (every word a candidate): each fires exactly once, at its own
// sequence number.
func TestTriggerFindsStatusLineAtEveryOffset(t *testing.T) {
	testutil.RequirePrivileged(t)
	const size, line = 1200, "HTTP/1.1 503 Service Unavailable"
	dp := loadForTest(t, Options{FlowBudget: 64, RingBufSize: 1 << 16, Capabilities: []string{"capture"}})
	setStatusRule(t, dp, 500, 599)
	r, err := dp.OpenCaptureEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lines := uint64(0)
	for fi, fill := range []byte{'x', 'H'} {
		port := func(at int) uint16 { return uint16(10000 + fi*size + at) }
		for at := 0; at <= size-len(line); at++ {
			payload := bytes.Repeat([]byte{fill}, size)
			copy(payload[at:], line)
			runProg(t, dp, flow.Ingress, tcpSegTo(t, "", port(at), 1000, payload))
			lines++
		}
		got := captureEvents(t, r)
		seen := map[uint16]bool{}
		for _, ev := range got {
			at := int(ev.Key.DstPort) - int(port(0))
			if ev.Status != 503 || ev.Seq != uint32(1000+at) || seen[ev.Key.DstPort] {
				t.Errorf("fill %q: event %+v: want one 503 at seq %d", fill, ev, 1000+at)
			}
			seen[ev.Key.DstPort] = true
		}
		if want := size - len(line) + 1; len(seen) != want {
			t.Errorf("fill %q: %d status lines found, want %d", fill, len(seen), want)
		}
	}
	if c := captureCounterMap(t, dp); c["status_lines"] != lines || c["triggers"] != lines {
		t.Errorf("counters %v: want %d status lines and triggers", c, lines)
	}
}

// TestTriggerFindsStatusLines runs the capture trigger on crafted segments:
// a status line at the start of the payload, after a pipelined response,
// split over two segments, deep in a 9 000-byte payload (many scan
// windows), over IPv6 and behind a VLAN tag; and nothing for a 200, a
// request line, random bytes, or an HTTP text over UDP.
func TestTriggerFindsStatusLines(t *testing.T) {
	testutil.RequirePrivileged(t)
	// BPF_PROG_TEST_RUN takes a frame of at most a page, less the skb's
	// head and tail room: 3 000 bytes of payload are 58 scan windows.
	deep := bytes.Repeat([]byte("x"), 3000)
	copy(deep[2977:], "HTTP/1.0 504 Gateway Timeout")
	garbage := make([]byte, 3000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	type seg struct {
		seq     uint32
		payload string
	}
	type hit struct {
		status uint16
		seq    uint32
		split  bool
	}
	for _, tc := range []struct {
		name  string
		l3    string
		segs  []seg
		want  []hit
		lines uint64
		// Last segments not scanned: a trace started before the scan
		// (a split status line fires on the segment's first bytes), or
		// a client's request (status lines come from servers).
		unscanned int
	}{
		{name: "start", segs: []seg{{1000, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"}},
			want: []hit{{500, 1000, false}}, lines: 1},
		{name: "ipv6", l3: "ipv6", segs: []seg{{1000, "HTTP/1.1 503 Service Unavailable\r\n\r\n"}},
			want: []hit{{503, 1000, false}}, lines: 1},
		{name: "vlan", l3: "vlan", segs: []seg{{1000, "HTTP/1.1 500 Internal Server Error\r\n\r\n"}},
			want: []hit{{500, 1000, false}}, lines: 1},
		{name: "pipelined", segs: []seg{{5000, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 502 Bad Gateway\r\n\r\n"}},
			want: []hit{{502, 5000 + 40, false}}, lines: 2},
		{name: "split", segs: []seg{{7000, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 5"}, {7000 + 48, "02 Bad Gateway\r\n\r\n"}},
			want: []hit{{502, 7000 + 38, true}}, lines: 2, unscanned: 1},
		{name: "split over three short segments", segs: []seg{{7000, "HTTP/"}, {7005, "1.1 5"}, {7010, "03 Service Unavailable\r\n\r\n"}},
			want: []hit{{503, 7000, true}}, lines: 1, unscanned: 1},
		{name: "split not in sequence", segs: []seg{{7000, "HTTP/1.1 5"}, {9000, "02 Bad Gateway\r\n\r\n"}}},
		{name: "deep", segs: []seg{{1, string(deep)}}, want: []hit{{504, 1 + 2977, false}}, lines: 1},
		{name: "ok", segs: []seg{{1, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"}}, lines: 1},
		{name: "request", segs: []seg{{1, "GET /bar HTTP/1.1\r\nHost: x\r\n\r\n"}}, unscanned: 1},
		{name: "garbage", segs: []seg{{1, string(garbage)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp := loadForTest(t, Options{FlowBudget: 64, RingBufSize: 1 << 16, Capabilities: []string{"flows", "capture"}})
			setStatusRule(t, dp, 500, 599)
			r, err := dp.OpenCaptureEvents()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var bytesIn uint64
			scanned := len(tc.segs) - tc.unscanned
			for i, s := range tc.segs {
				runProg(t, dp, flow.Ingress, tcpSeg(t, tc.l3, s.seq, []byte(s.payload)))
				if i < scanned {
					bytesIn += uint64(len(s.payload))
				}
			}
			got := captureEvents(t, r)
			if len(got) != len(tc.want) {
				t.Fatalf("events %+v, want %+v", got, tc.want)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Status != w.status || g.Seq != w.seq || g.Split != w.split || g.Key.SrcPort != 80 || g.Key.Proto != 6 {
					t.Errorf("event %d: %+v, want %+v", i, g, w)
				}
			}
			c := captureCounterMap(t, dp)
			if c["segments_scanned"] != uint64(scanned) || c["bytes_scanned"] != bytesIn || c["status_lines"] != tc.lines ||
				c["triggers"] != uint64(len(tc.want)) {
				t.Errorf("counters %v: want %d segments, %d bytes, %d status lines, %d triggers", c, scanned, bytesIn, tc.lines, len(tc.want))
			}
			// Flows still counted every segment.
			var pk uint64
			for _, d := range drainAll(t, dp) {
				pk += d.stats.Packets
			}
			if pk != uint64(len(tc.segs)) {
				t.Errorf("flows counted %d packets, want %d", pk, len(tc.segs))
			}
		})
	}

	t.Run("udp", func(t *testing.T) {
		dp := loadForTest(t, Options{FlowBudget: 64, RingBufSize: 1 << 16, Capabilities: []string{"capture"}})
		setStatusRule(t, dp, 500, 599)
		runProg(t, dp, flow.Ingress, frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolUDP),
			&layers.UDP{SrcPort: 80, DstPort: 4000}, gopacket.Payload("HTTP/1.1 500 Internal Server Error\r\n")))
		if c := captureCounterMap(t, dp); c["segments_scanned"] != 0 || c["triggers"] != 0 {
			t.Errorf("UDP scanned: %v", c)
		}
	})

	t.Run("rules change without reload", func(t *testing.T) {
		dp := loadForTest(t, Options{FlowBudget: 64, RingBufSize: 1 << 16, Capabilities: []string{"capture"}})
		r, err := dp.OpenCaptureEvents()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		// Each step on a connection of its own: a connection traced
		// once stays traced.
		for i, rule := range []struct {
			lo, hi uint16
			fires  bool
		}{{500, 599, false}, {400, 499, true}, {404, 404, true}, {0, 0, false}} {
			if rule.hi == 0 {
				if err := dp.SetCaptureConfig(CaptureConfig{}); err != nil {
					t.Fatal(err)
				}
			} else {
				setStatusRule(t, dp, rule.lo, rule.hi)
			}
			runProg(t, dp, flow.Ingress, tcpSegTo(t, "", uint16(41000+i), 1, []byte("HTTP/1.1 404 Not Found\r\n\r\n")))
			if n := len(captureEvents(t, r)); (n == 1) != rule.fires || n > 1 {
				t.Errorf("rule %d-%d: %d events", rule.lo, rule.hi, n)
			}
		}
	})
}
