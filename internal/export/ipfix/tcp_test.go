package ipfix

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"loupe/internal/flow"
)

// idBatch returns n IPv4 records whose packet counts are first+1..first+n:
// the records' identity in the TCP tests.
func idBatch(first, n int) []flow.Record {
	b := numbered(n, false)
	for i := range b {
		b[i].Packets = uint64(first + i + 1)
	}
	return b
}

// listenTCP listens on addr with a small receive buffer, so that a
// collector that stops reading stalls the exporter after a few kilobytes.
func listenTCP(t *testing.T, addr string) net.Listener {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// session is what one TCP collector connection received.
type session struct {
	ids       []int // packetDeltaCount of every record, in order
	messages  int
	lostUnrd  []int // records in bytes the kernel accepted but the collector never read
	err       error
	templates bool // the first message held the six templates and nothing else
}

// readMessage reads one message from a stream.
func readMessage(r io.Reader) ([]byte, error) {
	hdr := make([]byte, 16)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[2:]))
	if n < 16 {
		return nil, fmt.Errorf("message length %d", n)
	}
	msg := append(hdr, make([]byte, n-16)...)
	_, err := io.ReadFull(r, msg[16:])
	return msg, err
}

// consume decodes one message into s, checking its sequence number.
func (s *session) consume(d *decoder, msg []byte) error {
	m, err := d.decode(msg)
	if err != nil {
		return err
	}
	if s.messages == 0 {
		s.templates = len(m.templates) == 6 && len(m.records) == 0
	}
	if m.seq != uint32(len(s.ids)) {
		return fmt.Errorf("message %d: sequence %d after %d records", s.messages, m.seq, len(s.ids))
	}
	s.messages++
	for _, r := range m.records {
		id, _ := strconv.Atoi(r.fields["packetDeltaCount"])
		s.ids = append(s.ids, id)
	}
	return nil
}

