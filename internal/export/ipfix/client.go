// Package ipfix exports flow records to IPFIX collectors (RFC 7011) over UDP
// or TCP.
//
// It provides a delivery.Client: delivery.New wraps it into the queued,
// retrying export.Sink the agent uses. The encoder is Loupe's own (about 250
// lines, encode.go) rather than go-ipfix: writing fixed offsets into one
// buffer is allocation-free and faster than per-element value objects, and
// above all the client must know which records of a batch a failed write
// lost, which the delivery contract needs (docs/exporters/ipfix.md has the
// measurements).
//
// Six templates are sent (IPv4, IPv6, non-IP, and the same for estimates);
// their elements are listed by Elements. Over UDP the templates ride at the
// head of the first message, of every message after a refused one, and
// then again every TemplateRefresh or TemplateRefreshMessages messages,
// whichever comes first; with an MTU too small for them and a record, they
// go in messages of their own just before. Over TCP they are sent once per
// connection.
package ipfix

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"loupe/internal/flow"
)

// Options configure a Client. Zero values take the defaults.
type Options struct {
	// ObservationDomain is the header's Observation Domain ID. Default 1
	// (0 is reserved by RFC 7011 §3.1 for elements of no domain).
	ObservationDomain uint32
	// MTU is the largest IPFIX message, in bytes (the UDP payload; the
	// header's length field). Default 1400 over UDP, which fits a
	// 1500-byte path with IPv6 and UDP headers (1448), so no message is
	// ever IP-fragmented; 8192 over TCP, which bounds what a broken
	// connection cuts off. 512 to 65535.
	MTU int
	// TemplateRefresh (UDP): templates are resent with the first message
	// after this long. Default 1 minute: the RFC 6728 default of 10
	// minutes would let a restarted collector discard 10 minutes of
	// records, and templates cost only 784 bytes.
	TemplateRefresh time.Duration
	// TemplateRefreshMessages (UDP): templates are also resent after this
	// many messages without them. Default 100, so at a high rate a
	// restarted collector loses at most 100 messages (about 1 700 IPv4
	// records at MTU 1400) and the templates cost about 0.6% of the bytes.
	TemplateRefreshMessages int
	// EnterpriseNumber is the Private Enterprise Number of Loupe's own
	// elements. Default 32473, IANA's documentation PEN (RFC 5612).
	EnterpriseNumber uint32
	// DialTimeout bounds a TCP connection attempt. Default 5 s.
	DialTimeout time.Duration
	// WriteTimeout bounds one message's write. Default 10 s.
	WriteTimeout time.Duration
	// Logger, default slog.Default(); the client adds component=ipfix.
	Logger *slog.Logger
	// Now gives the export time of the message headers and the clock of
	// the template refresh. Default time.Now.
	Now func() time.Time
}

// Defaults.
const (
	DefaultObservationDomain       = 1
	DefaultMTUUDP                  = 1400
	DefaultMTUTCP                  = 8192
	DefaultTemplateRefresh         = time.Minute
	DefaultTemplateRefreshMessages = 100
	DefaultEnterpriseNumber        = 32473
	DefaultDialTimeout             = 5 * time.Second
	DefaultWriteTimeout            = 10 * time.Second
)

