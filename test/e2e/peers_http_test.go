package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// The HTTP peers of the capture tests: nginx with the thesis's
// configuration (its section 4.2.2: /foo answers 200, /bar 500), a raw
// HTTP/1.1 client that controls keep-alive and pipelining, and tcpdump as
// the reference capture.

// startNginx runs nginx in ns, listening on port 80 of addrs, until the
// test ends. /big serves a file of bigSize bytes (a response GSO carries in
// super-packets).
func startNginx(t *testing.T, ns *testutil.NS, addrs ...netip.Addr) {
	t.Helper()
	bin := testutil.RequirePeer(t, "nginx")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "www"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "www", "big"), bytes.Repeat([]byte("0123456789abcdef"), bigSize/16), 0o644); err != nil {
		t.Fatal(err)
	}
	var listen strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&listen, "listen %s;\n", netip.AddrPortFrom(a, 80))
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	keepalive_requests 10000;
	server {
		%[2]s
		location /foo { return 200 'foofoofoofoofoofoo'; }
		location /bar { return 500 'bar'; }
		location /big { root %[1]s/www; }
	}
}
`, dir, listen.String())
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", confPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range addrs {
		for {
			var c net.Conn
			err := ns.Do(func() (err error) {
				c, err = net.DialTimeout("tcp", netip.AddrPortFrom(a, 80).String(), time.Second)
				return err
			})
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
				t.Fatalf("nginx does not answer on %s: %v\n%s%s", a, err, out.String(), errLog)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

const bigSize = 256 << 10

// httpConn is a keep-alive HTTP/1.1 connection from a client namespace.
type httpConn struct {
	t    *testing.T
	c    net.Conn
	r    *bufio.Reader
	port uint16 // the client's port
	// statuses are the codes of every response read, in order.
	statuses []int
}

func dialHTTP(t *testing.T, ns *testutil.NS, to netip.Addr) *httpConn {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(to, 80).String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("dial %s: %v", to, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &httpConn{t: t, c: c, r: bufio.NewReader(c), port: uint16(c.LocalAddr().(*net.TCPAddr).Port)}
}

// send writes the requests for paths in one write (pipelined when there
// are several), then reads as many responses.
func (h *httpConn) send(paths ...string) {
	h.t.Helper()
	var b bytes.Buffer
	for _, p := range paths {
		fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: loupe.test\r\nUser-Agent: loupe-e2e\r\n\r\n", p)
	}
	if _, err := h.c.Write(b.Bytes()); err != nil {
		h.t.Fatalf("write requests: %v", err)
	}
	for range paths {
		resp, err := http.ReadResponse(h.r, nil)
		if err != nil {
			h.t.Fatalf("read response on port %d: %v", h.port, err)
		}
		var body bytes.Buffer
		if _, err := body.ReadFrom(resp.Body); err != nil {
			h.t.Fatalf("read body: %v", err)
		}
		resp.Body.Close()
		h.statuses = append(h.statuses, resp.StatusCode)
	}
}

func (h *httpConn) failed() bool {
	for _, s := range h.statuses {
		if s >= 500 {
			return true
		}
	}
	return false
}

func (h *httpConn) close() { h.c.Close() }

// tcpdump captures on ifname in ns into a pcap file until stopped.
type tcpdump struct {
	cmd  *exec.Cmd
	file string
	done chan struct{}
	out  *testutil.Buffer
}

func startTcpdump(t *testing.T, ns *testutil.NS, ifname, filter string) *tcpdump {
	t.Helper()
	bin := testutil.RequirePeer(t, "tcpdump")
	d := &tcpdump{file: filepath.Join(t.TempDir(), ifname+".pcap"), done: make(chan struct{}), out: &testutil.Buffer{}}
	// --immediate-mode: without it libpcap hands packets over a block
	// at a time, after up to a second, and a stop loses the last block.
	d.cmd = ns.Command(bin, "-i", ifname, "-n", "--immediate-mode", "-U", "-s", "0", "-w", d.file, filter)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start tcpdump: %v", err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop(t) })
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.out.String(), "listening on") {
		if time.Now().After(deadline) {
			t.Fatalf("tcpdump on %s did not start: %s", ifname, d.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return d
}

// stop ends the capture (SIGINT to its process group) and waits for the
// file to be complete.
func (d *tcpdump) stop(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
		t.Errorf("tcpdump did not stop on SIGINT: %s", d.out.String())
	}
}

// dropped is what a stopped tcpdump said it lost: the packets its
// statistics count as dropped by the kernel or by the interface.
func (d *tcpdump) dropped() uint64 {
	var total uint64
	for _, l := range strings.Split(d.out.String(), "\n") {
		var n uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "%d packets dropped by", &n); err == nil {
			total += n
		}
	}
	return total
}

// pkt is a TCP packet as tshark reads it from a capture file.
type pkt struct {
	srcPort, dstPort uint16
	seq, ack         uint64
	flags            string
	len              int
	comment          string
	payload          []byte
}

// key identifies the same packet in two captures.
func (p pkt) key() string {
	return fmt.Sprintf("%d>%d seq=%d ack=%d flags=%s len=%d", p.srcPort, p.dstPort, p.seq, p.ack, p.flags, p.len)
}

// clientPort is the port of the side that is not the server (port 80).
func (p pkt) clientPort() uint16 {
	if p.srcPort == 80 {
		return p.dstPort
	}
	return p.srcPort
}

// readPackets reads the TCP packets of a pcap or pcapng file with tshark,
// failing on anything tshark complains about.
func readPackets(t *testing.T, file string) []pkt {
	t.Helper()
	bin := testutil.RequirePeer(t, "tshark")
	// Without the HTTP dissector tcp.payload holds every segment's bytes.
	cmd := exec.Command(bin, "-r", file, "-n", "--disable-protocol", "http", "-Y", "tcp", "-T", "fields", "-E", "separator=|",
		"-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "tcp.seq_raw", "-e", "tcp.ack_raw", "-e", "tcp.flags",
		"-e", "tcp.len", "-e", "frame.comment", "-e", "tcp.payload")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v: %s", file, err, stderr.String())
	}
	if msg := tsharkComplaints(stderr.String()); msg != "" {
		t.Errorf("tshark -r %s complained: %s", file, msg)
	}
	var pkts []pkt
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 8 {
			t.Fatalf("tshark line %q: %d fields", line, len(f))
		}
		num := func(s string) uint64 {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("tshark field %q in %q: %v", s, line, err)
			}
			return n
		}
		p := pkt{srcPort: uint16(num(f[0])), dstPort: uint16(num(f[1])), seq: num(f[2]), ack: num(f[3]), flags: f[4],
			len: int(num(f[5])), comment: f[6]}
		if f[7] != "" {
			p.payload = make([]byte, len(f[7])/2)
			fmt.Sscanf(f[7], "%x", &p.payload)
		}
		pkts = append(pkts, p)
	}
	return pkts
}

// tsharkComplaints returns what tshark printed on stderr but the warning
// it always prints when run as root.
func tsharkComplaints(stderr string) string {
	var keep []string
	for _, l := range strings.Split(stderr, "\n") {
		if l == "" || strings.Contains(l, "Running as user \"root\"") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

// runTshark runs tshark with args and returns its output, failing on an
// error or a complaint.
func runTshark(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(testutil.RequirePeer(t, "tshark"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	if msg := tsharkComplaints(stderr.String()); msg != "" {
		t.Errorf("tshark %s complained: %s", strings.Join(args, " "), msg)
	}
	return string(out)
}

func parsePort(t *testing.T, s string) uint16 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		t.Fatalf("port %q: %v", s, err)
	}
	return uint16(n)
}

// get makes one request on a connection of its own and closes it; the
// connection keeps its port and status.
func get(t *testing.T, ns *testutil.NS, to netip.Addr, path string) *httpConn {
	t.Helper()
	h := dialHTTP(t, ns, to)
	h.send(path)
	h.close()
	return h
}

// serveTCP accepts connections in ns on addr and runs handle on each, one
// at a time (the connection is closed when it returns), until the test
// ends.
func serveTCP(t *testing.T, ns *testutil.NS, addr netip.AddrPort, handle func(c *net.TCPConn)) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr.String())
		return err
	}); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(20 * time.Second))
			handle(c.(*net.TCPConn))
			c.Close()
		}
	}()
}

// readCaptureDir reads the packets of every pcapng file in dir.
func readCaptureDir(t *testing.T, dir string) []pkt {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.pcapng"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pcapng file in %s (%v)", dir, err)
	}
	var out []pkt
	for _, f := range files {
		out = append(out, readPackets(t, f)...)
	}
	return out
}

// captureEvent is one of the capture datapath's counters in a scrape.
func captureEvent(m map[string]float64, event string) float64 {
	return m[`loupe_capture_datapath_events_total{event="`+event+`"}`]
}
