package e2e

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// The signals at the TC hook, end to end: a real DNS server (dnsmasq) in
// one namespace, a client in the other, where the agent watches the veth.
// Until the flows capability puts the results on its records, the agent
// logs each at debug level ("dns result", "handshake result"), with the
// fields a record will carry; the test reads them there.

// ldnPair is a pair of namespaces for these tests: A (agent and client)
// and B (the servers), with B's second address answering nothing.
func ldnPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{
		a: testutil.NewNSPrefix(t, "ldn-"), b: testutil.NewNSPrefix(t, "ldn-"),
		vethA: testutil.UniqueName("ldna"), vethB: testutil.UniqueName("ldnb"),
		a4: netip.MustParseAddr("10.77.0.1"), b4: netip.MustParseAddr("10.77.0.2"),
		a6: netip.MustParseAddr("fd77::1"), b6: netip.MustParseAddr("fd77::2"),
	}
	testutil.Veth(t, p.a, p.vethA, p.b, p.vethB)
	return p
}

// silent is B's address where nothing serves DNS: queries to it time out
// (B's stack answers ICMP port unreachable, which is no DNS response).
var silent = netip.MustParseAddr("10.77.0.4")

// startDnsmasq runs dnsmasq in ns on addrs: names under name.test resolve
// to 10.0.0.7, names under nx.test are NXDOMAIN, any other is REFUSED
// (no upstream). It is stopped, by its pid, when the test ends.
func startDnsmasq(t *testing.T, ns *testutil.NS, addrs ...netip.Addr) {
	t.Helper()
	bin := testutil.RequirePeer(t, "dnsmasq")
	var listen []string
	for _, a := range addrs {
		listen = append(listen, a.String())
	}
	cmd := ns.Command(bin, "--no-daemon", "--no-resolv", "--no-hosts", "--listen-address="+strings.Join(listen, ","),
		"--bind-interfaces", "--address=/name.test/10.0.0.7", "--address=/nx.test/", "--pid-file=")
	logs := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dnsmasq: %v", err)
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
		if t.Failed() {
			t.Logf("dnsmasq:\n%s", logs.String())
		}
	})
}

// dnsAnswer is what a client saw of one query.
type dnsAnswer struct {
	port     uint16 // the client's
	answered bool
	rcode    dnsmessage.RCode
	elapsed  time.Duration // from the query's write to the response's read
}

// dnsAsk sends one query for name (type A) from ns to server, over UDP or
// TCP, and waits up to wait for the response.
func dnsAsk(t *testing.T, ns *testutil.NS, server netip.AddrPort, tcp bool, id uint16, name string, wait time.Duration) dnsAnswer {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	network := "udp"
	if tcp {
		network = "tcp"
		msg = append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)
	}
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout(network, server.String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("dial %s %s: %v", network, server, err)
	}
	defer c.Close()
	a := dnsAnswer{port: uint16(netip.MustParseAddrPort(c.LocalAddr().String()).Port())}
	c.SetDeadline(time.Now().Add(wait))
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("send query: %v", err)
	}
	buf := make([]byte, 4096)
	var n int
	if tcp {
		if _, err = io.ReadFull(c, buf[:2]); err == nil {
			n = int(binary.BigEndian.Uint16(buf))
			_, err = io.ReadFull(c, buf[:n])
		}
	} else {
		n, err = c.Read(buf)
	}
	a.elapsed = time.Since(start)
	if err != nil {
		return a // a timeout, or the ICMP error of a port where nothing listens
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:n])
	if err != nil || h.ID != id || !h.Response {
		t.Fatalf("response to %s: %+v, %v", name, h, err)
	}
	a.answered, a.rcode = true, h.RCode
	return a
}

