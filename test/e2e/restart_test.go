package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// steady is traffic that runs while agents are killed and restarted: paced
// UDP both ways and back-to-back TCP exchanges, until stop or a bound.
type steady struct {
	stop         chan struct{}
	wg           sync.WaitGroup
	udp, tcp     atomic.Int64
	mu           sync.Mutex
	errs         []error
	tcpExchanges atomic.Int64
}

const (
	steadyMaxDatagrams = 40000
	steadyMaxTime      = 60 * time.Second
)

func startSteady(t *testing.T, p *pair) *steady {
	t.Helper()
	s := &steady{stop: make(chan struct{})}
	newUDPSink(t, p.b, hostPort(p.b4, 7001))
	newUDPSink(t, p.a, hostPort(p.a4, 7002))
	tcpServer(t, p.b, hostPort(p.b4, 7003), 96<<10)
	out := udpSender(t, p.a, hostPort(p.b4, 7001))
	back := udpSender(t, p.b, hostPort(p.a4, 7002))
	deadline := time.Now().Add(steadyMaxTime)
	s.wg.Add(2)
	go func() { // ~1000 datagrams/s each way, sizes varied
		defer s.wg.Done()
		buf := make([]byte, 1400)
		for i := 0; i < steadyMaxDatagrams && time.Now().Before(deadline); i++ {
			select {
			case <-s.stop:
				return
			default:
			}
			c := out
			if i%2 == 1 {
				c = back
			}
			if _, err := c.Write(buf[:1+(i*131)%1300]); err != nil {
				s.fail(fmt.Errorf("udp: %w", err))
				return
			}
			s.udp.Add(1)
			time.Sleep(500 * time.Microsecond)
		}
	}()
	go func() {
		defer s.wg.Done()
		for time.Now().Before(deadline) {
			select {
			case <-s.stop:
				return
			default:
			}
			if err := tcpOnce(p, hostPort(p.b4, 7003).String(), 200<<10, 96<<10); err != nil {
				s.fail(err)
				return
			}
			s.tcpExchanges.Add(1)
			time.Sleep(10 * time.Millisecond) // paced: the machine is shared
		}
	}()
	t.Cleanup(s.end)
	return s
}

func (s *steady) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

// end stops the traffic and waits for it.
func (s *steady) end() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