func (o *Options) setDefaults(network string) error {
	if o.ObservationDomain == 0 {
		o.ObservationDomain = DefaultObservationDomain
	}
	if o.MTU == 0 {
		o.MTU = DefaultMTUUDP
		if network == "tcp" {
			o.MTU = DefaultMTUTCP
		}
	}
	if o.EnterpriseNumber == 0 {
		o.EnterpriseNumber = DefaultEnterpriseNumber
	}
	if err := checkMTU(o.MTU); err != nil {
		return fmt.Errorf("ipfix MTU: %w", err)
	}
	if o.TemplateRefresh == 0 {
		o.TemplateRefresh = DefaultTemplateRefresh
	}
	if o.TemplateRefreshMessages == 0 {
		o.TemplateRefreshMessages = DefaultTemplateRefreshMessages
	}
	if o.TemplateRefresh < 0 || o.TemplateRefreshMessages < 0 {
		return errors.New("ipfix template refresh: want a positive interval and message count")
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Client sends flow records to one IPFIX collector. It implements
// delivery.Client, delivery.Rejecter, delivery.Connector and
// delivery.Unreacher. Send and Close must be called from one goroutine (the
// queue's); Connected, Rejected and Unreachable may be called from any.
type Client struct {
	target Target
	opts   Options
	log    *slog.Logger
	enc    *encoder

	conn net.Conn
	raw  syscall.RawConn // TCP only: send-queue and liveness checks
	// udpRaw (UDP only) reads the socket's pending error: the ICMP port
	// unreachable a datagram drew. readSoErr, made once, stores it in
	// soErr and soErrErr, so that the read allocates nothing.
	udpRaw    syscall.RawConn
	readSoErr func(fd uintptr)
	soErr     int
	soErrErr  error
	// down: the collector was found unreachable and not reached since;
	// "collector unreachable" is logged once per outage.
	down bool
	// seq counts the data records sent in this transport session, mod
	// 2^32: the header's sequence number (RFC 7011 §3.1).
	seq uint32

	// UDP template refresh state.
	templatesAt    time.Time
	sinceTemplates int
	needTemplates  bool

	win window // TCP only: messages written but not yet acknowledged

	connected   atomic.Bool
	rejected    atomic.Uint64
	unreachable atomic.Uint64
	abandoned   uint64 // set by Close: see Abandoned

	// abort lets a Send's context cut a blocked write short. abortConn
	// is the connection Send writes to; abortGen changes when a Send
	// ends, so that a late callback of an earlier Send cannot touch the
	// next one's writes.
	abortMu   sync.Mutex
	abortConn net.Conn
	abortGen  uint64
}

// New returns a client for target (see ParseTarget). It does not connect:
// Send dials, so an agent starts while its collector is down.
func New(target string, opts Options) (*Client, error) {
	t, err := ParseTarget(target)
	if err != nil {
		return nil, err
	}
	if err := opts.setDefaults(t.Network); err != nil {
		return nil, err
	}
	c := &Client{
		target:        t,
		opts:          opts,
		log:           opts.Logger.With("component", "ipfix", "target", t.String()),
		enc:           newEncoder(opts.ObservationDomain, opts.MTU, opts.EnterpriseNumber),
		needTemplates: true,
	}
	c.readSoErr = func(fd uintptr) {
		c.soErr, c.soErrErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
	}
	return c, nil
}

// Target returns the parsed target.
func (c *Client) Target() Target { return c.target }

// Connected implements delivery.Connector. Over TCP it means a connection
// is open and was alive at the last Send. Over UDP it means the last Send
// wrote every message and neither they nor the Send before drew an ICMP
// error (port unreachable) from the collector's host; UDP cannot see a
// dead collector whose host does not answer so.
func (c *Client) Connected() bool { return c.connected.Load() }

// Unreachable implements delivery.Unreacher: how many times the collector
// was found unreachable: an ICMP error on the UDP socket (port
// unreachable: ECONNREFUSED), or a TCP connection refused or without a
// route.
func (c *Client) Unreachable() uint64 { return c.unreachable.Load() }

// Rejected implements delivery.Rejecter: the records whose variable-length
// values (DNS name, drop reasons) make them larger than a message of the
// MTU can hold, which are not sent. Every other record fits, as does each
// template set.
func (c *Client) Rejected() uint64 { return c.rejected.Swap(0) }

// Send implements delivery.Client: it encodes batch into as many messages
// as the MTU requires and writes them in order. On a write error it returns
// the records from the failed message on (a tail of batch).
//
// Over UDP a collector's host that has no listener answers each datagram
// with an ICMP port unreachable, which the kernel keeps as the socket's
// pending error: Send reads it after every message, so that a message the
// host refused fails with its records (the queue retries them) instead of
// counting as sent. On a loopback or a local link the ICMP error is there
// when the write returns; from a remote host it arrives one round trip
// later, so Send also reads it before the first message: an error found
// then belongs to an earlier Send's datagrams, which are lost (and were
// counted as sent), and keeps Connected false. Hosts rate-limit ICMP
// errors, so some refused datagrams draw none. Over TCP Send
// first closes a connection the collector closed, reconnects, resends the
// templates and the messages the dead connection's peer never acknowledged
// (at-least-once: a record acknowledged by the collector's kernel but never
// read by the collector is the one loss TCP cannot reveal).
func (c *Client) Send(ctx context.Context, batch []flow.Record) ([]flow.Record, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	// Registered before connecting: the templates and the messages a
	// reconnect resends are writes that the context must cut short too.
	c.abortMu.Lock()
	gen := c.abortGen
	c.abortMu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		c.abortMu.Lock()
		defer c.abortMu.Unlock()
		if c.abortGen == gen && c.abortConn != nil {
			_ = c.abortConn.SetWriteDeadline(time.Unix(1, 0))
		}
	})
	defer func() {
		stop()
		c.abortMu.Lock()
		c.abortGen++
		c.abortMu.Unlock()
	}()
	if err := c.ensureConn(ctx); err != nil {
		return batch, err
	}
	lateRefusal := false
	if c.udpRaw != nil {
		if err := c.pendingError(); err != nil {
			// For datagrams of an earlier Send: this batch is unsent.
			c.refused(fmt.Errorf("ipfix %s: an earlier message was refused: %w", c.target, err))
			lateRefusal = true
		}
	}
	// The templates of the records with fields present only where
	// measured are made now, so that the new ones go before them.
	c.enc.prepare(batch)
	for i := 0; i < len(batch); {
		now := c.opts.Now()
		withTemplates := c.target.Network == "udp" && (c.needTemplates ||
			now.Sub(c.templatesAt) >= c.opts.TemplateRefresh ||
			c.sinceTemplates >= c.opts.TemplateRefreshMessages)
		tpl := 0
		switch {
		case withTemplates && c.enc.head == nil:
			// The MTU is too small for the templates and a record:
			// they go first, in messages of their own.
			if err := c.writeTemplates(ctx, now); err != nil {
				return batch[i:], err
			}
		case withTemplates:
			tpl = len(c.enc.head)
		case len(c.enc.fresh) > 0:
			// Templates made since the last were sent: the receiver
			// has the others.
			if err := c.writeFresh(ctx, now); err != nil {
				return batch[i:], err
			}
		}
		msg, taken, held := c.enc.message(batch[i:], tpl > 0, exportTime(now), c.seq)
		if n := taken - held; n > 0 {
			c.rejected.Add(uint64(n))
			c.log.Warn("records too large for the MTU not sent", "records", n, "mtu", c.opts.MTU)
		}
		if held > 0 || tpl > 0 {
			if err := c.write(ctx, msg, held, tpl); err != nil {
				return batch[i:], err
			}
		}
		if withTemplates {
			c.templatesAt, c.sinceTemplates, c.needTemplates = now, 0, false
			c.enc.fresh = nil // every template went
		} else {
			c.sinceTemplates++
		}
		i += taken
	}
	if c.udpRaw != nil && !lateRefusal {
		c.down = false
		c.connected.Store(true)
	}
	return nil, nil
}

