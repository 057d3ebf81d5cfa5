package store_test

import (
	"cmp"
	"context"
	"fmt"
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
				if qi == 0 && n == 0 && !hasAccuracies(want) {
					t.Fatalf("%v: the test data gives no group of each accuracy", by)
				}
				got := top(t, r, q, by, n)
				sameTop(t, by.String(), got, want)
				for sort := store.SortRTT; sort <= store.SortDNSLatency; sort++ {
					want := bruteTopBy(recs, q, by, sort, n)
					if qi == 0 && len(want) == 0 {
						t.Fatalf("%v by %v: the test data gives no group with it", by, sort)
					}
					got, err := r.TopBy(context.Background(), q, by, sort, n)
					if err != nil {
						t.Fatal(err)
					}
					sameTop(t, by.String()+" by "+sort.String(), got, want)
				}
			}
		}
	}
	for _, name := range []string{"bytes", "rtt", "drops", "retransmits", "dns_latency"} {
		if o, err := store.ParseSort(name); err != nil || o.String() != name {
			t.Errorf("ParseSort(%q) = %v, %v", name, o, err)
		}
	}
	if _, err := store.ParseSort("latency"); err == nil {
		t.Error("ParseSort(latency): no error")
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

// hasAccuracies reports whether the entries have a group of each
// accuracy, so that comparing them compares error sums too.
func hasAccuracies(es []store.TopEntry) bool {
	seen := map[flow.Accuracy]bool{}
	for _, e := range es {
		seen[e.Error.Accuracy] = true
	}
	return len(seen) == 3
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

// TestTopFlowsLongAndShort: a group's flows are counted once however
// many records and segments they span (long flows), and one by one where
// nearly every record is a flow of its own (short flows); the same Reader
// asked again, its segments' flow ids kept, answers the same.
func TestTopFlowsLongAndShort(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	// Long flows: 40 flows of 60 records each, evicted every 5 s.
	var long []flow.Record
	flows := gen(rng, 40, t0)
	for i := range 60 {
		for _, r := range flows {
			r.FirstSeen = t0.Add(time.Duration(i) * 5 * time.Second)
			r.LastSeen = r.FirstSeen.Add(4 * time.Second)
			r.Packets = uint64(rng.IntN(100)) + 1
			r.Bytes = r.Packets * 100
			long = append(long, r)
		}
	}
	// Short flows: nearly every record a flow of its own.
	short := gen(rng, 3000, t0)
	for i := range short {
		short[i].SrcPort = uint16(i)
	}
	for _, c := range []struct {
		name string
		recs []flow.Record
	}{{"long flows", long}, {"short flows", short}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, store.Options{NoBackground: true})
			defer s.Close()
			writeAll(t, s, c.recs, 250)
			r := openReader(t, dir)
			for range 2 {
				for _, by := range allGroupings {
					for _, n := range []int{0, 1, 5} {
						sameTop(t, fmt.Sprintf("%v, n %d", by, n), top(t, r, store.NewQuery(), by, n), bruteTop(c.recs, store.NewQuery(), by, n))
					}
				}
			}
		})
	}
}

// TestTopFirstAndWarm: each grouping's first counted query of a Reader,
// which finds no flow ids yet (BySrcPort and ByDstPort then count in a
// flow pass of their own), and the same query again, warm (they count as
// they sum, with the ids the first gave), give the brute force's answer.
// As do the sums per address a segment keeps, read by the next query
// whatever grouping made them.
func TestTopFirstAndWarm(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	recs := gen(rand.New(rand.NewPCG(13, 14)), 6000, t0)
	writeAll(t, s, recs, 700)
	window := store.NewQuery()
	window.Since, window.Until = t0.Add(10*time.Minute), t0.Add(40*time.Minute)
	for _, q := range []store.Query{store.NewQuery(), window} {
		for _, by := range allGroupings {
			r := openReader(t, dir)
			want := bruteTop(recs, q, by, 5)
			for _, run := range []string{"first", "warm"} {
				sameTop(t, fmt.Sprintf("%v %s, since %v", by, run, q.Since), top(t, r, q, by, 5), want)
			}
			for _, other := range allGroupings {
				sameTop(t, fmt.Sprintf("%v after %v, since %v", other, by, q.Since), top(t, r, q, other, 5), bruteTop(recs, q, other, 5))
			}
		}
	}
}

// TestTopPairs: ByPair sums only the pairs whose source and destination
// totals reach a floor taken from the biggest records; a pair made of
// many small records must still outrank pairs with bigger single records,
// and pairs tied at the n-th place must come out as the brute force has
// them.
func TestTopPairs(t *testing.T) {
	rec := func(src, dst string, bytes uint64, at time.Duration) flow.Record {
		r := tcpRec(src, dst, 40000, 443, flow.TCPAck, t0.Add(at), bytes)
		r.Packets = bytes / 50
		return r
	}
	recs := []flow.Record{
		rec("10.0.0.1", "10.0.0.2", 1000, 0), // the biggest record
		rec("10.0.0.3", "10.0.0.4", 900, 0),
		rec("10.0.0.5", "10.0.0.4", 800, 0),
		rec("10.0.0.7", "10.0.0.8", 700, 0), // a tie, both ways
		rec("10.0.0.8", "10.0.0.7", 700, 0),
	}
	for i := range 100 { // 5000 bytes in small records
		recs = append(recs, rec("10.0.0.5", "10.0.0.6", 50, time.Duration(i)*time.Second))
	}
	for i := range 50 { // noise: a pair each
		recs = append(recs, rec("10.0.1."+strconv.Itoa(i), "10.0.2."+strconv.Itoa(i), 100, 0))
	}
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	writeAll(t, s, recs, 40)
	samePairs(t, openReader(t, dir), recs, 8, 0, "10.0.0.5", 5000)
}