// TestTCPCollectorDiesAndComesBack kills a TCP collector while the
// exporter has written records the collector's kernel never acknowledged,
// restarts it on the same port, and checks that every record reaches one
// of the two sessions, except those the dead collector's kernel had
// acknowledged without the collector reading them: no IPFIX exporter can
// see those, and the test reads them with MSG_PEEK to name them exactly.
// collect accepts one connection on ln and decodes messages until done
// says so (it is given the session and where the last message's records
// start) or 20 s pass; the session arrives on the channel.
func collect(ln net.Listener, done func(s *session, before int) bool) <-chan session {
	out := make(chan session, 1)
	go func() {
		var s session
		defer func() { out <- s }()
		conn, err := ln.Accept()
		if err != nil {
			s.err = err
			return
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		d := newDecoder()
		for before := 0; !done(&s, before); {
			before = len(s.ids)
			msg, err := readMessage(conn)
			if err == nil {
				err = s.consume(d, msg)
			}
			if err != nil {
				s.err = fmt.Errorf("after %d records: %w", len(s.ids), err)
				return
			}
		}
	}()
	return out
}

// stallAndKill runs a collector on ln that reads a few hundred records,
// stops reading, and once a Send blocks dies with unread data (a reset),
// closing ln. It returns the next record ID, the IDs Send reported
// delivered, the failed tails, and what the collector read and left unread.
func stallAndKill(t *testing.T, c *Client, ln1 net.Listener) (int, map[int]bool, [][]flow.Record, session) {
	t.Helper()
	const readBeforeStall = 300
	stalled, die, done1 := make(chan struct{}), make(chan struct{}), make(chan session, 1)
	go func() {
		var s session
		defer func() { done1 <- s }()
		conn, err := ln1.Accept()
		if err != nil {
			s.err = err
			return
		}
		defer conn.Close()
		d := newDecoder()
		for len(s.ids) < readBeforeStall {
			msg, err := readMessage(conn)
			if err == nil {
				err = s.consume(d, msg)
			}
			if err != nil {
				s.err = err
				return
			}
		}
		close(stalled)
		<-die
		// Name the records the kernel accepted and nobody will read, then
		// die with them unread (close sends a reset).
		raw, _ := conn.(*net.TCPConn).SyscallConn()
		_ = raw.Control(func(fd uintptr) {
			n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
			if err != nil || n == 0 {
				return
			}
			buf := make([]byte, n)
			n, _, _ = unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
			for p := buf[:max(n, 0)]; len(p) >= 16; {
				l := int(binary.BigEndian.Uint16(p[2:]))
				if l > len(p) {
					break // cut short: its rest is still unacknowledged at the exporter
				}
				m, err := d.decode(p[:l])
				if err != nil {
					s.err = err
					return
				}
				for _, r := range m.records {
					id, _ := strconv.Atoi(r.fields["packetDeltaCount"])
					s.lostUnrd = append(s.lostUnrd, id)
				}
				p = p[l:]
			}
		})
		_ = conn.(*net.TCPConn).SetLinger(0)
	}()

	// Send until the stalled collector blocks a write: the records of
	// earlier Sends now sit in the exporter's send buffer, reported
	// delivered.
	next, delivered := 0, map[int]bool{}
	var retry [][]flow.Record
	for i := 0; ; i++ {
		if i == 500 {
			t.Fatal("the stalled collector never blocked the exporter")
		}
		batch := idBatch(next, 500)
		next += 500
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		failed, err := c.Send(ctx, batch)
		cancel()
		for _, r := range batch[:len(batch)-len(failed)] {
			delivered[int(r.Packets)] = true
		}
		if err != nil {
			if len(failed) == 0 || &failed[len(failed)-1] != &batch[len(batch)-1] {
				t.Fatalf("failed is not a tail of the batch: %d records", len(failed))
			}
			retry = append(retry, failed)
			break
		}
		select {
		case <-stalled:
		default:
			if i > 50 {
				t.Fatal("collector did not stall")
			}
		}
	}
	if c.Connected() {
		t.Fatal("Connected after a timed-out write")
	}
	close(die)
	s1 := <-done1
	if s1.err != nil || !s1.templates {
		t.Fatalf("first session: %v, templates first %v", s1.err, s1.templates)
	}
	ln1.Close()
	return next, delivered, retry, s1
}

func TestTCPCollectorDiesAndComesBack(t *testing.T) {
	ln1 := listenTCP(t, "127.0.0.1:0")
	addr := ln1.Addr().String()
	// MTU 1400: the stalled collector's queue holds whole messages.
	c := newClient(t, "ipfix+tcp://"+addr, Options{MTU: 1400, Now: (&fakeClock{now: t0}).Now})

	next, delivered, retry, s1 := stallAndKill(t, c, ln1)

	// The collector is down: the dial fails and the whole batch fails.
	batch := idBatch(next, 100)
	next += 100
	failed, err := c.Send(context.Background(), batch)
	if err == nil || len(failed) != len(batch) {
		t.Fatalf("Send with the collector down: %d of %d failed, %v", len(failed), len(batch), err)
	}
	retry = append(retry, failed)

	// It comes back.
	ln2 := listenTCP(t, addr)
	want := map[int]bool{}
	for id := 1; id <= next; id++ {
		want[id] = true
	}
	for _, id := range append(s1.ids, s1.lostUnrd...) {
		delete(want, id)
	}
	seen := map[int]bool{}
	done2 := collect(ln2, func(s *session, before int) bool {
		for _, id := range s.ids[before:] {
			if want[id] {
				seen[id] = true
			}
		}
		return len(seen) == len(want)
	})
	for _, b := range retry {
		send(t, c, b)
	}
	s2 := <-done2
	if s2.err != nil || !s2.templates {
		t.Fatalf("second session: %v, templates first %v", s2.err, s2.templates)
	}
	got := map[int]bool{}
	for _, id := range s2.ids {
		got[id] = true
	}
	resent := 0
	for id := range want {
		if !got[id] {
			t.Fatalf("record %d lost", id)
		}
		if delivered[id] {
			resent++ // reported delivered, lost with the first session, resent from the window
		}
	}
	if resent == 0 {
		t.Fatal("no record was resent from the window: the test did not exercise it")
	}
	t.Logf("%d records: %d read by the first collector, %d lost unread in its kernel, %d resent from the window, %d retried by the caller",
		next, len(s1.ids), len(s1.lostUnrd), resent, len(want)-resent)
}

// A collector that dies and never comes back: at Close, every record Send
// reported delivered but the collector's host never acknowledged is
// reported abandoned, so that the queue counts it as dropped.
func TestTCPCollectorGoneAtCloseAbandons(t *testing.T) {
	ln := listenTCP(t, "127.0.0.1:0")
	c, err := New("ipfix+tcp://"+ln.Addr().String(), Options{MTU: 1400, Now: (&fakeClock{now: t0}).Now})
	if err != nil {
		t.Fatal(err)
	}
	_, delivered, _, s1 := stallAndKill(t, c, ln)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	reached := len(s1.ids) + len(s1.lostUnrd) // read, or acknowledged and left unread
	want := len(delivered) - reached
	if want <= 0 {
		t.Fatalf("test set-up: %d delivered, %d reached the collector: nothing left unacknowledged", len(delivered), reached)
	}
	if got := c.Abandoned(); got != uint64(want) {
		t.Fatalf("Abandoned() = %d, want %d (%d reported delivered, %d read, %d unread)",
			got, want, len(delivered), len(s1.ids), len(s1.lostUnrd))
	}
	t.Logf("%d reported delivered: %d read, %d acknowledged unread, %d abandoned", len(delivered), len(s1.ids), len(s1.lostUnrd), want)
}
