// Package nfacctd runs pmacct's IPFIX collector, nfacctd, for tests: one
// daemon on a UDP port, optionally inside a network namespace, whose print
// plugin writes one JSON object per flow to a file the test reads.
//
// The traps of pmacct 1.7 this package handles (see /work/shared/PEERS.md
// and docs/exporters/ipfix.md):
//
//   - pmacct daemons ignore SIGTERM: Stop sends SIGINT, and the daemon and
//     the plugins it forks run in their own process group, so that a test
//     that fails midway kills them all.
//   - SIGINT drops what is still on its way to the print plugin: Stop
//     first waits for two more purges of the plugin's cache.
//   - The default UDP receive buffer lost 40 % of a burst: nfacctd_pipe_size
//     raises it (up to net.core.rmem_max) and plugin_pipe_size the queue
//     between the core process and the print plugin.
//   - The print plugin aggregates: objects with the same values of every
//     aggregate primitive, purged in the same print_refresh_time interval,
//     are printed as one object with the packets and bytes summed. The
//     default Aggregate lists every primitive an IPFIX flow record of Loupe
//     fills, timestamps included, so records rarely merge; a test that must
//     be exact sums both sides by those primitives (see Key).
//   - nfacctd accounts IP flows only: records of other EtherTypes are
//     received and dropped.
//   - nfacctd 1.7.7 prints tcp_flags 0 for the 2-byte tcpControlBits, and
//     reads neither DSCP (195) nor ICMP type and code: LoupePrimitives
//     defines custom primitives that print those elements as sent.
package nfacctd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
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

// DefaultAggregate is every primitive a Loupe IPFIX record fills, in the
// print plugin's JSON as ip_src, ip_dst, port_src, port_dst, ip_proto,
// tcp_flags, tos, iface_in, iface_out, mac_src, mac_dst, etype,
// timestamp_start, timestamp_end, sampling_rate, sampling_direction, plus
// packets and bytes.
var DefaultAggregate = []string{
	"src_host", "dst_host", "src_port", "dst_port", "proto", "tcpflags", "tos",
	"in_iface", "out_iface", "src_mac", "dst_mac", "etype",
	"timestamp_start", "timestamp_end", "sampling_rate", "sampling_direction",
}

// readyTimeout bounds the start; stopTimeout the exit after SIGINT.
const (
	readyTimeout = 10 * time.Second
	stopTimeout  = 20 * time.Second
)

// Options configure a collector. The zero value listens on a free port of
// 127.0.0.1 in the test's own network namespace.
type Options struct {
	// Listen is the UDP address, host:port ("127.0.0.1:0", "[::1]:0"). Port
	// 0 picks a free port (in NS when it is set).
	Listen string
	// NS, when set, runs nfacctd inside this network namespace.
	NS *testutil.NS
	// Aggregate replaces DefaultAggregate.
	Aggregate []string
	// Primitives defines custom primitives (aggregate_primitives), which
	// Aggregate may then name.
	Primitives []Primitive
}

// Primitive is a custom primitive: nfacctd prints IPFIX element
// FieldType (of enterprise PEN, if not 0), Len bytes long, under Name.
type Primitive struct {
	Name      string
	PEN       uint32
	FieldType uint16
	Len       int
	Semantics string // u_int, hex, ip, mac, str or raw
}

// LoupePrimitives are the elements of Loupe's IPFIX records that nfacctd
// 1.7.7 reads differently or not at all, as custom primitives:
// tcpControlBits (6) as Loupe sends it (2 bytes, RFC 7125; nfacctd's own
// tcp_flags reads 1 byte and prints 0), ipDiffServCodePoint (195, which
// nfacctd's tos ignores), icmpTypeCodeIPv4 (32) and icmpTypeCodeIPv6 (139)
// (nfacctd prints no ICMP type), flowDirection (61) and loupeSamplingRate
// (PEN 32473, element 1). Add their names to Aggregate to print them.
var LoupePrimitives = []Primitive{
	{Name: "tcp_bits", FieldType: 6, Len: 2, Semantics: "u_int"},
	{Name: "dscp", FieldType: 195, Len: 1, Semantics: "u_int"},
	{Name: "icmp_type_code4", FieldType: 32, Len: 2, Semantics: "u_int"},
	{Name: "icmp_type_code6", FieldType: 139, Len: 2, Semantics: "u_int"},
	{Name: "flow_direction", FieldType: 61, Len: 1, Semantics: "u_int"},
	{Name: "loupe_sampling_rate", PEN: 32473, FieldType: 1, Len: 4, Semantics: "u_int"},
}

