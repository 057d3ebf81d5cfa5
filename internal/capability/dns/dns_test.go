package dns

import (
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/dns/dnsmessage"

	"loupe/internal/capability"
	"loupe/internal/datapath"
	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// open loads a datapath with the unit's switches and opens the unit on it;
// refused, the unit is told the kernel refused them and the datapath runs
// flows alone, as the agent would.
func open(t *testing.T, cfg Config, refused error) (*Unit, *datapath.Datapath) {
	t.Helper()
	testutil.RequirePrivileged(t)
	u := New(cfg, time.Hour, slog.New(slog.DiscardHandler))
	caps := []string{"flows"}
	if refused != nil {
		u.Refused(refused)
	} else {
		caps = append(caps, u.Switches()...)
	}
	dp, err := datapath.Load(datapath.Options{FlowBudget: 64, RingBufSize: 1 << 16, Capabilities: caps,
		DNS: cfg.DNSSizes(), Handshake: cfg.HandshakeSizes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	if err := u.Open(&capability.Host{Datapath: dp, IfaceName: func(uint32) string { return "lo" }}); err != nil {
		t.Fatal(err)
	}
	return u, dp
}

func udpDNS(t *testing.T, toServer bool, msg []byte) []byte {
	t.Helper()
	client, server := net.IP{10, 0, 0, 1}, net.IP{10, 0, 0, 53}
	udp := &layers.UDP{SrcPort: 40000, DstPort: 53}
	if !toServer {
		client, server = server, client
		udp.SrcPort, udp.DstPort = 53, 40000
	}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: client, DstIP: server}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4},
		ip, udp, gopacket.Payload(msg))
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func message(t *testing.T, id uint16, response bool, rcode dnsmessage.RCode) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, Response: response, RCode: rcode})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("unit.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	m, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func run(t *testing.T, p *ebpf.Program, frame []byte) {
	t.Helper()
	if _, err := p.Run(&ebpf.RunOptions{Data: frame}); err != nil {
		t.Fatal(err)
	}
}

// TestDrainAndMetrics: an exchange and a handshake through the real
// programs come out of Drain, after a swap, on their flows; the metrics
// count them; the first Drain from outside stops the unit's own.
func TestDrainAndMetrics(t *testing.T) {
	u, dp := open(t, DefaultConfig(), nil)
	run(t, dp.Egress(), udpDNS(t, true, message(t, 77, false, 0)))
	run(t, dp.Ingress(), udpDNS(t, false, message(t, 77, true, dnsmessage.RCodeNameError)))
	rot, err := dp.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if err := rot.Clear(); err != nil {
		t.Fatal(err)
	}
	r, err := u.Drain()
	if err != nil {
		t.Fatal(err)
	}
	if !u.claimed.Load() {
		t.Error("Drain from outside did not claim the intervals")
	}
	var resp datapath.DNSResult
	for k, v := range r.DNS {
		if k.Direction == flow.Ingress {
			resp = v
		}
	}
	if len(r.DNS) != 2 || resp.ID != 77 || resp.QName != "unit.test" || resp.RcodeName() != "NXDOMAIN" || !resp.Matched || resp.Latency <= 0 {
		t.Fatalf("DNS results %+v", r.DNS)
	}
	if len(r.Handshakes) != 0 {
		t.Errorf("handshakes %+v, want none", r.Handshakes)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(u.Collectors()...)
	if got := u.SignalsUp(); !got[SignalDNS] || !got[SignalHandshakeRTT] || len(got) != 2 {
		t.Errorf("signals up %v, want dns and handshake_rtt up", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, v := range map[string]float64{
		"loupe_dns_events_total/queries": 1, "loupe_dns_events_total/matched": 1, "loupe_dns_events_total/unmatched": 0,
		"loupe_dns_responses_total/NXDOMAIN": 1, "loupe_dns_responses_total/NOERROR": 0, "loupe_dns_latency_seconds": 1,
		"loupe_handshake_rtt_seconds": 0, "loupe_dns_timeouts_total": 0,
	} {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
}

// TestRefusedAndDisabled: a signal the configuration turns off, or whose
// programs the kernel refused, is off with its reason in the status, 0 in
// its up gauge, and has no results; the unit still runs.
func TestRefusedAndDisabled(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HandshakeRTT = false
	u, _ := open(t, cfg, nil)
	if !slices.Equal(u.Switches(), []string{"dns"}) {
		t.Errorf("switches %v, want dns alone", u.Switches())
	}
	st := u.Status()
	if st.Detail[SignalDNS] != "running" || st.Detail[SignalHandshakeRTT] != "disabled" {
		t.Errorf("status %+v", st.Detail)
	}
	if r, err := u.Drain(); err != nil || len(r.Handshakes) != 0 {
		t.Errorf("drain with the handshake off: %+v, %v", r, err)
	}

	u, _ = open(t, DefaultConfig(), errors.New("verifier says no"))
	st = u.Status()
	for _, s := range []string{SignalDNS, SignalHandshakeRTT} {
		if d, _ := st.Detail[s].(string); u.Up(s) || !strings.Contains(d, "unavailable") || !strings.Contains(d, "verifier says no") {
			t.Errorf("%s: up %v, status %q", s, u.Up(s), d)
		}
	}
	if r, err := u.Drain(); err != nil || len(r.DNS)+len(r.Handshakes) != 0 {
		t.Errorf("drain with both refused: %+v, %v", r, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(u.Collectors()...)
	if n, err := promtest.GatherAndCount(reg, "loupe_dns_events_total"); err != nil || n != 0 {
		t.Errorf("%d series, %v: want no counters", n, err)
	}
	if got := u.SignalsUp(); got[SignalDNS] || got[SignalHandshakeRTT] || len(got) != 2 {
		t.Errorf("signals up %v, want dns and handshake_rtt down", got)
	}
}
