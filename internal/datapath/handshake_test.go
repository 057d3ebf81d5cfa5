package datapath

import (
	"net/netip"
	"testing"
	"time"

	"loupe/internal/flow"
)

func (s sigTest) handshakes() map[flow.Key]HandshakeResult {
	s.t.Helper()
	drainAll(s.t, s.dp)
	m, err := s.dp.DrainHandshakes()
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

func tcpConn(client string, port uint16, server string) sigConn {
	return sigConn{client: netip.AddrPortFrom(netip.MustParseAddr(client), port),
		server: netip.AddrPortFrom(netip.MustParseAddr(server), 443), tcp: true}
}

// TestHandshakeRTT runs handshakes in a known order, with known gaps: the
// SYN and the ACK cross the hook one way (egress at a client, or a hook
// the traffic passes through), the SYN-ACK the other. The client's flow
// gets the RTT, the sum of its two halves, each at least the gap the test
// left and at most the time it measured around it.
func TestHandshakeRTT(t *testing.T) {
	s := newSigTest(t, Options{})
	for _, c := range []sigConn{tcpConn("10.1.2.3", 50000, "192.0.2.80"), tcpConn("2001:db8::1", 50001, "2001:db8::80")} {
		const isn, sisn = 1000, 5000
		t0 := time.Now()
		s.run(flow.Egress, c.seg(t, true, "S", isn, 0, nil))
		time.Sleep(2 * time.Millisecond)
		s.run(flow.Ingress, c.seg(t, false, "SA", sisn, isn+1, nil))
		time.Sleep(3 * time.Millisecond)
		s.run(flow.Egress, c.seg(t, true, "A", isn+1, sisn+1, nil))
		t2 := time.Now()
		// The client's first data and the server's answer: not handshake packets.
		s.run(flow.Egress, c.seg(t, true, "PA", isn+1, sisn+1, []byte("GET / HTTP/1.1\r\n\r\n")))
		s.run(flow.Ingress, c.seg(t, false, "A", sisn+1, isn+19, nil))

		got := s.handshakes()
		r, ok := resultOf(got, c.client, flow.Egress)
		if !ok || len(got) != 1 {
			t.Fatalf("%v: results %+v, want one on the client's flow", c.client, got)
		}
		if r.SynToSynAck < 2*time.Millisecond || r.SynAckToAck < 3*time.Millisecond ||
			r.RTT != r.SynToSynAck+r.SynAckToAck || r.RTT > t2.Sub(t0) {
			t.Errorf("%v: %+v, want SYN to SYN-ACK >= 2ms, SYN-ACK to ACK >= 3ms, their sum <= %v", c.client, r, t2.Sub(t0))
		}
	}
	checkCounters(t, s.counters(s.dp.HandshakeCounters), map[string]uint64{"syns": 2, "measured": 2})
	h, err := s.dp.HandshakeStats()
	if err != nil {
		t.Fatal(err)
	}
	if h.Count != 2 || h.SumNs < uint64(10*time.Millisecond) {
		t.Errorf("stats %+v: want 2 handshakes of at least 5 ms each", h)
	}
}

// TestHandshakeNotTimed: what must not give an RTT. A SYN sent again and a
// SYN-ACK sent again (Karn's rule: which one did the answer answer?), a
// SYN-ACK that acknowledges another sequence number, a SYN-ACK without its
// SYN, and the packets out of order.
func TestHandshakeNotTimed(t *testing.T) {
	s := newSigTest(t, Options{})
	const isn, sisn = 1000, 5000
	c := tcpConn("10.1.2.3", 51000, "192.0.2.80")
	s.run(flow.Egress, c.seg(t, true, "S", isn, 0, nil), c.seg(t, true, "S", isn, 0, nil))
	s.run(flow.Ingress, c.seg(t, false, "SA", sisn, isn+1, nil))
	s.run(flow.Egress, c.seg(t, true, "A", isn+1, sisn+1, nil))

	c = tcpConn("10.1.2.3", 51001, "192.0.2.80")
	s.run(flow.Egress, c.seg(t, true, "S", isn, 0, nil))
	s.run(flow.Ingress, c.seg(t, false, "SA", sisn, isn+1, nil), c.seg(t, false, "SA", sisn, isn+1, nil))
	s.run(flow.Egress, c.seg(t, true, "A", isn+1, sisn+1, nil))

	c = tcpConn("10.1.2.3", 51002, "192.0.2.80")
	s.run(flow.Egress, c.seg(t, true, "S", isn, 0, nil))
	s.run(flow.Ingress, c.seg(t, false, "SA", sisn, isn+7, nil))
	s.run(flow.Egress, c.seg(t, true, "A", isn+1, sisn+1, nil))

	c = tcpConn("10.1.2.3", 51003, "192.0.2.80")
	s.run(flow.Ingress, c.seg(t, false, "SA", sisn, isn+1, nil))
	s.run(flow.Egress, c.seg(t, true, "A", isn+1, sisn+1, nil))

	c = tcpConn("10.1.2.3", 51004, "192.0.2.80")
	s.run(flow.Egress, c.seg(t, true, "S", isn, 0, nil))
	s.run(flow.Egress, c.seg(t, true, "A", isn+1, sisn+1, nil))
	s.run(flow.Ingress, c.seg(t, false, "SA", sisn, isn+1, nil))

	if got := s.handshakes(); len(got) != 0 {
		t.Errorf("results %+v, want none", got)
	}
	checkCounters(t, s.counters(s.dp.HandshakeCounters), map[string]uint64{
		"syns": 4, "retransmitted": 2, "synack_mismatch": 1, "synack_without_syn": 1,
	})

	// The connection whose SYN-ACK came after an ACK is still pending:
	// its handshake completes with the next ACK of the SYN-ACK.
	s.run(flow.Egress, tcpConn("10.1.2.3", 51004, "192.0.2.80").seg(t, true, "A", isn+1, sisn+1, nil))
	if got := s.handshakes(); len(got) != 1 {
		t.Errorf("results %+v, want the pending connection's", got)
	}
}

// TestHandshakeLastACKWithData: a client that delays its ACK sends it with
// its first data: that segment ends the handshake. The segments after it,
// which acknowledge the same number, are not looked up again (the counter
// of timed handshakes stays at one).
func TestHandshakeLastACKWithData(t *testing.T) {
	s := newSigTest(t, Options{})
	const isn, sisn = 1000, 5000
	c := tcpConn("10.1.2.3", 53000, "192.0.2.80")
	s.run(flow.Egress, c.seg(t, true, "S", isn, 0, nil))
	s.run(flow.Ingress, c.seg(t, false, "SA", sisn, isn+1, nil))
	s.run(flow.Egress, c.seg(t, true, "PA", isn+1, sisn+1, []byte("GET / HTTP/1.1\r\n\r\n")))
	s.run(flow.Egress, c.seg(t, true, "PA", isn+19, sisn+1, []byte("more")))
	if got := s.handshakes(); len(got) != 1 {
		t.Errorf("results %+v, want the handshake", got)
	}
	checkCounters(t, s.counters(s.dp.HandshakeCounters), map[string]uint64{"syns": 1, "measured": 1})
}

// TestHandshakeSwapsWithFlows: a result lands in the interval its ACK was
// in, as the flow records do: drained after the next swap, not before.
func TestHandshakeSwapsWithFlows(t *testing.T) {
	s := newSigTest(t, Options{})
	c := tcpConn("10.1.2.3", 52000, "192.0.2.80")
	s.run(flow.Egress, c.seg(t, true, "S", 1, 0, nil))
	s.run(flow.Ingress, c.seg(t, false, "SA", 9, 2, nil))
	s.run(flow.Egress, c.seg(t, true, "A", 2, 10, nil))
	// Without a swap, the table the programs write is not drained.
	if m, err := s.dp.DrainHandshakes(); err != nil || len(m) != 0 {
		t.Fatalf("before the swap: %+v, %v; want nothing", m, err)
	}
	if got := s.handshakes(); len(got) != 1 {
		t.Fatalf("after the swap: %+v, want the handshake", got)
	}
	if got := s.handshakes(); len(got) != 0 {
		t.Fatalf("the next interval: %+v, want nothing", got)
	}
}
