package e2e

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"loupe/internal/api"
	"loupe/internal/flow"
)

// The kernel signals (RTT, retransmits, drops with reason) end to end: the
// agent attaches them with nothing but its three capabilities, and a
// signal switched off or refused by the kernel is off alone, said so in the
// log, `loupe status` and loupe_signal_up, while the rest runs.

// waitMetricAtLeast waits until the agent's series (name{labels}) reaches
// at least min: the signals count the whole kernel's events, the test's
// among them.
func waitMetricAtLeast(t *testing.T, a *agent, series string, min float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := a.metrics()
		if m[series] >= min {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want at least %v", series, m[series], min)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// signalsStatus reads the signals capability from `loupe status --json`.
func signalsStatus(t *testing.T, a *agent) *api.CapabilityStatus {
	t.Helper()
	var st api.Status
	if err := json.Unmarshal([]byte(loupeOutput(t, "status", "--json", "--control", a.control)), &st); err != nil {
		t.Fatal(err)
	}
	c := capabilityNamed(st, "signals")
	if c == nil {
		t.Fatalf("no signals capability in the status: %+v", st.Capabilities)
	}
	return c
}

// TestSignalsWithCapabilitiesOnly: as nobody with CAP_BPF, CAP_NET_ADMIN
// and CAP_PERFMON, the agent attaches all three signals, and the drops of
// datagrams sent to a port nothing listens on reach its metrics under the
// kernel's reason for them.
func TestSignalsWithCapabilitiesOnly(t *testing.T) {
	p := newPair(t)
	a := startAgent(t, p.a, agentOpts{caps: true, args: []string{"--cache-active-timeout", "100ms"}})
	checkCapabilities(t, a.pid())
	a.waitLog(5*time.Second, "signals loaded", "rtt=attached", "retransmits=attached", "drops=attached")
	p.up(t)
	m := a.metrics()
	for _, s := range []string{"rtt", "retransmits", "drops"} {
		if v := m[`loupe_signal_up{signal="`+s+`"}`]; v != 1 {
			t.Errorf("loupe_signal_up{signal=%q} = %v, want 1", s, v)
		}
	}
	const n = 7
	before := m[`loupe_signal_drops_total{reason="NO_SOCKET"}`]
	// Not connected: the port unreachable each datagram draws would
	// fail the next write on a connected socket.
	var c *net.UDPConn
	if err := p.b.Do(func() (err error) {
		c, err = net.ListenUDP("udp", nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range n {
		if _, err := c.WriteToUDPAddrPort(make([]byte, 10), hostPort(p.a4, 9308)); err != nil {
			t.Fatal(err)
		}
	}
	waitMetricAtLeast(t, a, `loupe_signal_drops_total{reason="NO_SOCKET"}`, before+n)
	st := signalsStatus(t, a)
	for _, s := range []string{"rtt", "retransmits", "drops"} {
		if st.Detail[s] != "attached" {
			t.Errorf("status: signals %s = %v, want attached", s, st.Detail[s])
		}
	}
	a.stop()
}

// TestSignalOffAlone: rtt switched off in the configuration, drops' tracepoint
// renamed to one the kernel lacks (the fault-injection build); the agent
// runs, retransmits is attached, each of the others is off with its reason,
// and flows are recorded as ever.
func TestSignalOffAlone(t *testing.T) {
	p := newPair(t)
	a := startAgent(t, p.a, agentOpts{bin: faultAgent(t), env: []string{"TEST_SIGNALS_TRACEPOINTS=drops:lsg_no_such_tracepoint"},
		args: []string{"--signals-rtt=false", "--cache-active-timeout", "100ms"}})
	a.waitLog(5*time.Second, "signal unavailable", "signal=drops", "lsg_no_such_tracepoint")
	a.waitLog(5*time.Second, "signals loaded", "rtt=disabled", "retransmits=attached", `drops="unavailable: attach raw tracepoint lsg_no_such_tracepoint`)
	m := a.metrics()
	for s, want := range map[string]float64{"rtt": 0, "retransmits": 1, "drops": 0} {
		if v := m[`loupe_signal_up{signal="`+s+`"}`]; v != want {
			t.Errorf("loupe_signal_up{signal=%q} = %v, want %v", s, v, want)
		}
	}
	st := signalsStatus(t, a)
	drops, _ := st.Detail["drops"].(string)
	if st.Detail["rtt"] != "disabled" || st.Detail["retransmits"] != "attached" ||
		!strings.HasPrefix(drops, "unavailable: ") || !strings.Contains(drops, "lsg_no_such_tracepoint") {
		t.Errorf("status detail %v: want rtt disabled, retransmits attached, drops unavailable naming the tracepoint", st.Detail)
	}
	human := loupeOutput(t, "status", "--control", a.control)
	if !strings.Contains(human, "rtt=disabled") || !strings.Contains(human, "drops=unavailable: attach raw tracepoint lsg_no_such_tracepoint") {
		t.Errorf("loupe status does not say which signals are off and why:\n%s", human)
	}

	p.up(t)
	ping(t, p.a, p.b4, 3, 100)
	a.stop()
	if s := sumByDirection(a.exported(), p.vethA)[flow.Ingress]; s.packets == 0 {
		t.Errorf("no flow recorded on %s with two signals off", p.vethA)
	}
}