// samePairs checks Top by pair against the brute force for n up to ns
// (excluded), and that the pair at place at, where there is one, is from
// src with bytes. Each round of the pair pass sums in its dense matrix
// (the default here) and, bounded to one cell, in the hash table; both
// without a filter and with one that every record of these passes, so
// that it is tested per record.
func samePairs(t *testing.T, r *store.Reader, recs []flow.Record, ns, at int, src string, bytes uint64) {
	t.Helper()
	filtered := store.NewQuery()
	filtered.Proto = flow.ProtoTCP
	for _, q := range []store.Query{store.NewQuery(), filtered} {
		for _, cells := range []int{0, 1} {
			for n := range ns {
				got, err := r.TopPairCells(context.Background(), q, n, cells)
				if err != nil {
					t.Fatal(err)
				}
				want := bruteTop(recs, q, store.ByPair, n)
				what := fmt.Sprintf("proto %d, cells %d, n %d", q.Proto, cells, n)
				sameTop(t, what, got, want)
				if n > at && (got[at].Src != netip.MustParseAddr(src) || got[at].Bytes != bytes) {
					t.Fatalf("%s: pair %d %+v, want from %s with %d bytes", what, at, got[at], src, bytes)
				}
			}
		}
	}
}

// TestTopPairsRaisedFloor: ByPair reads the segments in rounds and raises
// its floor to the n-th biggest pair summed so far. The biggest segment,
// read first, holds most of one pair's records; the pair that beats it
// comes in the small segments after, and the first pair's last records
// too: both must be summed whole, ahead of pairs whose ends reach the
// first floor only.
func TestTopPairsRaisedFloor(t *testing.T) {
	rec := func(src, dst string, at time.Duration) flow.Record {
		return tcpRec(src, dst, 40000, 443, flow.TCPAck, t0.Add(at), 100)
	}
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	var recs []flow.Record
	first := []flow.Record{}
	for i := range 50 {
		first = append(first, rec("10.0.0.1", "10.0.0.2", time.Duration(i)*time.Second))
	}
	for i := range 10 {
		first = append(first, rec("10.0.3."+strconv.Itoa(i), "10.0.0.2", 0))
	}
	writeAll(t, s, first, len(first))
	recs = append(recs, first...)
	for w := range 19 {
		var batch []flow.Record
		for i := range 10 {
			batch = append(batch, rec("10.0.0.3", "10.0.0.4", time.Duration(w*10+i)*time.Second))
		}
		batch = append(batch, rec("10.0.0.1", "10.0.0.2", time.Minute+time.Duration(w)*time.Second))
		// Pairs whose ends are busy, each small.
		batch = append(batch, rec("10.0.0.3", "10.0.0.2", time.Duration(w)*time.Second), rec("10.0.0.1", "10.0.0.4", time.Duration(w)*time.Second))
		writeAll(t, s, batch, len(batch))
		recs = append(recs, batch...)
	}
	samePairs(t, openReader(t, dir), recs, 5, 1, "10.0.0.1", 6900)
}

// TestTopUncounted: TopUncounted is Top's groups and sums, without flows,
// ties in bytes and packets broken by the group key alone.
func TestTopUncounted(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	rng := rand.New(rand.NewPCG(41, 42))
	recs := gen(rng, 8000, t0)
	writeAll(t, s, recs, 1000)
	r := openReader(t, dir)
	q := store.NewQuery()
	q.Since, q.Until = t0.Add(10*time.Minute), t0.Add(50*time.Minute)
	for _, q := range []store.Query{store.NewQuery(), q} {
		for _, by := range allGroupings {
			all := bruteTop(recs, q, by, 0)
			for i := range all {
				all[i].Flows = 0
			}
			slices.SortStableFunc(all, func(a, b store.TopEntry) int {
				return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(b.Packets, a.Packets), a.Src.Compare(b.Src), a.Dst.Compare(b.Dst),
					cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
			})
			for _, n := range []int{0, 1, 10, 300} {
				got, err := r.TopUncounted(context.Background(), q, by, n)
				if err != nil {
					t.Fatal(err)
				}
				want := all
				if n > 0 && len(want) > n {
					want = want[:n]
				}
				sameTop(t, fmt.Sprintf("uncounted %v, n %d", by, n), got, want)
			}
		}
		// Several groupings at once, src and dst from pair's first pass:
		// each the answer of its own.
		for _, bys := range [][]store.GroupBy{{store.BySrc, store.ByDst, store.ByPair, store.ByPort}, {store.ByPair, store.ByDst}, {store.BySrc}, {store.ByDst, store.ByDst, store.ByPair}} {
			for _, n := range []int{0, 1, 10} {
				many, err := r.TopUncountedMany(context.Background(), q, bys, n)
				if err != nil {
					t.Fatal(err)
				}
				if len(many) != len(bys) {
					t.Fatalf("%v: %d answers", bys, len(many))
				}
				for i, by := range bys {
					want, err := r.TopUncounted(context.Background(), q, by, n)
					if err != nil {
						t.Fatal(err)
					}
					if len(want) == 0 {
						t.Fatalf("%v: no groups", by)
					}
					sameTop(t, fmt.Sprintf("many %v: %v, n %d", bys, by, n), many[i], want)
				}
			}
		}
	}
}