func (s *steady) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// tcpOnce is tcpExchange for a goroutine: errors are returned.
func tcpOnce(p *pair, to string, n, reply int) error {
	var c net.Conn
	if err := p.a.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", to, 5*time.Second)
		return err
	}); err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(make([]byte, n)); err != nil {
		return fmt.Errorf("tcp write: %w", err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	got, err := io.Copy(io.Discard, c)
	if err != nil || got != int64(reply) {
		return fmt.Errorf("tcp reply: %d bytes, %v", got, err)
	}
	return nil
}

// restartRun is one run of an agent killed and restarted under traffic.
type restartRun struct {
	p    *pair
	pins string
	a    *agent
	opts agentOpts
}

// killAndRestart SIGKILLs the agent after run, leaves no agent running for
// gap (the pinned programs keep counting), and starts the next one with
// args.
func (r *restartRun) killAndRestart(t *testing.T, run, gap time.Duration, args []string) {
	t.Helper()
	time.Sleep(run)
	r.a.kill()
	time.Sleep(gap)
	o := r.opts
	o.args, o.dir = args, r.a.dir
	r.a = startAgent(t, r.p.a, o)
}

// finish stops the traffic and the link, stops the agent cleanly, and
// checks that the store's records equal the interface's counters per
// direction, that the JSON export has at least as much (at-least-once
// across a crash), and that nothing is left pinned or attached.
func (r *restartRun) finish(t *testing.T, s *steady, mode string) {
	t.Helper()
	s.end()
	if err := s.err(); err != nil {
		t.Fatalf("traffic: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // the last replies
	r.p.down(t)
	kernel := r.p.a.Stats(t, r.p.vethA)
	r.a.stop()

	got := sumByDirection(r.a.stored(), r.p.vethA)
	in, out := got[flow.Ingress], got[flow.Egress]
	t.Logf("%d datagrams, %d TCP exchanges; interface rx %d packets %d bytes, tx %d packets %d bytes; store rx %d/%d tx %d/%d",
		s.udp.Load(), s.tcpExchanges.Load(), kernel.RxPackets, kernel.RxBytes, kernel.TxPackets, kernel.TxBytes,
		in.packets, in.bytes, out.packets, out.bytes)
	if in.packets != kernel.RxPackets || in.bytes != kernel.RxBytes {
		t.Errorf("ingress: store %d packets %d bytes, interface %d and %d (%+d packets)",
			in.packets, in.bytes, kernel.RxPackets, kernel.RxBytes, int64(in.packets)-int64(kernel.RxPackets))
	}
	if out.packets != kernel.TxPackets || out.bytes != kernel.TxBytes {
		t.Errorf("egress: store %d packets %d bytes, interface %d and %d (%+d packets)",
			out.packets, out.bytes, kernel.TxPackets, kernel.TxBytes, int64(out.packets)-int64(kernel.TxPackets))
	}
	if s.udp.Load() < 1000 || s.tcpExchanges.Load() < 5 {
		t.Errorf("too little traffic crossed the restarts to prove anything")
	}
	exported := sumByDirection(r.a.exported(), r.p.vethA)
	if exported[flow.Ingress].packets < kernel.RxPackets || exported[flow.Egress].packets < kernel.TxPackets {
		t.Errorf("JSON export lost packets: %+v, interface rx %d tx %d", exported, kernel.RxPackets, kernel.TxPackets)
	}
	checkNothingLeft(t, r.p, r.pins, mode)
}

// checkNothingLeft: after a clean stop, no pin, and none of our programs
// on the interface.
func checkNothingLeft(t *testing.T, p *pair, pins, mode string) {
	t.Helper()
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		var left []string
		filepath.Walk(pins, func(path string, _ os.FileInfo, _ error) error { left = append(left, path); return nil })
		t.Errorf("pins left after a clean stop: %v", left)
	}
	ifindex := ifindexIn(t, p.a, p.vethA)
	for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
		if err := p.a.Do(func() error {
			res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: at})
			if err != nil {
				return err
			}
			if len(res.Programs) != 0 {
				return fmt.Errorf("%d programs still attached at %v", len(res.Programs), at)
			}
			return nil
		}); err != nil {
			t.Errorf("after a clean stop: %v", err)
		}
	}
	if mode == "tc" {
		for _, dir := range []string{"ingress", "egress"} {
			if f := p.a.Run(t, "tc", "filter", "show", "dev", p.vethA, dir); strings.Contains(f, "loupe_flows") {
				t.Errorf("after a clean stop, %s filters:\n%s", dir, f)
			}
		}
	}
}

// The moments the agents are killed at and the gaps before the next one
// starts: right after start (during the first evictions, the drain of what
// the last one left), and at assorted points of the 50 ms eviction cycle.
var (
	killAfter = []time.Duration{430 * time.Millisecond, 40 * time.Millisecond, 275 * time.Millisecond,
		610 * time.Millisecond, 95 * time.Millisecond, 333 * time.Millisecond}
	killGap = []time.Duration{0, 150 * time.Millisecond, 20 * time.Millisecond, 300 * time.Millisecond,
		70 * time.Millisecond, 5 * time.Millisecond}
)

// TestRestartsLoseNothing SIGKILLs the agent six times under steady
// traffic, restarting it each time, with evictions every 50 ms so that
// kills land in the middle of them, then stops it cleanly: the store must
// hold exactly what the interface counted, per direction, and a clean stop
// must leave no pin and no program behind. Under TCX links and cls_bpf
// filters alike.
func TestRestartsLoseNothing(t *testing.T) {
	for _, mode := range []string{"tcx", "tc"} {
		t.Run(mode, func(t *testing.T) {
			p := newPair(t)
			pins := filepath.Join(testutil.Bpffs(t), "loupe")
			args := []string{"--attach-mode", mode, "--cache-active-timeout", "50ms", "--log-level", "info"}
			r := &restartRun{p: p, pins: pins, opts: agentOpts{pinDir: pins}}
			r.opts.args = args
			r.a = startAgent(t, p.a, r.opts)
			r.a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
			p.up(t)
			s := startSteady(t, p)
			for i := range killAfter {
				r.killAndRestart(t, killAfter[i], killGap[i], args)
				r.a.waitLog(5*time.Second, "adopted pinned maps")
			}
			time.Sleep(300 * time.Millisecond)
			r.finish(t, s, mode)
		})
	}
}

