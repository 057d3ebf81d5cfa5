package store_test

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

var allGroupings = []store.GroupBy{store.BySrc, store.ByDst, store.ByPair, store.ByPort, store.BySrcPort, store.ByDstPort}

func TestTopMatchesBruteForce(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	recs := gen(rng, 20000, t0)
	// Ties: groups with identical totals must still come out in a fixed
	// order. Each of these records is a group of its own in every grouping
	// (addresses and ports the generator never uses), with equal totals.
	tie := gen(rng, 40, t0)
	for i := range tie {
		tie[i].Bytes, tie[i].Packets = 777, 7
		tie[i].SrcAddr = netip.AddrFrom4([4]byte{172, 31, byte(i % 3), byte(i)}).As16()
		tie[i].DstAddr = netip.AddrFrom4([4]byte{172, 30, 0, byte(39 - i)}).As16()
		if i%2 == 1 {
			tie[i].SrcAddr = netip.MustParseAddr("2001:db8:ffff::" + strconv.Itoa(i)).As16()
		}
		tie[i].EtherType, tie[i].Proto, tie[i].DstPort = flow.EtherTypeIPv4, uint8(6+11*(i%2)), uint16(40000+i/2)
	}
	recs = append(recs, tie...)
	writeAll(t, s, recs, 1500)
	r := openReader(t, dir)
	queries := []store.Query{store.NewQuery()}
	q := store.NewQuery()
	q.Since, q.Until = t0.Add(15*time.Minute), t0.Add(45*time.Minute)
	queries = append(queries, q)
	q = store.NewQuery()
	q.Src, q.Proto = netip.MustParsePrefix("10.0.0.0/8"), 6
	queries = append(queries, q)
	q = store.NewQuery()
	q.Dst, q.Port = netip.MustParsePrefix("2001:db8::/32"), 443
	queries = append(queries, q)
	for qi, q := range queries {
		for _, by := range allGroupings {
			for _, n := range []int{0, 1, 3, 10, 1000} {
				want := bruteTop(recs, q, by, n)
				if len(want) == 0 {
					t.Fatalf("query %d/%v: test data gives no groups", qi, by)
				}
				got := top(t, r, q, by, n)
				sameTop(t, by.String(), got, want)
			}
		}
	}
	for _, name := range []string{"src", "dst", "pair", "port", "src-port", "dst-port"} {
		if g, err := store.ParseGroupBy(name); err != nil || g.String() != name {
			t.Errorf("ParseGroupBy(%q) = %v, %v", name, g, err)
		}
	}
	if _, err := store.ParseGroupBy("proto"); err == nil {
		t.Error("ParseGroupBy(proto): no error")
	}
}

// tcpRec is one record of a TCP flow from src to dst.
func tcpRec(src, dst string, sport, dport uint16, flags uint16, first time.Time, bytes uint64) flow.Record {
	return flow.Record{
		Key: flow.Key{SrcAddr: netip.MustParseAddr(src).As16(), DstAddr: netip.MustParseAddr(dst).As16(),
			SrcPort: sport, DstPort: dport, Proto: flow.ProtoTCP, EtherType: flow.EtherTypeIPv4, IfIndex: 2, Direction: flow.Egress},
		Iface: "eth0", Packets: bytes / 100, Bytes: bytes, TCPFlags: flags, FirstSeen: first, LastSeen: first.Add(4 * time.Second), Sampling: 1,
	}
}

// TestTopCountsDistinctFlows: a flow exported over many evictions is one
// flow; every field of the key makes another.
func TestTopCountsDistinctFlows(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	var recs []flow.Record
	// One hour of one connection, evicted every 5 s: 720 records each way.
	for i := range 720 {
		at := t0.Add(time.Duration(i) * 5 * time.Second)
		recs = append(recs, tcpRec("10.0.0.1", "10.0.0.2", 40000, 443, flow.TCPAck, at, 1000))
		recs = append(recs, tcpRec("10.0.0.2", "10.0.0.1", 443, 40000, flow.TCPAck, at, 100))
	}
	// The same 5-tuple on another interface, in another direction, with
	// other MACs, in a VLAN: each is a flow of its own.
	other := tcpRec("10.0.0.1", "10.0.0.2", 40000, 443, flow.TCPAck, t0, 7)
	for _, change := range []func(r *flow.Record){
		func(r *flow.Record) { r.IfIndex = 3 },
		func(r *flow.Record) { r.Direction = flow.Ingress },
		func(r *flow.Record) { r.SrcMAC[5] = 1 },
		func(r *flow.Record) { r.DstMAC[0] = 2 },
		func(r *flow.Record) { r.VlanID = 100 },
	} {
		r := other
		change(&r)
		recs = append(recs, r)
	}
	writeAll(t, s, recs, 97)
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := openReader(t, dir)
	got := top(t, r, store.NewQuery(), store.ByPair, 0)
	// The VLAN is a flow of its own only where the store keeps it.
	want := uint64(1 + 5)
	back := scanAll(t, r, store.NewQuery())
	if !slices.ContainsFunc(back, func(r flow.Record) bool { return r.VlanID == 100 }) {
		want--
	}
	if len(got) != 2 || got[0].Flows != want || got[0].Packets != 720*10 || got[1].Flows != 1 || got[1].Packets != 720 {
		t.Fatalf("top --by pair: %+v, want 10.0.0.1->10.0.0.2 with %d flows and 7200 packets, the reply with 1 flow and 720", got, want)
	}
	for _, by := range allGroupings {
		sameTop(t, by.String(), top(t, r, store.NewQuery(), by, 0), bruteTop(back, store.NewQuery(), by, 0))
	}
}

