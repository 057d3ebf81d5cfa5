package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// TestStoreOnFullDisk runs the agent with its store on a small tmpfs that
// the test fills before any traffic: every record is held, none stored,
// and the store's metrics account for every packet the interface counted.
// Once the test gives the space back, the next eviction stores what was
// held, the retries stop, and the store holds exactly the interface's
// counters.
func TestStoreOnFullDisk(t *testing.T) {
	p := newPair(t)
	mnt := testutil.Tmpfs(t, "8m")
	a := startAgent(t, p.a, agentOpts{args: []string{"--cache-active-timeout", "200ms", "--store", filepath.Join(mnt, "store")}})
	a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
	filler := filepath.Join(mnt, "filler")
	testutil.Fill(t, filler)
	p.up(t)

	ping(t, p.a, p.b4, 1, 56) // resolve the neighbour before the bursts
	sink := newUDPSink(t, p.b, hostPort(p.b4, 7001))
	const senders, datagrams = 20, 10
	for i := range senders {
		send := udpSender(t, p.a, hostPort(p.b4, 7001)) // one flow each
		for j := range datagrams {
			if _, err := send.Write(make([]byte, 10+i*50+j)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Millisecond) // gently, for the receiving socket
	}
	// The interface's counters are the reference, whatever the receiver
	// made of the datagrams.
	sink.settle()
	ping(t, p.a, p.b6, 3, 100)
	p.down(t)
	kernel := p.a.Stats(t, p.vethA)
	packets := float64(kernel.RxPackets + kernel.TxPackets)
	waitEvictions(t, a, 2, 10*time.Second)

	m := a.metrics()
	store := func(name string) float64 { return m[name+`{sink="store"}`] }
	dropped := func(name string) float64 {
		var sum float64
		for k, v := range m {
			if strings.HasPrefix(k, name+`{`) && strings.Contains(k, `sink="store"`) {
				sum += v
			}
		}
		return sum
	}
	t.Logf("full disk: kernel %d+%d packets; store: stored %v, pending %v, dropped %v packets; %v write errors",
		kernel.RxPackets, kernel.TxPackets, store("loupe_sink_packets_total"), store("loupe_sink_pending_packets"),
		dropped("loupe_sink_dropped_packets_total"), store("loupe_sink_errors_total"))
	if store("loupe_sink_packets_total") != 0 || store("loupe_sink_pending_packets") != packets ||
		dropped("loupe_sink_dropped_packets_total") != 0 || store("loupe_sink_records_total") != 0 {
		t.Errorf("with the disk full before any traffic, the store should hold all %v packets and store none", packets)
	}
	if store("loupe_sink_errors_total") == 0 || store("loupe_sink_pending_records") < senders {
		t.Errorf("no failed write or too few held records: %v errors, %v records held",
			store("loupe_sink_errors_total"), store("loupe_sink_pending_records"))
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitEvictions(t, a, 2, 10*time.Second)
	m = a.metrics()
	if store("loupe_sink_packets_total") != packets || store("loupe_sink_pending_packets") != 0 || m["loupe_store_records"] == 0 {
		t.Errorf("after space returned: stored %v packets (%v held), want all %v", store("loupe_sink_packets_total"),
			store("loupe_sink_pending_packets"), packets)
	}
	errs := store("loupe_sink_errors_total")
	waitEvictions(t, a, 2, 10*time.Second)
	m = a.metrics()
	if store("loupe_sink_errors_total") != errs {
		t.Errorf("writes still fail after space returned: %v errors, then %v", errs, store("loupe_sink_errors_total"))
	}
	a.stop()

	got := sumByDirection(a.stored("--store", filepath.Join(mnt, "store")), p.vethA)
	if in := got[flow.Ingress]; in.packets != kernel.RxPackets || in.bytes != kernel.RxBytes {
		t.Errorf("ingress: store %+v, interface %d packets %d bytes", in, kernel.RxPackets, kernel.RxBytes)
	}
	if out := got[flow.Egress]; out.packets != kernel.TxPackets || out.bytes != kernel.TxBytes {
		t.Errorf("egress: store %+v, interface %d packets %d bytes", out, kernel.TxPackets, kernel.TxBytes)
	}
	if !a.logged("store write failed") || !a.logged("store writable again") {
		t.Errorf("the outage and the recovery were not logged")
	}
}
