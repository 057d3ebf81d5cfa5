package delayline_test

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"loupe/internal/testutil"
	"loupe/internal/testutil/delayline"
)

// pair is two namespaces whose only link runs through a third, where the
// line is started.
type pair struct {
	a, d, b *testutil.NS
}

func newPair(t *testing.T) *pair {
	p := &pair{a: testutil.NewNSPrefix(t, "lhp-a"), d: testutil.NewNSPrefix(t, "lhp-d"), b: testutil.NewNSPrefix(t, "lhp-b")}
	testutil.Veth(t, p.a, "va", p.d, "da")
	testutil.Veth(t, p.d, "db", p.b, "vb")
	p.a.IP(t, "addr", "add", "10.77.0.1/24", "dev", "va")
	p.b.IP(t, "addr", "add", "10.77.0.2/24", "dev", "vb")
	for _, l := range []struct {
		ns   *testutil.NS
		name string
	}{{p.a, "va"}, {p.d, "da"}, {p.d, "db"}, {p.b, "vb"}} {
		l.ns.IP(t, "link", "set", l.name, "up")
	}
	return p
}

func (p *pair) start(t *testing.T, delay time.Duration) *delayline.Line {
	t.Helper()
	var l *delayline.Line
	if err := p.d.Do(func() (err error) {
		l, err = delayline.Start("da", "db", delay)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

var rttMin = regexp.MustCompile(`= ([0-9.]+)/`)

// minRTT pings b from a and returns the least round trip (the first one
// also waits for ARP through the line).
func (p *pair) minRTT(t *testing.T, n int) time.Duration {
	t.Helper()
	out := p.a.Run(t, "ping", "-c", strconv.Itoa(n), "-i", "0.05", "-W", "2", "-q", "10.77.0.2")
	m := rttMin.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no rtt in ping's output:\n%s", out)
	}
	ms, _ := strconv.ParseFloat(m[1], 64)
	return time.Duration(ms * float64(time.Millisecond))
}

// The round trip through the line moves by twice its delay.
func TestDelayLineMovesRTT(t *testing.T) {
	const delay = 20 * time.Millisecond
	p := newPair(t)
	l := p.start(t, 0)
	base := p.minRTT(t, 10)
	aToB, bToA := l.Forwarded()
	l.Close()
	if aToB < 10 || bToA < 10 {
		t.Fatalf("forwarded %d and %d frames, want at least the 10 echoes each way", aToB, bToA)
	}
	l = p.start(t, delay)
	defer l.Close()
	delayed := p.minRTT(t, 10)
	moved := delayed - base
	t.Logf("min rtt %v without delay, %v with %v each way: moved %v", base, delayed, delay, moved)
	if moved < 2*delay-time.Millisecond || moved > 2*delay+10*time.Millisecond {
		t.Errorf("rtt moved by %v, want about %v", moved, 2*delay)
	}
	if l.Dropped() != 0 {
		t.Errorf("%d frames dropped", l.Dropped())
	}
}