// logfmt splits a text-format log line into its keys and values.
func logfmt(line string) map[string]string {
	out := map[string]string{}
	for line != "" {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := 1
			for end < len(rest) && (rest[end] != '"' || rest[end-1] == '\\') {
				end++
			}
			v, _ = strconv.Unquote(rest[:min(end+1, len(rest))])
			rest = rest[min(end+1, len(rest)):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		out[k] = v
		line = rest
	}
	return out
}

// results are the agent's logged results of one kind ("dns result",
// "handshake result").
func (a *agent) results(msg string) []map[string]string {
	var out []map[string]string
	for _, line := range strings.Split(a.logs.String(), "\n") {
		if f := logfmt(line); f["msg"] == msg {
			out = append(out, f)
		}
	}
	return out
}

// result waits for the result of msg whose fields include want.
func (a *agent) result(msg string, want map[string]string) map[string]string {
	a.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
	next:
		for _, r := range a.results(msg) {
			for k, v := range want {
				if r[k] != v {
					continue next
				}
			}
			return r
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("no %q with %v; logged:\n%v", msg, want, a.results(msg))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func nsField(t *testing.T, r map[string]string, key string) time.Duration {
	t.Helper()
	n, err := strconv.ParseInt(r[key], 10, 64)
	if err != nil {
		t.Fatalf("%s in %v: %v", key, r, err)
	}
	return time.Duration(n)
}

// TestDNSAndHandshakeSignals: queries that resolve, NXDOMAIN, REFUSED, over
// UDP (IPv4, IPv6) and TCP, a name longer than the 64 bytes kept, and one
// to an address where nothing answers; then a TCP connection. The agent,
// holding only CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON, must give each
// response's flow its id, name, response code and a latency above 0 and
// below what the client measured; the query nothing answered a timeout on
// its flow; the connection a handshake RTT above 0 and no longer than the
// client's connect(); and count each in its metrics.
func TestDNSAndHandshakeSignals(t *testing.T) {
	p := ldnPair(t)
	a := startAgent(t, p.a, agentOpts{caps: true, args: []string{"--cache-active-timeout", "200ms", "--dns-timeout", "500ms"}})
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	if !a.logged(`msg="signal on"`, "signal=dns") || !a.logged(`msg="signal on"`, "signal=handshake_rtt") {
		t.Fatalf("the signals are not on:\n%s", a.logs.String())
	}
	p.up(t)
	p.b.IP(t, "addr", "add", silent.String()+"/24", "dev", p.vethB)
	startDnsmasq(t, p.b, p.b4, p.b6)
	server4, server6 := netip.AddrPortFrom(p.b4, 53), netip.AddrPortFrom(p.b6, 53)

	// dnsmasq is ready when it answers: the last probe is NOERROR, those
	// before it (sent before dnsmasq listened) time out.
	ready := time.Now().Add(10 * time.Second)
	probes := 0
	for {
		probes++
		if dnsAsk(t, p.a, server4, false, 1, "ready.name.test.", 200*time.Millisecond).answered {
			break
		}
		if time.Now().After(ready) {
			t.Fatal("dnsmasq never answered")
		}
	}

	long := strings.Repeat("l", 63) + ".name.test."
	cases := []struct {
		server netip.AddrPort
		tcp    bool
		id     uint16
		name   string
		code   dnsmessage.RCode
		rcode  string
		qname  string
	}{
		{server4, false, 0x101, "a.name.test.", dnsmessage.RCodeSuccess, "NOERROR", "a.name.test"},
		{server4, false, 0x102, "x.nx.test.", dnsmessage.RCodeNameError, "NXDOMAIN", "x.nx.test"},
		{server4, false, 0x103, "nosuch.example.", dnsmessage.RCodeRefused, "REFUSED", "nosuch.example"},
		{server6, false, 0x104, "b.name.test.", dnsmessage.RCodeSuccess, "NOERROR", "b.name.test"},
		{server4, true, 0x105, "c.name.test.", dnsmessage.RCodeSuccess, "NOERROR", "c.name.test"},
		{server4, false, 0x106, long, dnsmessage.RCodeSuccess, "NOERROR", strings.Repeat("l", 63) + "..."},
	}
	answers := make([]dnsAnswer, len(cases))
	for i, c := range cases {
		answers[i] = dnsAsk(t, p.a, c.server, c.tcp, c.id, c.name, 5*time.Second)
		if !answers[i].answered || answers[i].rcode != c.code {
			t.Fatalf("%s: dnsmasq answered %+v, want %s", c.name, answers[i], c.rcode)
		}
	}
	silentAnswer := dnsAsk(t, p.a, netip.AddrPortFrom(silent, 53), false, 0x107, "t.name.test.", 300*time.Millisecond)
	if silentAnswer.answered {
		t.Fatalf("the silent address answered: %+v", silentAnswer)
	}

	// A TCP connection: connect() timed by the client.
	tcpServer(t, p.b, netip.AddrPortFrom(p.b4, 8080), 10)
	var conn net.Conn
	var connect time.Duration
	if err := p.a.Do(func() (err error) {
		start := time.Now()
		conn, err = net.DialTimeout("tcp", "10.77.0.2:8080", 5*time.Second)
		connect = time.Since(start)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	clientPort := netip.MustParseAddrPort(conn.LocalAddr().String()).Port()
	conn.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, conn)
	conn.Close()

	for i, c := range cases {
		client := netip.AddrPortFrom(p.a4, answers[i].port)
		if c.server.Addr().Is6() {
			client = netip.AddrPortFrom(p.a6, answers[i].port)
		}
		r := a.result("dns result", map[string]string{"src": c.server.String(), "dst": client.String(),
			"dns_id": strconv.Itoa(int(c.id)), "direction": "ingress", "iface": p.vethA})
		if r["dns_qname"] != c.qname || r["dns_rcode"] != c.rcode {
			t.Errorf("%s: response's flow %v, want name %q, rcode %s", c.name, r, c.qname, c.rcode)
		}
		lat := nsField(t, r, "dns_latency_ns")
		if lat <= 0 || lat >= answers[i].elapsed {
			t.Errorf("%s: latency %v, want above 0 and below the client's %v", c.name, lat, answers[i].elapsed)
		}
		t.Logf("%s (tcp %v): %s, latency %v at the hook, %v at the client", c.name, c.tcp, r["dns_rcode"], lat, answers[i].elapsed)
		q := a.result("dns result", map[string]string{"src": client.String(), "dst": c.server.String(), "direction": "egress"})
		if q["dns_id"] != strconv.Itoa(int(c.id)) || q["dns_qname"] != c.qname || q["dns_rcode"] != "" {
			t.Errorf("%s: query's flow %v, want id %d and name %q alone", c.name, q, c.id, c.qname)
		}
	}
	to := a.result("dns result", map[string]string{"dst": netip.AddrPortFrom(silent, 53).String(), "dns_rcode": "TIMEOUT"})
	if want := netip.AddrPortFrom(p.a4, silentAnswer.port).String(); to["src"] != want || to["dns_qname"] != "t.name.test" || to["dns_id"] != "263" {
		t.Errorf("timeout %v, want from %s, name t.name.test, id 263", to, want)
	}
	hs := a.result("handshake result", map[string]string{"src": netip.AddrPortFrom(p.a4, clientPort).String(), "dst": "10.77.0.2:8080"})
	rtt := nsField(t, hs, "handshake_rtt_ns")
	if rtt <= 0 || rtt > connect || rtt != nsField(t, hs, "syn_to_synack_ns")+nsField(t, hs, "synack_to_ack_ns") {
		t.Errorf("handshake %v: want an RTT above 0, its two parts' sum, no longer than connect()'s %v", hs, connect)
	}
	t.Logf("handshake: RTT %v at the hook, connect() %v at the client", rtt, connect)

	m := a.metrics()
	for name, want := range map[string]float64{
		`loupe_signal_up{signal="dns"}`: 1, `loupe_signal_up{signal="handshake_rtt"}`: 1,
		`loupe_dns_responses_total{rcode="NXDOMAIN"}`: 1, `loupe_dns_responses_total{rcode="REFUSED"}`: 1,
		`loupe_dns_responses_total{rcode="NOERROR"}`: 1 + 4,
		`loupe_dns_events_total{event="queries"}`:    float64(probes + len(cases) + 1),
		`loupe_dns_events_total{event="matched"}`:    float64(1 + len(cases)),
		`loupe_dns_events_total{event="unmatched"}`:  0,
		"loupe_dns_latency_seconds_count":            float64(1 + len(cases)),
		"loupe_dns_timeouts_total":                   float64(probes - 1 + 1),
		// The TCP query's connection and the one to port 8080.
		`loupe_handshake_events_total{event="measured"}`: 2,
		"loupe_handshake_rtt_seconds_count":              2,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	a.stop()
	// The same exchanges on the exported records: each response's flow
	// record carries its name and response code, and a handshake RTT is
	// on a record.
	named := map[string]string{}
	var handshakes int
	for _, r := range a.exported() {
		if r.DNSQName != "" && r.Direction == flow.Ingress {
			named[r.DNSQName] = flow.RcodeName(r.DNSRcode)
		}
		if r.HandshakeRTTNs > 0 {
			handshakes++
		}
	}
	for _, c := range cases {
		if got, ok := named[c.qname]; !ok || got != c.rcode {
			t.Errorf("%s: records name %q with rcode %q (found %v), want %s", c.name, c.qname, got, ok, c.rcode)
		}
	}
	if handshakes == 0 {
		t.Error("no record carries a handshake RTT")
	}
}

// TestTCSignalsDegrade: when the kernel refuses the entry programs with
// the signals at the TC hook (the fault build refuses the handshake's, as a
// verifier would), the agent loads them without, says both signals are
// off and why, and counts flows as ever; a signal switched off in the
// configuration is off alone, and says so.
func TestTCSignalsDegrade(t *testing.T) {
	p := ldnPair(t)
	a := startAgent(t, p.a, agentOpts{bin: faultAgent(t), env: []string{"TEST_DATAPATH_REFUSE=handshake"},
		args: []string{"--cache-active-timeout", "200ms"}})
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	for _, s := range []string{"dns", "handshake_rtt"} {
		if !a.logged(`msg="signal off"`, "signal="+s, "unavailable", "TEST_DATAPATH_REFUSE=handshake") {
			t.Errorf("no signal off line for %s with its reason:\n%s", s, a.logs.String())
		}
	}
	p.up(t)
	ping(t, p.a, p.b4, 3, 100)
	m := a.metrics()
	checkSignalsUp(t, "refused", m, map[string]float64{"dns": 0, "handshake_rtt": 0, "rtt": 1})
	a.stop()
	if got := find(a.exported(), flow.Egress, 1, p.a4.String(), 8, p.b4.String(), 0); got.packets != 3 {
		t.Errorf("ICMP echo requests recorded: %+v, want 3 (flows runs without the signals)", got)
	}

	b := startAgent(t, p.a, agentOpts{args: []string{"--cache-active-timeout", "200ms", "--dns-enabled=false"}})
	if !b.logged(`msg="signal off"`, "signal=dns", "reason=disabled") || !b.logged(`msg="signal on"`, "signal=handshake_rtt") {
		t.Errorf("dns disabled: want dns off (disabled), handshake_rtt on:\n%s", b.logs.String())
	}
	m = b.metrics()
	checkSignalsUp(t, "dns disabled", m, map[string]float64{"dns": 0, "handshake_rtt": 1})
	b.stop()
}

// TestSignalsOfForwardedTraffic: the host only forwards (a router
// namespace between the client's and the server's), so no socket of its
// own sees the exchanges. On each of its two interfaces the agent must
// match the query to its response and time the handshake: the latency on
// the server's side no longer than on the client's side, and both below
// what the client measured; the handshake RTT on each side no longer than
// the client's connect().
func TestSignalsOfForwardedTraffic(t *testing.T) {
	client, router, server := testutil.NewNSPrefix(t, "ldn-"), testutil.NewNSPrefix(t, "ldn-"), testutil.NewNSPrefix(t, "ldn-")
	cv, r1, r2, sv := testutil.UniqueName("ldnc"), testutil.UniqueName("ldnr"), testutil.UniqueName("ldnr"), testutil.UniqueName("ldns")
	testutil.Veth(t, client, cv, router, r1)
	testutil.Veth(t, router, r2, server, sv)
	for _, s := range []struct {
		ns        *testutil.NS
		dev, addr string
	}{{client, cv, "10.78.1.2/24"}, {router, r1, "10.78.1.1/24"}, {router, r2, "10.78.2.1/24"}, {server, sv, "10.78.2.2/24"}} {
		s.ns.IP(t, "addr", "add", s.addr, "dev", s.dev)
		s.ns.IP(t, "link", "set", s.dev, "up")
	}
	client.IP(t, "route", "add", "default", "via", "10.78.1.1")
	server.IP(t, "route", "add", "default", "via", "10.78.2.1")
	router.Sysctl(t, "net.ipv4.ip_forward", "1")

	a := startAgent(t, router, agentOpts{args: []string{"--cache-active-timeout", "200ms"}})
	a.waitLog(5*time.Second, "msg=attached", "iface="+r1+" ")
	a.waitLog(5*time.Second, "msg=attached", "iface="+r2+" ")
	startDnsmasq(t, server, netip.MustParseAddr("10.78.2.2"))
	dns := netip.MustParseAddrPort("10.78.2.2:53")
	var ans dnsAnswer
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ans = dnsAsk(t, client, dns, false, 0x201, "fwd.name.test.", 200*time.Millisecond); ans.answered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("dnsmasq never answered through the router")
		}
	}
	cl := netip.AddrPortFrom(netip.MustParseAddr("10.78.1.2"), ans.port).String()
	near := a.result("dns result", map[string]string{"iface": r1, "src": dns.String(), "dst": cl, "dns_id": "513", "direction": "egress"})
	far := a.result("dns result", map[string]string{"iface": r2, "src": dns.String(), "dst": cl, "dns_id": "513", "direction": "ingress"})
	ln, lf := nsField(t, near, "dns_latency_ns"), nsField(t, far, "dns_latency_ns")
	if near["dns_qname"] != "fwd.name.test" || far["dns_qname"] != "fwd.name.test" || near["dns_rcode"] != "NOERROR" ||
		lf <= 0 || lf > ln || ln >= ans.elapsed {
		t.Errorf("forwarded DNS: client's side %v, server's side %v, client measured %v", near, far, ans.elapsed)
	}
	t.Logf("forwarded DNS: latency %v on the server's side, %v on the client's, %v at the client", lf, ln, ans.elapsed)

	tcpServer(t, server, netip.MustParseAddrPort("10.78.2.2:8080"), 10)
	var conn net.Conn
	var connect time.Duration
	if err := client.Do(func() (err error) {
		start := time.Now()
		conn, err = net.DialTimeout("tcp", "10.78.2.2:8080", 5*time.Second)
		connect = time.Since(start)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	src := conn.LocalAddr().String()
	conn.Close()
	for _, side := range []struct{ iface, dir string }{{r1, "ingress"}, {r2, "egress"}} {
		hs := a.result("handshake result", map[string]string{"iface": side.iface, "direction": side.dir, "src": src, "dst": "10.78.2.2:8080"})
		rtt := nsField(t, hs, "handshake_rtt_ns")
		if rtt <= 0 || rtt > connect {
			t.Errorf("%s: handshake %v, want an RTT above 0 and no longer than connect()'s %v", side.iface, hs, connect)
		}
		t.Logf("forwarded handshake on %s: RTT %v, connect() %v", side.dir, rtt, connect)
	}
	a.stop()
}

// checkSignalsUp checks loupe_signal_up of each signal in want, which
// must be served, 0 as much as 1.
func checkSignalsUp(t *testing.T, what string, m map[string]float64, want map[string]float64) {
	t.Helper()
	for s, w := range want {
		name := `loupe_signal_up{signal="` + s + `"}`
		if v, ok := m[name]; !ok || v != w {
			t.Errorf("%s: %s = %v (served: %v), want %v", what, name, v, ok, w)
		}
	}
}