// pendingError reads and clears the UDP socket's pending error, which is
// how the kernel reports an ICMP error for a datagram already sent.
func (c *Client) pendingError() error {
	if err := c.udpRaw.Control(c.readSoErr); err != nil {
		return err
	}
	if c.soErrErr != nil {
		return c.soErrErr
	}
	if c.soErr != 0 {
		return syscall.Errno(c.soErr)
	}
	return nil
}

// isUnreachable reports whether err says the collector's host refused a
// message or connection, or cannot be routed to.
func isUnreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}

// refused records that the collector was found unreachable over UDP.
func (c *Client) refused(err error) {
	c.unreachable.Add(1)
	c.connected.Store(false)
	// The collector is down or restarting, and will need templates.
	c.needTemplates = true
	if !c.down {
		c.down = true
		c.log.Warn("collector unreachable", "err", err)
	}
}

// writeTemplates writes the template sets in messages of their own.
func (c *Client) writeTemplates(ctx context.Context, now time.Time) error {
	for _, body := range c.enc.tplMsgs {
		if err := c.write(ctx, c.enc.templatesOnly(body, exportTime(now), c.seq), 0, len(body)); err != nil {
			return err
		}
	}
	c.enc.fresh = nil
	return nil
}

// writeFresh writes the templates made since templates were last sent, in
// messages of their own.
func (c *Client) writeFresh(ctx context.Context, now time.Time) error {
	var sets [][]byte
	for _, ti := range c.enc.fresh {
		sets = append(sets, appendTemplateSet(nil, c.enc.tpls[ti:ti+1], c.opts.EnterpriseNumber))
	}
	for _, body := range packSets(sets, c.opts.MTU) {
		if err := c.write(ctx, c.enc.templatesOnly(body, exportTime(now), c.seq), 0, len(body)); err != nil {
			return err
		}
	}
	c.enc.fresh = nil
	return nil
}

// write writes one message of n records, whose first tpl bytes after the
// header are template sets. A failed write closes a TCP connection.
func (c *Client) write(ctx context.Context, msg []byte, n, tpl int) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout)); err != nil {
		return c.fail(fmt.Errorf("ipfix %s: set deadline: %w", c.target, err), 0)
	}
	if err := ctx.Err(); err != nil { // checked after the deadline: see Send's AfterFunc
		return err
	}
	w, err := c.conn.Write(msg)
	if err == nil && c.udpRaw != nil {
		// The ICMP error this datagram drew, if the host answered
		// already: then it was refused, not delivered.
		if err = c.pendingError(); err != nil {
			err = fmt.Errorf("refused: %w", err)
		}
	}
	if err != nil {
		err = fmt.Errorf("ipfix %s: write: %w", c.target, err)
		if c.udpRaw != nil && isUnreachable(err) {
			c.refused(err)
		}
		return c.fail(err, w)
	}
	c.seq += uint32(n)
	if c.raw != nil {
		c.win.push(msg[headerLen+tpl:], n, len(msg))
	}
	if c.raw != nil && !c.connected.Load() {
		c.connected.Store(true)
	}
	return nil
}

