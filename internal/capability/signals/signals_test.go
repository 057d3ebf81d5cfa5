package signals

import (
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"loupe/internal/datapath"
	"loupe/internal/testutil"
)

// openUnit opens a unit for cfg, with tps renaming tracepoints.
func openUnit(t *testing.T, cfg Config, tps map[datapath.Signal]string) *Unit {
	t.Helper()
	testutil.RequirePrivileged(t)
	u := New(cfg, time.Hour, slog.New(slog.DiscardHandler))
	u.tracepoints = tps
	if err := u.Open(nil); err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

func checkUp(t *testing.T, u *Unit, rtt, retransmits, drops int) {
	t.Helper()
	want := map[string]bool{"rtt": rtt == 1, "retransmits": retransmits == 1, "drops": drops == 1}
	if got := u.SignalsUp(); !maps.Equal(got, want) {
		t.Fatalf("signals up: %v, want %v", got, want)
	}
}

// gathered is the value of the metric name whose label is value, as a
// registry that checks every metric's consistency gathers it.
func gathered(t *testing.T, u *Unit, name, label, value string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(u.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}

// TestUnavailableTracepointTurnsOffItsSignalOnly: a tracepoint the kernel
// does not have turns its signal off, with the reason in the status and
// loupe_signal_up 0; the other signals are up.
func TestUnavailableTracepointTurnsOffItsSignalOnly(t *testing.T) {
	u := openUnit(t, DefaultConfig(), map[datapath.Signal]string{datapath.SignalRetransmits: "lsg_no_such_tracepoint"})
	checkUp(t, u, 1, 0, 1)
	st := u.Status()
	if !st.Enabled {
		t.Fatal("the unit says it is disabled")
	}
	reason, _ := st.Detail["retransmits"].(string)
	if !strings.HasPrefix(reason, "unavailable: ") || !strings.Contains(reason, "lsg_no_such_tracepoint") {
		t.Fatalf("retransmits in the status: %q, want unavailable with the tracepoint named", reason)
	}
	if st.Detail["rtt"] != "attached" || st.Detail["drops"] != "attached" {
		t.Fatalf("status detail %v: want rtt and drops attached", st.Detail)
	}
}

// TestDisabledSignal: a signal the configuration turns off is off as
// disabled; with all off the unit says it is disabled and loads nothing.
func TestDisabledSignal(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Drops = false
	u := openUnit(t, cfg, nil)
	checkUp(t, u, 1, 1, 0)
	if d := u.Status().Detail["drops"]; d != "disabled" {
		t.Fatalf("drops in the status: %v, want disabled", d)
	}

	none := openUnit(t, Config{TableSize: 16}, nil)
	checkUp(t, none, 0, 0, 0)
	if st := none.Status(); st.Enabled || st.Detail["memory_bytes"] != uint64(0) {
		t.Fatalf("status with every signal off: %+v", st)
	}
}

// TestDrainFeedsMetrics: what Drain returns for a 5-tuple is what the
// kernel did (one datagram to a port nothing listens on: NO_SOCKET), and
// the drop totals count it.
func TestDrainFeedsMetrics(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RTT, cfg.Retransmits = false, false
	u := openUnit(t, cfg, nil)
	ns := testutil.NewNSPrefix(t, "lsg-")
	var from, to netip.AddrPort
	if err := ns.Do(func() error {
		c, err := net.Dial("udp", "127.0.0.1:9307")
		if err != nil {
			return err
		}
		defer c.Close()
		from, to = c.LocalAddr().(*net.UDPAddr).AddrPort(), c.RemoteAddr().(*net.UDPAddr).AddrPort()
		_, err = c.Write([]byte("lsg"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	key := datapath.SignalKey{SrcAddr: from.Addr().As16(), DstAddr: to.Addr().As16(),
		SrcPort: from.Port(), DstPort: to.Port(), Proto: 17}
	var got datapath.DropCount
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && got.Packets == 0; {
		m, err := u.Drain()
		if err != nil {
			t.Fatal(err)
		}
		got = m[key].Drops["NO_SOCKET"]
		time.Sleep(20 * time.Millisecond)
	}
	if got != (datapath.DropCount{Packets: 1, Bytes: 20 + 8 + 3}) {
		t.Fatalf("drops of %s: %+v, want one NO_SOCKET datagram of 31 bytes", key, got)
	}
	if n := gathered(t, u, "loupe_signal_drops_total", "reason", "NO_SOCKET"); n < 1 {
		t.Fatalf("loupe_signal_drops_total{reason=\"NO_SOCKET\"} = %v, want at least the test's datagram", n)
	}
	if !u.claimed.Load() {
		t.Fatal("Drain did not take the intervals over from the unit")
	}
}