// TestTopServicePort: --by port groups both directions of a connection
// under the port of the side that accepted it, from its SYNs, for every
// record of the connection in the window.
func TestTopServicePort(t *testing.T) {
	const (
		syn    = flow.TCPSyn
		synAck = flow.TCPSyn | flow.TCPAck
		data   = flow.TCPAck | flow.TCPPsh
	)
	ms := time.Millisecond
	cases := []struct {
		name string
		recs []flow.Record
		q    func(q *store.Query)
		want uint16 // the one service port of every record
	}{{
		// The server's port is above the client's: the lower port is wrong.
		name: "client to a high port, SYNs both ways",
		recs: []flow.Record{
			tcpRec("10.0.0.1", "10.0.0.2", 1000, 8443, synAck|flow.TCPPsh, t0, 5000), // union: SYN, ACK, PSH
			tcpRec("10.0.0.2", "10.0.0.1", 8443, 1000, synAck, t0.Add(ms), 300000),   // the SYN+ACK came later
			tcpRec("10.0.0.1", "10.0.0.2", 1000, 8443, data, t0.Add(5*time.Second), 5000),
			tcpRec("10.0.0.2", "10.0.0.1", 8443, 1000, data, t0.Add(5*time.Second), 900000),
		},
		want: 8443,
	}, {
		name: "server records first in the store",
		recs: []flow.Record{
			tcpRec("10.0.0.2", "10.0.0.1", 8443, 1000, synAck, t0.Add(ms), 300000),
			tcpRec("10.0.0.1", "10.0.0.2", 1000, 8443, synAck, t0, 5000),
		},
		want: 8443,
	}, {
		name: "a lone SYN to a high port that never answered",
		recs: []flow.Record{
			tcpRec("10.0.0.1", "10.0.0.2", 50000, 60000, syn, t0, 180),
			tcpRec("10.0.0.1", "10.0.0.2", 50000, 60000, syn, t0.Add(5*time.Second), 120),
		},
		want: 60000,
	}, {
		name: "SYN alone one way beats an earlier SYN+ACK record the other way",
		recs: []flow.Record{
			tcpRec("10.0.0.2", "10.0.0.1", 7000, 2000, synAck, t0, 100),
			tcpRec("10.0.0.1", "10.0.0.2", 2000, 7000, syn, t0.Add(ms), 100),
		},
		want: 7000,
	}, {
		name: "no SYN in the window: the lower port",
		recs: []flow.Record{
			tcpRec("10.0.0.1", "10.0.0.2", 1000, 8443, synAck, t0, 5000),
			tcpRec("10.0.0.2", "10.0.0.1", 8443, 1000, synAck, t0.Add(ms), 300000),
			tcpRec("10.0.0.1", "10.0.0.2", 1000, 8443, data, t0.Add(time.Hour), 5000),
			tcpRec("10.0.0.2", "10.0.0.1", 8443, 1000, data, t0.Add(time.Hour), 900000),
		},
		q:    func(q *store.Query) { q.Since = t0.Add(30 * time.Minute) },
		want: 1000,
	}, {
		name: "a SYN record one way only, with ACK: the lower port",
		recs: []flow.Record{
			tcpRec("10.0.0.1", "10.0.0.2", 1000, 8443, synAck, t0, 5000),
			tcpRec("10.0.0.2", "10.0.0.1", 8443, 1000, data, t0.Add(5*time.Second), 5000),
		},
		want: 1000,
	}, {
		name: "the replies filtered out still say who answered",
		recs: []flow.Record{
			tcpRec("10.0.0.1", "10.0.0.2", 1000, 8443, synAck, t0, 5000),
			tcpRec("10.0.0.2", "10.0.0.1", 8443, 1000, synAck, t0.Add(ms), 300000),
		},
		q:    func(q *store.Query) { q.Src = netip.MustParsePrefix("10.0.0.1/32") },
		want: 8443,
	}, {
		name: "UDP: the lower port",
		recs: func() []flow.Record {
			a := tcpRec("10.0.0.1", "10.0.0.53", 40000, 53, 0, t0, 80)
			b := tcpRec("10.0.0.53", "10.0.0.1", 53, 40000, 0, t0, 200)
			a.Proto, b.Proto = flow.ProtoUDP, flow.ProtoUDP
			return []flow.Record{a, b}
		}(),
		want: 53,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, store.Options{NoBackground: true})
			defer s.Close()
			writeAll(t, s, c.recs, 1)
			r := openReader(t, dir)
			q := store.NewQuery()
			if c.q != nil {
				c.q(&q)
			}
			got := top(t, r, q, store.ByPort, 0)
			var want store.TopEntry
			keys := map[flow.Key]bool{}
			for i := range c.recs {
				if matches(&c.recs[i], q) {
					want.Bytes += c.recs[i].Bytes
					want.Packets += c.recs[i].Packets
					want.Proto = c.recs[i].Proto
					keys[c.recs[i].Key] = true
				}
			}
			want.Port, want.Flows = c.want, uint64(len(keys))
			if len(got) != 1 || got[0] != want {
				t.Fatalf("top --by port: %+v, want %+v", got, want)
			}
			sameTop(t, "brute force", got, bruteTop(c.recs, q, store.ByPort, 0))
			// The explicit groupings keep each record's own port.
			src := top(t, r, q, store.BySrcPort, 0)
			sameTop(t, "src-port", src, bruteTop(c.recs, q, store.BySrcPort, 0))
			sameTop(t, "dst-port", top(t, r, q, store.ByDstPort, 0), bruteTop(c.recs, q, store.ByDstPort, 0))
		})
	}
}
