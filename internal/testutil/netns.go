package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// UniqueName returns prefix followed by random hex, short enough for an
// interface name (15 bytes) when prefix is at most 7 bytes.
func UniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// IP runs `ip args...` and fails the test on error.
func IP(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// NS is a network namespace created for one test and deleted when it ends.
type NS struct {
	Name string
}

// NewNS creates a uniquely named namespace with loopback up; t.Cleanup
// deletes it (and with it every interface inside) whatever happens.
func NewNS(t testing.TB) *NS {
	t.Helper()
	return NewNSPrefix(t, "loupe-")
}

// NewNSPrefix is NewNS with a name that starts with prefix, for a test
// whose namespaces must be told apart from the others'. The name carries
// the test process's pid (ownedName): t.Cleanup cannot run in a process
// that was killed, so each new namespace first removes those its owner
// left behind, once that owner is gone.
func NewNSPrefix(t testing.TB, prefix string) *NS {
	t.Helper()
	RequirePrivileged(t)
	removeOrphanNS(t)
	ns := &NS{Name: ownedName(prefix, os.Getpid())}
	IP(t, "netns", "add", ns.Name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
			t.Errorf("delete netns %s: %v: %s", ns.Name, err, out)
		}
	})
	ns.IP(t, "link", "set", "lo", "up")
	return ns
}

// ownedName is the name of a namespace made by test process pid: PREFIX,
// ".tp", the pid, ".", 8 hex digits. The mark is what removeOrphanNS
// deletes by, so that no namespace of the machine's own, whatever its
// name, is taken for a test's.
func ownedName(prefix string, pid int) string {
	return UniqueName(prefix + ".tp" + strconv.Itoa(pid) + ".")
}

// orphanNS matches the names ownedName gives, the pid in its group.
var orphanNS = regexp.MustCompile(`\.tp([0-9]+)\.[0-9a-f]{8}$`)

// removeOrphanNS deletes the namespaces that NewNSPrefix made in a test
// process that no longer runs.
func removeOrphanNS(t testing.TB) {
	t.Helper()
	names, err := os.ReadDir("/run/netns")
	if err != nil {
		return // none yet
	}
	for _, e := range names {
		m := orphanNS.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue // its owner runs (or cannot be told)
		}
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			t.Logf("delete netns %s left by process %d: %v: %s", e.Name(), pid, err, out)
			continue
		}
		t.Logf("deleted netns %s, left by process %d, which is gone", e.Name(), pid)
	}
}

// IP runs `ip args...` inside the namespace.
func (ns *NS) IP(t testing.TB, args ...string) string {
	t.Helper()
	return IP(t, append([]string{"-n", ns.Name}, args...)...)
}

// Command returns a command that runs inside the namespace.
func (ns *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Run runs a command inside the namespace and fails the test on error.
func (ns *NS) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := ns.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s %s: %v: %s", ns.Name, name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Sysctl sets a sysctl inside the namespace.
func (ns *NS) Sysctl(t testing.TB, key, value string) {
	t.Helper()
	ns.Run(t, "sysctl", "-q", "-w", key+"="+value)
}

// Do runs fn on an OS thread switched into the namespace. Sockets fn opens
// stay in the namespace after Do returns, so a test can open a listener or
// a connection here and use it from any goroutine.
func (ns *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked: if switching back failed, it
		// must not be reused in the wrong namespace, and Go retires a
		// goroutine's locked thread when the goroutine exits.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(ns.Name)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("enter %s: %w", ns.Name, err)
			return
		}
		err = fn()
		if serr := netns.Set(orig); serr != nil {
			errc <- fmt.Errorf("leave %s: %w", ns.Name, serr)
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// Veth creates a veth pair with one end in each namespace (left down).
func Veth(t testing.TB, a *NS, aName string, b *NS, bName string) {
	t.Helper()
	a.IP(t, "link", "add", aName, "type", "veth", "peer", "name", bName, "netns", b.Name)
}

// LinkStats are an interface's counters as the kernel keeps them.
type LinkStats struct {
	RxPackets, RxBytes, RxDropped uint64
	TxPackets, TxBytes, TxDropped uint64
}

// Stats reads an interface's 64-bit counters.
func (ns *NS) Stats(t testing.TB, ifname string) LinkStats {
	t.Helper()
	out := ns.IP(t, "-j", "-s", "link", "show", "dev", ifname)
	var links []struct {
		Stats64 struct {
			Rx struct{ Packets, Bytes, Dropped uint64 } `json:"rx"`
			Tx struct{ Packets, Bytes, Dropped uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("parse link stats of %s: %v: %s", ifname, err, out)
	}
	s := links[0].Stats64
	return LinkStats{
		RxPackets: s.Rx.Packets, RxBytes: s.Rx.Bytes, RxDropped: s.Rx.Dropped,
		TxPackets: s.Tx.Packets, TxBytes: s.Tx.Bytes, TxDropped: s.Tx.Dropped,
	}
}
