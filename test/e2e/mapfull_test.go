package e2e

import (
	"net"
	"testing"

	"loupe/internal/flow"
)

// TestMapFullStaysExact floods a 16-flow table with 600 flows: the packets
// the table refuses go through the ring buffer, a full table forces early
// evictions, and the totals stay exact.
func TestMapFullStaysExact(t *testing.T) {
	p := newPair(t)
	a := startAgent(t, p.a, agentOpts{args: []string{"--flow-budget", "16", "--cache-active-timeout", "2s", "--log-level", "info"}})
	p.up(t)

	sink := newUDPSink(t, p.b, hostPort(p.b4, 7001))
	const flows, perFlow = 600, 3
	conns := make([]net.Conn, flows)
	for i := range conns {
		conns[i] = udpSender(t, p.a, hostPort(p.b4, 7001))
	}
	for round := range perFlow {
		for i, c := range conns {
			if _, err := c.Write(make([]byte, 10+i%50+round)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := sink.settle(); got == 0 {
		t.Fatal("no datagram crossed the link")
	}

	m := a.metrics()
	p.down(t)
	kernel := p.a.Stats(t, p.vethA)
	a.stop()

	recs := a.exported()
	for i, c := range conns {
		port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		got := find(recs, flow.Egress, 17, p.a4.String(), port, p.b4.String(), 7001)
		var want uint64
		for round := range perFlow {
			want += ipv4Overhead(10 + i%50 + round)
		}
		if got.packets != perFlow || got.bytes != want {
			t.Errorf("flow from port %d: %d packets %d bytes, want %d and %d", port, got.packets, got.bytes, perFlow, want)
		}
	}
	dropped := uint64(m["loupe_dropped_packets_total"])
	droppedBytes := uint64(m["loupe_dropped_bytes_total"])
	got := sumByDirection(recs, p.vethA)
	// Every packet is in a flow or counted as dropped, bytes included.
	if out := got[flow.Egress]; out.packets+dropped != kernel.TxPackets || out.bytes+droppedBytes != kernel.TxBytes {
		t.Errorf("egress: flows %+v + %d dropped packets (%d bytes); the interface sent %d packets %d bytes",
			out, dropped, droppedBytes, kernel.TxPackets, kernel.TxBytes)
	}
	for _, name := range []string{
		`loupe_datapath_events_total{event="map_full"}`,
		`loupe_ringbuf_events_total{reason="map_full"}`,
		`loupe_evictions_total{reason="map_full"}`,
	} {
		if m[name] == 0 {
			t.Errorf("%s = 0: the table never filled", name)
		}
	}
	t.Logf("map_full events %v, forced evictions %v, dropped %d",
		m[`loupe_datapath_events_total{event="map_full"}`], m[`loupe_evictions_total{reason="map_full"}`], dropped)
}
