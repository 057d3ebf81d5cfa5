package ipfix

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// window keeps the data sets of the messages written on the current TCP
// connection that the collector's TCP stack has not acknowledged yet.
//
// A successful write only means the bytes reached the local send buffer.
// When a collector dies, everything still in that buffer, or in flight, is
// gone; the delivery queue cannot retry it because Send already reported it
// delivered (and the queue reuses the batch). So the client keeps those
// messages itself, learns how far the peer has acknowledged from SIOCOUTQ
// (bytes written but not yet acknowledged), and resends the rest on the next
// connection, with new headers. The window is bounded by the socket's send
// buffer (net.ipv4.tcp_wmem, 4 MiB at most by default): the kernel cannot
// hold more unacknowledged bytes than that, so neither does the window.
type window struct {
	written uint64 // bytes written on this connection, headers included
	msgs    []sentMsg
	head    int // msgs[head:] are unacknowledged
	bodies  []byte
	// pending are the unacknowledged messages of closed connections, in
	// order, waiting to be resent on the next one.
	pending []pendingMsg
	peek    [1]byte
}

type sentMsg struct {
	end      uint64 // stream offset just past the message
	off, len int    // its data sets in bodies
	records  int
}

type pendingMsg struct {
	body    []byte
	records int
}

// push records a message of msgLen bytes, whose data sets are body,
// written on the current connection.
func (w *window) push(body []byte, records, msgLen int) {
	w.written += uint64(msgLen)
	if records == 0 {
		return
	}
	w.msgs = append(w.msgs, sentMsg{end: w.written, off: len(w.bodies), len: len(body), records: records})
	w.bodies = append(w.bodies, body...)
}

// poll trims the acknowledged messages and reports whether the peer has
// closed (io.EOF) or reset the connection. It costs two system calls.
func (w *window) poll(raw syscall.RawConn) error {
	var outq int
	var ioctlErr, peerErr error
	err := raw.Control(func(fd uintptr) {
		outq, ioctlErr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		n, _, err := unix.Recvfrom(int(fd), w.peek[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case n == 0 && err == nil:
			peerErr = io.EOF
		case err != nil && !errors.Is(err, unix.EAGAIN):
			peerErr = err
		}
	})
	if err != nil {
		return fmt.Errorf("poll connection: %w", err)
	}
	if ioctlErr == nil {
		w.ack(w.written - uint64(outq))
	}
	if peerErr != nil {
		return fmt.Errorf("peer: %w", peerErr)
	}
	return nil
}

// ack drops the messages that end at or before stream offset acked.
func (w *window) ack(acked uint64) {
	for w.head < len(w.msgs) && w.msgs[w.head].end <= acked {
		w.head++
	}
	if w.head == len(w.msgs) {
		w.msgs, w.bodies, w.head = w.msgs[:0], w.bodies[:0], 0
		return
	}
	// Compact once the acknowledged prefix is most of the buffer, so the
	// buffer stays within twice the unacknowledged bytes.
	if off := w.msgs[w.head].off; off > 64<<10 && off > len(w.bodies)/2 {
		w.bodies = w.bodies[:copy(w.bodies, w.bodies[off:])]
		n := copy(w.msgs, w.msgs[w.head:])
		w.msgs, w.head = w.msgs[:n], 0
		for i := range w.msgs {
			w.msgs[i].off -= off
		}
	}
}

// closeConn moves the unacknowledged messages of the connection being
// closed in front of those still pending, and resets the stream offsets.
// It copies (reconnects are rare; the copies are freed once resent).
func (w *window) closeConn() {
	live := w.msgs[w.head:]
	if len(live) > 0 {
		p := make([]pendingMsg, 0, len(live)+len(w.pending))
		for _, m := range live {
			p = append(p, pendingMsg{body: bytes.Clone(w.bodies[m.off : m.off+m.len]), records: m.records})
		}
		w.pending = append(p, w.pending...)
	}
	w.msgs, w.bodies, w.head, w.written = w.msgs[:0], w.bodies[:0], 0, 0
}

// records counts the unacknowledged and pending records.
func (w *window) records() int {
	n := 0
	for _, m := range w.msgs[w.head:] {
		n += m.records
	}
	for _, m := range w.pending {
		n += m.records
	}
	return n
}