// LoupeAggregate is DefaultAggregate plus LoupePrimitives: with
// Primitives: LoupePrimitives, nfacctd prints every element of Loupe's IP
// records.
var LoupeAggregate = append(append([]string(nil), DefaultAggregate...),
	"tcp_bits", "dscp", "icmp_type_code4", "icmp_type_code6", "flow_direction", "loupe_sampling_rate")

// Collector is a running nfacctd.
type Collector struct {
	t    testing.TB
	cmd  *exec.Cmd
	out  string // the print plugin's JSON lines
	log  string // nfacctd's log file
	addr netip.AddrPort
	done chan struct{} // closed once cmd has exited
	err  error         // cmd.Wait's result, set before done is closed
}

// Start starts nfacctd and returns once it listens and its print plugin
// runs. t.Cleanup kills it (the whole process group) if Stop was not
// called. It skips the test if nfacctd is not installed (or fails it under
// CI_REQUIRE_PRIVILEGED=1).
func Start(t testing.TB, o Options) *Collector {
	t.Helper()
	bin := testutil.RequirePeer(t, "nfacctd")
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Aggregate == nil {
		o.Aggregate = DefaultAggregate
	}
	addr, err := netip.ParseAddrPort(o.Listen)
	if err != nil {
		t.Fatalf("nfacctd listen address %q: %v", o.Listen, err)
	}
	if addr.Port() == 0 {
		addr = freePort(t, o.NS, addr)
	}
	dir := t.TempDir()
	c := &Collector{
		t:    t,
		out:  filepath.Join(dir, "flows.json"),
		log:  filepath.Join(dir, "nfacctd.log"),
		addr: addr,
		done: make(chan struct{}),
	}
	// nfacctd_disable_checks false: gaps in the IPFIX sequence numbers
	// (datagrams lost) are logged, which Lost reports.
	conf := fmt.Sprintf(`daemonize: false
nfacctd_ip: %s
nfacctd_port: %d
nfacctd_pipe_size: 8388608
nfacctd_disable_checks: false
plugin_pipe_size: 67108864
logfile: %s
timestamps_utc: true
timestamps_since_epoch: true
plugins: print[p]
aggregate[p]: %s
print_output[p]: json
print_output_file[p]: %s
print_output_file_append[p]: true
print_refresh_time[p]: 1
print_num_protos[p]: true
`, addr.Addr().Unmap(), addr.Port(), c.log, strings.Join(o.Aggregate, ", "), c.out)
	if len(o.Primitives) > 0 {
		var b strings.Builder
		for _, p := range o.Primitives {
			ft := strconv.Itoa(int(p.FieldType))
			if p.PEN != 0 {
				ft = fmt.Sprintf("%d:%d", p.PEN, p.FieldType)
			}
			fmt.Fprintf(&b, "name=%s\tfield_type=%s\tlen=%d\tsemantics=%s\n", p.Name, ft, p.Len, p.Semantics)
		}
		pf := filepath.Join(dir, "primitives.lst")
		if err := os.WriteFile(pf, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		conf += "aggregate_primitives: " + pf + "\n"
	}
	cf := filepath.Join(dir, "nfacctd.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if o.NS != nil {
		// ip netns exec execs nfacctd itself: the pid is nfacctd's.
		c.cmd = o.NS.Command(bin, "-f", cf)
	} else {
		c.cmd = exec.Command(bin, "-f", cf)
	}
	// nfacctd forks its plugins: a process group lets a failed test stop
	// them all.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	c.cmd.Stdout, c.cmd.Stderr = &stderr, &stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start nfacctd: %v", err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	})
	deadline := time.Now().Add(readyTimeout)
	for {
		logs := c.Log()
		if strings.Contains(logs, "waiting for NetFlow/IPFIX data") && strings.Contains(logs, "JSON: setting object handlers") {
			break
		}
		select {
		case <-c.done:
			t.Fatalf("nfacctd exited (%v) before it was ready:\n%s\n%s", c.err, stderr.String(), logs)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nfacctd not ready within %v:\n%s", readyTimeout, logs)
		}
	}
	return c
}

// freePort finds a free UDP port on addr's host, inside ns if set.
func freePort(t testing.TB, ns *testutil.NS, addr netip.AddrPort) netip.AddrPort {
	t.Helper()
	var port uint16
	probe := func() error {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return err
		}
		port = uint16(c.LocalAddr().(*net.UDPAddr).Port)
		return c.Close()
	}
	var err error
	if ns != nil {
		err = ns.Do(probe)
	} else {
		err = probe()
	}
	if err != nil {
		t.Fatalf("find a free UDP port on %s: %v", addr.Addr(), err)
	}
	return netip.AddrPortFrom(addr.Addr(), port)
}

// Addr is the address nfacctd listens on.
func (c *Collector) Addr() netip.AddrPort { return c.addr }

// Port is the UDP port nfacctd listens on.
func (c *Collector) Port() int { return int(c.addr.Port()) }

