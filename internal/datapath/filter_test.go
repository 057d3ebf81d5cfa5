package datapath

import (
	"bytes"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"loupe/internal/flow"
	"loupe/internal/pcapfilter"
	"loupe/internal/testutil"
)

// TestCaptureFilter runs the entry program with a filter in its tail-call
// slots: the matching frames, and only those, come out whole, with their
// direction and length; a snap length cuts them; an interface list
// excludes others; removing the filter stops it; flows counts every frame
// throughout.
func TestCaptureFilter(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp := loadForTest(t, Options{FlowBudget: 64, RingBufSize: 1 << 16, Capabilities: []string{"flows", "capture"}})
	r, err := dp.OpenFilteredPackets(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	web := tcpSeg(t, "", 1, []byte("GET / HTTP/1.1\r\n\r\n")) // port 80 -> 40000
	ssh := frame(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP),
		&layers.TCP{SrcPort: 22, DstPort: 40001, Seq: 1, ACK: true, Window: 512}, gopacket.Payload("x"))
	dns := udpFrame(t, 53, 100)

	run := func(frames ...[]byte) {
		for i, f := range frames {
			dir := flow.Ingress
			if i%2 == 1 {
				dir = flow.Egress
			}
			runProg(t, dp, dir, f)
		}
	}
	f, err := pcapfilter.Compile("tcp port 80 or udp")
	if err != nil {
		t.Fatal(err)
	}
	if err := dp.InstallCaptureFilter(f, FilterOptions{}); err != nil {
		t.Fatal(err)
	}
	run(web, ssh, dns, web)
	got := capturedPackets(t, r)
	want := []struct {
		frame []byte
		dir   flow.Direction
	}{{web, flow.Ingress}, {dns, flow.Ingress}, {web, flow.Egress}}
	if len(got) != len(want) {
		t.Fatalf("%d packets, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if !bytes.Equal(g.Data, w.frame) || g.Len != uint32(len(w.frame)) || g.Direction != w.dir || !g.Filtered || g.Kept {
			t.Errorf("packet %d: %+v, want %d bytes %v", i, g, len(w.frame), w.dir)
		}
	}

	// A snap length, and an interface the test packets do not cross.
	if err := dp.InstallCaptureFilter(f, FilterOptions{Snaplen: 20}); err != nil {
		t.Fatal(err)
	}
	run(web)
	if got := capturedPackets(t, r); len(got) != 1 || len(got[0].Data) != 20 || got[0].Len != uint32(len(web)) {
		t.Errorf("snaplen 20: %+v", got)
	}
	if err := dp.InstallCaptureFilter(f, FilterOptions{Ifindexes: []uint32{12345}}); err != nil {
		t.Fatal(err)
	}
	run(web)
	if got := capturedPackets(t, r); len(got) != 0 {
		t.Errorf("another interface's capture got %d packets", len(got))
	}

	if err := dp.RemoveCaptureFilter(); err != nil {
		t.Fatal(err)
	}
	run(web, dns)
	if got := capturedPackets(t, r); len(got) != 0 {
		t.Errorf("after removal: %d packets", len(got))
	}
	var pk uint64
	for _, d := range drainAll(t, dp) {
		pk += d.stats.Packets
	}
	if pk != 4+1+1+2 {
		t.Errorf("flows counted %d packets, want 8", pk)
	}
}

// TestCaptureFilterNeedsCapture: with the capture capability off, a filter
// has nowhere to run, and says so.
func TestCaptureFilterNeedsCapture(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp := loadForTest(t, Options{FlowBudget: 64, RingBufSize: 1 << 16, Capabilities: []string{"flows"}})
	f, _ := pcapfilter.Compile("tcp")
	if err := dp.InstallCaptureFilter(f, FilterOptions{}); err == nil {
		t.Fatal("a filter installed with the capture capability off")
	}
}

// TestCaptureAdmission: a rule whose candidates a pcap filter decides fires
// only on the connections whose first packet the filter matched; another
// rule without a filter is not held back; an on-demand capture still runs
// behind the admission program.
func TestCaptureAdmission(t *testing.T) {
	testutil.RequirePrivileged(t)
	onOneCPU(t)
	dp, events, _ := openCapture(t, CaptureSizes{Connections: 64, KeepPackets: 4, KeepSlotsPerCPU: 16, KeepSnap: MaxKeepSnap},
		CaptureConfig{})
	f, err := pcapfilter.Compile("tcp port 41234")
	if err != nil {
		t.Fatal(err)
	}
	var filters [MaxRules]*pcapfilter.Filter
	filters[0] = f
	if err := dp.InstallAdmission(filters); err != nil {
		t.Fatal(err)
	}
	rules := []Rule{
		{Kind: RuleHTTPStatus, StatusLo: 500, StatusHi: 599, Sample: 1},
		{Kind: RuleHTTPStatus, StatusLo: 404, StatusHi: 404, Sample: 1},
	}
	if err := dp.SetCaptureConfig(CaptureConfig{Rules: rules, Filters: 1}); err != nil {
		t.Fatal(err)
	}
	od, _ := pcapfilter.Compile("tcp port 41235")
	if err := dp.InstallCaptureFilter(od, FilterOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := dp.OpenFilteredPackets(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	exchange := func(port uint16, answer string) {
		c := capConn{port: port}
		runProg(t, dp, flow.Egress, c.frame(t, true, 1, false, []byte(request)))
		runProg(t, dp, flow.Ingress, c.frame(t, false, 1, false, []byte(answer)))
	}
	exchange(41234, failure)                          // the filter admits it: fires
	exchange(41235, failure)                          // not admitted to rule 0
	exchange(41236, "HTTP/1.1 404 Not Found\r\n\r\n") // rule 1 has no filter: fires
	got := events()
	if len(got) != 2 || got[0].Key.DstPort != 41234 || got[0].Status != 500 || got[1].Key.DstPort != 41236 || got[1].Rule != 1 {
		t.Fatalf("events %+v: want a 500 on port 41234 and a 404 on 41236", got)
	}
	if n := len(capturedPackets(t, r)); n != 2 {
		t.Errorf("the on-demand capture behind the admission program got %d packets, want 2", n)
	}
	if err := dp.RemoveAdmission(); err != nil {
		t.Fatal(err)
	}
}