// fail records a failed write of which partial bytes went out. Over TCP the
// connection is dropped; its unacknowledged messages wait for the next one.
func (c *Client) fail(err error, partial int) error {
	if c.connected.Swap(false) {
		c.log.Warn("collector unreachable", "err", err)
	}
	if c.raw != nil {
		c.win.written += uint64(partial)
		_ = c.win.poll(c.raw) // learn the last acknowledgement; the error is known
		c.closeTCP()
	}
	return err
}

// ensureConn opens the socket if there is none. For TCP it first drops a
// connection the collector has closed or reset, and after connecting it
// sends the templates and the unacknowledged messages of the last one.
func (c *Client) ensureConn(ctx context.Context) error {
	if c.raw != nil {
		if err := c.win.poll(c.raw); err != nil {
			c.log.Warn("collector closed the connection", "err", err)
			c.connected.Store(false)
			c.closeTCP()
		}
	}
	if c.conn != nil {
		return nil
	}
	d := net.Dialer{Timeout: c.opts.DialTimeout}
	conn, err := d.DialContext(ctx, c.target.Network, c.target.Address)
	if err != nil {
		if isUnreachable(err) {
			c.unreachable.Add(1)
		}
		return fmt.Errorf("ipfix %s: dial: %w", c.target, err)
	}
	c.setConn(conn)
	if c.target.Network == "udp" {
		c.udpRaw, err = conn.(*net.UDPConn).SyscallConn()
		if err != nil {
			_ = conn.Close()
			c.setConn(nil)
			return fmt.Errorf("ipfix %s: %w", c.target, err)
		}
		return nil
	}
	c.raw, err = conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		c.closeTCP()
		return fmt.Errorf("ipfix %s: %w", c.target, err)
	}
	// A new transport session: sequence numbers restart (RFC 7011 §3.1)
	// and the templates precede everything else.
	c.seq = 0
	if err := c.writeTemplates(ctx, c.opts.Now()); err != nil {
		return err
	}
	records := 0
	for len(c.win.pending) > 0 {
		m := c.win.pending[0]
		msg := c.enc.reframe(m.body, exportTime(c.opts.Now()), c.seq)
		if err := c.write(ctx, msg, m.records, 0); err != nil {
			return err
		}
		c.win.pending = c.win.pending[1:]
		records += m.records
	}
	c.win.pending = nil
	c.log.Info("connected", "resent_records", records)
	return nil
}

// closeTCP closes the connection; its unacknowledged messages become
// pending for the next one.
func (c *Client) closeTCP() {
	if c.conn != nil {
		_ = c.conn.Close()
	}
	if c.raw != nil {
		c.win.closeConn()
	}
	c.setConn(nil)
	c.raw = nil
}

// setConn sets the connection Send writes to, and its context may abort.
func (c *Client) setConn(conn net.Conn) {
	c.abortMu.Lock()
	c.conn, c.abortConn = conn, conn
	c.abortMu.Unlock()
}

// Close implements delivery.Client. Over TCP it waits up to closeAckWait
// for the collector to acknowledge what was written; records it has not
// acknowledged by then, and those still waiting for a reconnect, are lost:
// Abandoned reports them, and the queue counts them as dropped.
func (c *Client) Close() error {
	c.connected.Store(false)
	if c.raw != nil {
		// The kernel sends what is queued after close too, but only
		// an acknowledgement says the collector's host has it.
		deadline := time.Now().Add(closeAckWait)
		for {
			if err := c.win.poll(c.raw); err != nil {
				c.win.closeConn() // the collector went away: all pending
				break
			}
			if len(c.win.msgs[c.win.head:]) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n := c.win.records(); n > 0 {
		c.abandoned = uint64(n)
		c.log.Warn("closing with records the collector has not acknowledged: they are lost",
			"records", n, "waited", closeAckWait)
	}
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.setConn(nil)
	c.raw, c.udpRaw = nil, nil
	if err != nil {
		return fmt.Errorf("ipfix %s: close: %w", c.target, err)
	}
	return nil
}

// Abandoned implements delivery.Abandoner: the records Close gave up on.
func (c *Client) Abandoned() uint64 { return c.abandoned }

// closeAckWait bounds how long Close waits for the collector to acknowledge
// what was written.
const closeAckWait = time.Second

// exportTime is the header's Export Time, seconds since the epoch.
func exportTime(t time.Time) uint32 { return uint32(t.Unix()) }