// Target is the --export target that sends to this collector.
func (c *Collector) Target() string { return "ipfix+udp://" + c.addr.String() }

// Log returns what nfacctd logged so far.
func (c *Collector) Log() string {
	b, _ := os.ReadFile(c.log)
	return string(b)
}

// Read returns the flow objects the print plugin has written so far; a
// line still being written is left out. Numbers are json.Number: 64-bit
// counters do not survive float64.
func (c *Collector) Read() ([]Flow, error) {
	f, err := os.Open(c.out)
	if os.IsNotExist(err) {
		return nil, nil // nothing purged yet
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Flow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m Flow
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			return out, nil // a line being written: the last one
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// WaitFor polls what the print plugin wrote (it purges every second) until
// done returns true or timeout passes, and returns the last read; it does
// not fail the test on timeout: the caller compares what it got.
func (c *Collector) WaitFor(t testing.TB, timeout time.Duration, done func([]Flow) bool) []Flow {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := c.Read()
		if err != nil {
			t.Fatalf("read nfacctd output: %v", err)
		}
		if done(got) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop waits until everything nfacctd received before the call has been
// printed, then sends SIGINT (pmacct ignores SIGTERM), waits for nfacctd
// to exit and returns every flow object printed. It fails the test if
// nfacctd does not exit in time.
//
// SIGINT alone is not enough: nfacctd 1.7.7 exits without accounting what
// is still on its way from the socket through the core to the print
// plugin (records sent a few milliseconds before SIGINT were missing in
// most runs), and only the plugin's cache is purged on the way out. So
// Stop first waits for two more purges (print_refresh_time is 1 s): the
// second began at least a second after the call, when every datagram
// already queued had long reached the plugin's cache.
func (c *Collector) Stop(t testing.TB) []Flow {
	t.Helper()
	select {
	case <-c.done:
		t.Fatalf("nfacctd had already exited (%v):\n%s", c.err, c.Log())
	default:
	}
	purges := func() int { return strings.Count(c.Log(), "Purging cache - END") }
	want := purges() + 2
	deadline := time.Now().Add(stopTimeout)
	for purges() < want {
		if time.Now().After(deadline) {
			t.Fatalf("nfacctd's print plugin did not purge twice within %v:\n%s", stopTimeout, c.Log())
		}
		select {
		case <-c.done:
			t.Fatalf("nfacctd exited (%v) before Stop:\n%s", c.err, c.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("signal nfacctd: %v", err)
	}
	select {
	case <-c.done:
	case <-time.After(stopTimeout):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
		t.Fatalf("nfacctd did not exit within %v of SIGINT:\n%s", stopTimeout, c.Log())
	}
	// The print plugin is a child of its own: wait (bounded) for the
	// group to be gone so that its last purge has been written.
	deadline = time.Now().Add(stopTimeout)
	for syscall.Kill(-c.cmd.Process.Pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("nfacctd's plugins did not exit within %v of SIGINT:\n%s", stopTimeout, c.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := c.Read()
	if err != nil {
		t.Fatalf("read nfacctd output: %v", err)
	}
	return got
}

// WaitCount waits (at most 30 s) until the print plugin has written want
// objects, then stops nfacctd and returns everything it printed.
func (c *Collector) WaitCount(t testing.TB, want int) []Flow {
	t.Helper()
	c.WaitFor(t, 30*time.Second, func(got []Flow) bool { return len(got) >= want })
	got := c.Stop(t)
	if len(got) < want {
		t.Logf("nfacctd printed %d of %d objects; its log:\n%s", len(got), want, c.Log())
	}
	return got
}

// Lost returns nfacctd's log lines about IPFIX sequence gaps (datagrams
// lost on the way or in the socket buffer); none when nothing was lost.
func (c *Collector) Lost() []string {
	var out []string
	for _, line := range strings.Split(c.Log(), "\n") {
		if strings.Contains(line, "expecting flow") || strings.Contains(strings.ToLower(line), "missing data") {
			out = append(out, line)
		}
	}
	return out
}

// Flow is one object of the print plugin's JSON output.
type Flow map[string]any

// Field returns field k as text ("" if absent): numbers as printed.
func (f Flow) Field(k string) string {
	v, ok := f[k]
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

// Uint returns the unsigned integer field k; ok is false if it is absent
// or not an unsigned integer.
func (f Flow) Uint(k string) (uint64, bool) {
	n, ok := f[k].(json.Number)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(n.String(), 10, 64)
	return v, err == nil
}

// Key returns the values of the given fields joined: the identity by which
// the print plugin sums objects when the fields are its aggregate.
func (f Flow) Key(fields ...string) string {
	var b strings.Builder
	for i, k := range fields {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(f.Field(k))
	}
	return b.String()
}