// TestRestartsAcrossLayoutChanges: each restart changes the flow budget or
// the table kind, so that each agent finds the pins of another layout: it
// swaps its programs in with a link update, drains the old tables through
// their BTF, and unpins them. Still exact.
func TestRestartsAcrossLayoutChanges(t *testing.T) {
	for _, mode := range []string{"tcx", "tc"} {
		t.Run(mode, func(t *testing.T) { checkRestartsAcrossLayoutChanges(t, mode) })
	}
}

func checkRestartsAcrossLayoutChanges(t *testing.T, mode string) {
	p := newPair(t)
	pins := filepath.Join(testutil.Bpffs(t), "loupe")
	base := []string{"--attach-mode", mode, "--cache-active-timeout", "50ms", "--log-level", "info"}
	layouts := [][]string{
		{"--map-type", "percpu", "--flow-budget", "4096"},
		{"--map-type", "shared", "--flow-budget", "4096"},
		{"--map-type", "shared", "--flow-budget", "8192"},
		{"--map-type", "percpu", "--flow-budget", "8192", "--ringbuf-size", "64KiB"},
		{"--map-type", "percpu", "--flow-budget", "4096"},
		{"--map-type", "shared", "--flow-budget", "2048"},
		{"--map-type", "percpu", "--flow-budget", "2048"},
	}
	r := &restartRun{p: p, pins: pins, opts: agentOpts{pinDir: pins, args: append(base, layouts[0]...)}}
	r.a = startAgent(t, p.a, r.opts)
	r.a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	p.up(t)
	s := startSteady(t, p)
	for i := range killAfter {
		r.killAndRestart(t, killAfter[i], killGap[i], append(base, layouts[i+1]...))
		r.a.waitLog(10*time.Second, "retired pin set drained and unpinned")
	}
	time.Sleep(300 * time.Millisecond)
	r.finish(t, s, mode)
}

var (
	faultBinOnce sync.Once
	faultBin     string
	faultBinErr  error
)

// faultAgent is the agent built with the loupe_faults tag: the
// TEST_FAULT_POINT environment variable then kills it at a chosen step
// (internal/flow/fault_on.go). Release builds have no fault points.
func faultAgent(t *testing.T) string {
	t.Helper()
	faultBinOnce.Do(func() {
		faultBin = loupeBin + "-faults"
		build := exec.Command(filepath.Join("..", "..", "scripts", "build.sh"), faultBin)
		build.Env = append(os.Environ(), "GOFLAGS=-tags=loupe_faults")
		out, err := build.CombinedOutput()
		if err != nil {
			faultBinErr = fmt.Errorf("build with loupe_faults: %v: %s", err, out)
		}
	})
	if faultBinErr != nil {
		t.Fatal(faultBinErr)
	}
	return faultBin
}

