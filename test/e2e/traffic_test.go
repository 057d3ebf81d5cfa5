package e2e

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// pair is two namespaces joined by a veth pair: the agent watches A.
type pair struct {
	a, b         *testutil.NS
	vethA, vethB string
	a4, b4       netip.Addr
	a6, b6       netip.Addr
}

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{
		a: testutil.NewNS(t), b: testutil.NewNS(t),
		vethA: testutil.UniqueName("lpa"), vethB: testutil.UniqueName("lpb"),
		a4: netip.MustParseAddr("10.77.0.1"), b4: netip.MustParseAddr("10.77.0.2"),
		a6: netip.MustParseAddr("fd77::1"), b6: netip.MustParseAddr("fd77::2"),
	}
	testutil.Veth(t, p.a, p.vethA, p.b, p.vethB)
	return p
}

// up addresses both ends and brings the link up.
func (p *pair) up(t *testing.T) {
	t.Helper()
	for _, s := range []struct {
		ns       *testutil.NS
		dev      string
		ip4, ip6 netip.Addr
	}{{p.a, p.vethA, p.a4, p.a6}, {p.b, p.vethB, p.b4, p.b6}} {
		s.ns.IP(t, "addr", "add", s.ip4.String()+"/24", "dev", s.dev)
		s.ns.IP(t, "addr", "add", s.ip6.String()+"/64", "dev", s.dev, "nodad")
		s.ns.IP(t, "link", "set", s.dev, "up")
	}
	// Wait for the link to carry traffic (IPv6 needs the carrier).
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := p.a.Command("ping", "-c", "1", "-W", "1", p.b6.String()).CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("link never came up: %s", out)
		}
	}
}

// down stops all traffic on the pair, so that the interface counters stop
// moving before they are compared with the agent's records.
// quiet makes each end's neighbour entry for the other permanent, so that
// no ARP request or neighbour solicitation crosses the link on its own
// while a test counts. One sent as the link goes down is the one that
// matters: the hook sees it leave, and the interface, closing, never
// sends it, so the flows hold one frame more than the interface's
// counters.
func (p *pair) quiet(t *testing.T) {
	t.Helper()
	macA, macB := p.a.MAC(t, p.vethA), p.b.MAC(t, p.vethB)
	for _, n := range []struct {
		ns       *testutil.NS
		dev, mac string
		peer     []netip.Addr
	}{{p.a, p.vethA, macB, []netip.Addr{p.b4, p.b6}}, {p.b, p.vethB, macA, []netip.Addr{p.a4, p.a6}}} {
		for _, ip := range n.peer {
			n.ns.IP(t, "neigh", "replace", ip.String(), "lladdr", n.mac, "dev", n.dev, "nud", "permanent")
		}
	}
}

func (p *pair) down(t *testing.T) {
	t.Helper()
	p.a.IP(t, "link", "set", p.vethA, "down")
	p.b.IP(t, "link", "set", p.vethB, "down")
}

// tcpServer accepts connections in ns on addr: each reads to EOF, replies
// reply bytes and closes. It stops when the test ends.
func tcpServer(t *testing.T, ns *testutil.NS, addr netip.AddrPort, reply int) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr.String())
		return err
	}); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				if _, err := io.Copy(io.Discard, c); err != nil {
					return
				}
				c.Write(make([]byte, reply))
			}()
		}
	}()
}

// tcpExchange connects from ns, sends n bytes, half-closes, reads the reply
// to EOF, and returns the local port.
func tcpExchange(t *testing.T, ns *testutil.NS, to netip.AddrPort, n, reply int) uint16 {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", to.String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("dial %s: %v", to, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.Copy(io.Discard, c)
	if err != nil || got != int64(reply) {
		t.Fatalf("read reply: %d bytes, %v; want %d", got, err, reply)
	}
	return uint16(c.LocalAddr().(*net.TCPAddr).Port)
}

// udpSink counts datagrams received in ns on addr.
type udpSink struct {
	conn     net.PacketConn
	mu       sync.Mutex
	received int
}

func newUDPSink(t *testing.T, ns *testutil.NS, addr netip.AddrPort) *udpSink {
	t.Helper()
	s := &udpSink{}
	if err := ns.Do(func() (err error) {
		s.conn, err = net.ListenPacket("udp", addr.String())
		return err
	}); err != nil {
		t.Fatalf("listen udp %s: %v", addr, err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { s.conn.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			if _, _, err := s.conn.ReadFrom(buf); err != nil {
				return
			}
			s.mu.Lock()
			s.received++
			s.mu.Unlock()
		}
	}()
	return s
}

// waitFor waits until the sink has n datagrams.
func (s *udpSink) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		got := s.received
		s.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("udp sink got fewer than %d datagrams", n)
}

// settle waits until the sink has received nothing new for 100 ms and
// returns the count. A burst may overflow the receiving socket's buffer:
// the sender's interface still carried every datagram, which is what the
// agent counts.
func (s *udpSink) settle() int {
	last := -1
	for range 100 {
		s.mu.Lock()
		got := s.received
		s.mu.Unlock()
		if got == last {
			return got
		}
		last = got
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// udpSender is a connected UDP socket opened in ns.
func udpSender(t *testing.T, ns *testutil.NS, to netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.Dial("udp", to.String())
		return err
	}); err != nil {
		t.Fatalf("dial udp %s: %v", to, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UDPConn)
}

// ping sends count echo requests of size payload bytes from ns.
func ping(t *testing.T, ns *testutil.NS, to netip.Addr, count, size int) {
	t.Helper()
	out, err := ns.Command("ping", "-q", "-c", strconv.Itoa(count), "-i", "0.05", "-s", strconv.Itoa(size), "-W", "2", to.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ping %s: %v: %s", to, err, out)
	}
}

func hostPort(a netip.Addr, port int) netip.AddrPort { return netip.AddrPortFrom(a, uint16(port)) }

func ipv4Overhead(payload int) uint64 { return uint64(14 + 20 + 8 + payload) }
func ipv6Overhead(payload int) uint64 { return uint64(14 + 40 + 8 + payload) }

func describe(a netip.Addr, port uint16) string { return fmt.Sprintf("%s:%d", a, port) }
