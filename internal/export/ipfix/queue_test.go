package ipfix

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"loupe/internal/export/delivery"
)

// TestThroughQueueTCPCollectorLate runs the client behind the delivery
// queue, as the agent does, with the collector down at first: the queue
// retries the failed sends, and once the collector listens every record
// arrives exactly once, in order, and the queue counts them all as sent.
func TestThroughQueueTCPCollectorLate(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close() // the port is free and nobody listens: dials are refused

	c, err := New("ipfix+tcp://"+addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := delivery.New(c.Target().String(), c, delivery.Options{
		BatchSize: 300, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, ShutdownTimeout: 20 * time.Second,
	})
	const total = 2000
	ctx := context.Background()
	for first := 0; first < total; first += 500 {
		if err := q.Write(ctx, idBatch(first, 500)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Wait (bounded) for the first refused send before the collector starts.
	for i := 0; q.Stats().SendErrors == 0; i++ {
		if i == 1000 {
			t.Fatal("the queue never tried to send")
		}
		time.Sleep(5 * time.Millisecond)
	}

	ln := listenTCP(t, addr)
	got := collect(ln, func(s *session, _ int) bool { return len(s.ids) >= total })
	s := <-got
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if s.err != nil || !s.templates {
		t.Fatalf("collector: %v, templates first %v", s.err, s.templates)
	}
	for i, id := range s.ids {
		if id != i+1 {
			t.Fatalf("record %d has id %d", i, id)
		}
	}
	st := q.Stats()
	if st.Sent != total || st.Dropped() != 0 || st.SendErrors == 0 {
		t.Fatalf("queue stats: %+v", st)
	}
	t.Logf("%d records after %d refused sends: %s", len(s.ids), st.SendErrors, strconv.Itoa(s.messages)+" messages")
}

// TestThroughQueueUDPPortUnreachable runs a UDP client behind the queue
// to a port where nothing listens: the host's ICMP port unreachable makes
// every send fail, so nothing counts as sent, the records stay queued, the
// connected gauge stays 0 and each refusal is counted; once a collector
// listens, every record arrives exactly once.
func TestThroughQueueUDPPortUnreachable(t *testing.T) {
	probe := listenUDP(t, "udp4", "127.0.0.1:0")
	addr := probe.LocalAddr().String()
	probe.Close() // the port is free: datagrams draw ICMP port unreachable

	c, err := New("ipfix+udp://"+addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := delivery.New(c.Target().String(), c, delivery.Options{
		BatchSize: 500, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, ShutdownTimeout: 20 * time.Second,
	})
	const total = 2000
	ctx := context.Background()
	if err := q.Write(ctx, idBatch(0, total)); err != nil {
		t.Fatal(err)
	}
	if err := q.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; q.Stats().SendErrors < 3; i++ {
		if i == 2000 {
			t.Fatalf("the queue did not retry: %+v", q.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := q.Stats(); st.Sent != 0 || st.Queued != total || st.Connected != 0 || st.Unreachable == 0 {
		t.Fatalf("while refused: %+v; want nothing sent, all %d queued, not connected, refusals counted", st, total)
	}

	col := listenUDP(t, "udp4", addr)
	d := newDecoder()
	var ids []int
	buf := make([]byte, 65536)
	_ = col.SetReadDeadline(time.Now().Add(20 * time.Second))
	for len(ids) < total {
		n, err := col.Read(buf)
		if err != nil {
			t.Fatalf("after %d records: %v", len(ids), err)
		}
		m, err := d.decode(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.records {
			id, _ := strconv.Atoi(r.fields["packetDeltaCount"])
			ids = append(ids, id)
		}
	}
	for i, id := range ids {
		if id != i+1 {
			t.Fatalf("record %d has id %d", i, id)
		}
	}
	for i := 0; q.Stats().Sent != total || q.Stats().Connected != 1; i++ {
		if i == 2000 {
			t.Fatalf("after delivery: %+v", q.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	assertNoMore(t, col)
	// Every failed send was one refusal: none failed for another reason.
	if st := q.Stats(); st.Dropped() != 0 || st.Unreachable != st.SendErrors {
		t.Fatalf("final stats: %+v; want no drops and one refusal per failed send", st)
	}
}