// TestCrashBetweenCommitAndClear kills the agent (SIGKILL, from a fault
// point) after the store committed a table's records and its epoch, before
// the table was cleared. The next agent must find that epoch in the store
// and clear the table without storing it again: the totals stay exact.
func TestCrashBetweenCommitAndClear(t *testing.T) {
	p := newPair(t)
	pins := filepath.Join(testutil.Bpffs(t), "loupe")
	args := []string{"--cache-active-timeout", "100ms", "--log-level", "info"}
	a := startAgent(t, p.a, agentOpts{pinDir: pins, args: args, bin: faultAgent(t), env: []string{"TEST_FAULT_POINT=after-commit:4"}})
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	p.up(t)
	s := startSteady(t, p)
	a.wait(30 * time.Second) // killed by its fault point
	if !a.logged("fault point after-commit reached") {
		t.Fatalf("the agent did not die at its fault point:\n%s", a.logs.String())
	}
	time.Sleep(100 * time.Millisecond)
	r := &restartRun{p: p, pins: pins, opts: agentOpts{pinDir: pins, args: args, dir: a.dir}}
	r.a = startAgent(t, p.a, r.opts)
	r.a.waitLog(5*time.Second, "already stored: clearing it without emitting it again")
	m := r.a.metrics()
	if m["loupe_restart_tables_already_stored_total"] != 1 || m["loupe_datapath_pinned"] != 1 {
		t.Errorf("metrics: already stored %v, pinned %v; want 1 and 1",
			m["loupe_restart_tables_already_stored_total"], m["loupe_datapath_pinned"])
	}
	time.Sleep(time.Second)
	r.finish(t, s, "tcx")
}

// TestUnpinnedWithoutBpffs: a pin directory outside a bpf file system (as
// on a host that never mounted one) gets a warning, once, and the agent
// runs as before pinning existed, creating nothing there.
func TestUnpinnedWithoutBpffs(t *testing.T) {
	p := newPair(t)
	pins := filepath.Join(t.TempDir(), "loupe")
	a := startAgent(t, p.a, agentOpts{pinDir: pins})
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	p.up(t)
	ping(t, p.a, p.b4, 3, 100)
	p.down(t)
	kernel := p.a.Stats(t, p.vethA)
	if v := a.metrics()["loupe_datapath_pinned"]; v != 0 {
		t.Errorf("loupe_datapath_pinned %v while running unpinned", v)
	}
	a.stop()
	if n := strings.Count(a.logs.String(), "running unpinned"); n != 1 {
		t.Fatalf("%d warnings about running unpinned, want 1:\n%s", n, a.logs.String())
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the agent created %s outside a bpf file system: %v", pins, err)
	}
	got := sumByDirection(a.stored(), p.vethA)
	if got[flow.Egress].packets != kernel.TxPackets || got[flow.Ingress].packets != kernel.RxPackets {
		t.Fatalf("unpinned: store %+v, interface rx %d tx %d", got, kernel.RxPackets, kernel.TxPackets)
	}
	checkNothingLeft(t, p, pins, "tcx")
}

// TestPinsWithCapabilitiesOnly: as nobody with CAP_BPF, CAP_NET_ADMIN and
// CAP_PERFMON only, the agent pins into a directory of its own, a second
// agent adopts the maps and links after a SIGKILL, and a clean stop
// removes them.
func TestPinsWithCapabilitiesOnly(t *testing.T) {
	p := newPair(t)
	pins := filepath.Join(testutil.Bpffs(t), "loupe")
	if err := os.Mkdir(pins, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(pins, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	o := agentOpts{caps: true, pinDir: pins, args: []string{"--cache-active-timeout", "100ms"}}
	a := startAgent(t, p.a, o)
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	if !a.logged("maps pinned") {
		t.Fatalf("not pinned:\n%s", a.logs.String())
	}
	p.up(t)
	ping(t, p.a, p.b4, 3, 100)
	a.kill()
	ping(t, p.a, p.b4, 3, 100) // counted with no agent running
	o.dir = a.dir
	a = startAgent(t, p.a, o)
	a.waitLog(5*time.Second, "adopted an earlier agent's pinned links")
	ping(t, p.a, p.b4, 3, 100)
	p.down(t)
	kernel := p.a.Stats(t, p.vethA)
	a.stop()
	got := sumByDirection(a.stored(), p.vethA)
	if got[flow.Egress].packets != kernel.TxPackets || got[flow.Ingress].packets != kernel.RxPackets {
		t.Fatalf("store %+v, interface rx %d tx %d", got, kernel.RxPackets, kernel.TxPackets)
	}
	if es, _ := os.ReadDir(pins); len(es) != 0 {
		t.Fatalf("pins left: %v", es)
	}
}

// TestKillLossMeasured measures what SIGKILLs cost: the build named by
// KILL_LOSS_BIN (a build from before pinning existed, or this one) runs
// with a 2 s eviction interval under steady traffic and is killed ten
// times at assorted moments, then stopped cleanly; the packets the
// interface counted and the store does not hold, divided by the kills, are
// logged. It is a measurement, run by hand (README, "Restarts"); what it
// asserts of any build is that nothing was counted twice.
func TestKillLossMeasured(t *testing.T) {
	bin := os.Getenv("KILL_LOSS_BIN")
	if bin == "" {
		t.Skip("a measurement: set KILL_LOSS_BIN to the build to measure")
	}
	help, _ := exec.Command(bin, "run", "--help").CombinedOutput()
	pinned := strings.Contains(string(help), "-pin-dir")
	p := newPair(t)
	o := agentOpts{bin: bin, noPinFlag: !pinned, noControlFlag: !strings.Contains(string(help), "-control"), args: []string{"--cache-active-timeout", "2s", "--log-level", "info"}}
	var pins string
	if pinned {
		pins = filepath.Join(testutil.Bpffs(t), "loupe")
		o.pinDir = pins
	}
	r := &restartRun{p: p, pins: pins, opts: o}
	r.a = startAgent(t, p.a, o)
	r.a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	p.up(t)
	s := startSteady(t, p)
	const kills = 10
	for i := range kills {
		r.killAndRestart(t, time.Second+time.Duration(i*337%2000)*time.Millisecond, 0, o.args)
	}
	time.Sleep(time.Second)
	s.end()
	time.Sleep(200 * time.Millisecond)
	p.down(t)
	kernel := p.a.Stats(t, p.vethA)
	r.a.stop()
	got := sumByDirection(r.a.stored(), p.vethA)
	in, out := got[flow.Ingress], got[flow.Egress]
	if in.packets > kernel.RxPackets || out.packets > kernel.TxPackets {
		t.Fatalf("counted twice: store rx %d tx %d, interface rx %d tx %d", in.packets, out.packets, kernel.RxPackets, kernel.TxPackets)
	}
	lost := kernel.RxPackets - in.packets + kernel.TxPackets - out.packets
	t.Logf("%s (pinned %v): %d kills, interface %d packets, store %d: %d lost, %.0f per kill",
		bin, pinned, kills, kernel.RxPackets+kernel.TxPackets, in.packets+out.packets, lost, float64(lost)/kills)
}

// TestRestartsWithAFullTable: with a flow budget far below the number of
// flows, most packets reach the agent through the ring buffer. Agents
// killed after reading such packets but before storing them must leave
// them for the next agent, and agents killed after storing them must not
// have them stored again: the store holds the ring position with the
// records. Still exact, and nothing lost to a full ring buffer.
func TestRestartsWithAFullTable(t *testing.T) {
	p := newPair(t)
	pins := filepath.Join(testutil.Bpffs(t), "loupe")
	// The ring buffer holds what the full table diverts while no agent
	// drains it: from a kill to the next agent's first drain, a load of a
	// second or more on a busy 2-CPU machine, at over 2 000 diverted
	// datagrams a second. 1 MiB (12 000 records) ran out in some runs;
	// 8 MiB leaves room for five times that gap.
	args := []string{"--flow-budget", "16", "--cache-active-timeout", "100ms", "--log-level", "info", "--ringbuf-size", "8MiB"}
	r := &restartRun{p: p, pins: pins, opts: agentOpts{pinDir: pins, args: args}}
	r.a = startAgent(t, p.a, r.opts)
	r.a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	p.up(t)
	s := startSteady(t, p)
	// 64 more flows, one datagram each every 32 ms: the table holds 16.
	many := make([]*net.UDPConn, 64)
	for i := range many {
		many[i] = udpSender(t, p.a, hostPort(p.b4, 7001))
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for i := 0; i < 20*steadyMaxDatagrams; i++ {
			select {
			case <-s.stop:
				return
			default:
			}
			if _, err := many[i%len(many)].Write(make([]byte, 1+i%200)); err != nil {
				s.fail(err)
				return
			}
			time.Sleep(500 * time.Microsecond)
		}
	}()
	for i := range killAfter {
		r.killAndRestart(t, killAfter[i], killGap[i], args)
		r.a.waitLog(5*time.Second, "adopted pinned maps")
	}
	time.Sleep(300 * time.Millisecond)
	m := r.a.metrics()
	if m[`loupe_ringbuf_events_total{reason="map_full"}`] == 0 {
		t.Fatalf("no packet went through the ring buffer: %v", m)
	}
	if m["loupe_dropped_packets_total"] != 0 {
		t.Fatalf("the ring buffer overflowed: %v packets dropped", m["loupe_dropped_packets_total"])
	}
	r.finish(t, s, "tcx")
}

// TestRestartFollowsTheNewConfiguration: an agent killed while it watched
// two interfaces is followed by one that watches another pair: the
// interface it no longer includes loses the earlier agent's programs (TCX
// links unpinned, cls_bpf filters removed), the one it still includes
// keeps counting through the update, and the new one is attached.
func TestRestartFollowsTheNewConfiguration(t *testing.T) {
	for _, mode := range []string{"tcx", "tc"} {
		t.Run(mode, func(t *testing.T) {
			p := newPair(t)
			dropped, added := testutil.UniqueName("lpd"), testutil.UniqueName("lpn")
			p.a.IP(t, "link", "add", dropped, "type", "veth", "peer", "name", dropped+"p")
			p.a.IP(t, "link", "add", added, "type", "veth", "peer", "name", added+"p")
			pins := filepath.Join(testutil.Bpffs(t), "loupe")
			o := agentOpts{pinDir: pins, args: []string{"--attach-mode", mode, "--iface", p.vethA + "," + dropped}}
			a := startAgent(t, p.a, o)
			a.waitLog(5*time.Second, "msg=attached", "iface="+dropped+" ")
			a.kill()
			if n := ourPrograms(t, p.a, dropped, mode); n != 2 {
				t.Fatalf("%d programs on %s after the kill, want both left counting", n, dropped)
			}
			o.dir, o.args = a.dir, []string{"--attach-mode", mode, "--iface", p.vethA + "," + added}
			a = startAgent(t, p.a, o)
			a.waitLog(5*time.Second, "msg=attached", "iface="+added+" ")
			if n := ourPrograms(t, p.a, dropped, mode); n != 0 {
				t.Fatalf("%d programs left on %s, which the configuration dropped", n, dropped)
			}
			for _, dev := range []string{p.vethA, added} {
				if n := ourPrograms(t, p.a, dev, mode); n != 2 {
					t.Fatalf("%d programs on %s, want 2", n, dev)
				}
			}
			a.stop()
			for _, dev := range []string{p.vethA, added} {
				if n := ourPrograms(t, p.a, dev, mode); n != 0 {
					t.Fatalf("%d programs on %s after a clean stop", n, dev)
				}
			}
			if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("pins left after a clean stop: %v", err)
			}
		})
	}
}

// ourPrograms counts the agent's programs on an interface, both
// directions: TCX programs named loupe_* (every entry program of
// bpf/loupe.c, whichever build the agent attached), or cls_bpf filters
// named loupe_flows. A filter's line also names its program, and the
// flows-only build's program name (loupe_flows_ing, cut to the kernel's 15
// characters) starts with the filter's: only the filter name, a field of
// its own, is counted.
func ourPrograms(t *testing.T, ns *testutil.NS, dev, mode string) int {
	t.Helper()
	n := 0
	if mode == "tc" {
		for _, dir := range []string{"ingress", "egress"} {
			out, err := ns.Command("tc", "filter", "show", "dev", dev, dir).CombinedOutput()
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(out), "\n") {
				if slices.Contains(strings.Fields(line), "loupe_flows") {
					n++
				}
			}
		}
		return n
	}
	ifindex := ifindexIn(t, ns, dev)
	for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
		var ids []ebpf.ProgramID
		if err := ns.Do(func() error {
			res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: at})
			if err != nil {
				return err
			}
			for _, p := range res.Programs {
				ids = append(ids, p.ID)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if strings.HasPrefix(programName(t, id), "loupe_") {
				n++
			}
		}
	}
	return n
}
