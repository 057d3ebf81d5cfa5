package store_test

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// bruteOrder sorts records as Select documents it, with its own code:
// counters and times descending, the others ascending, ties by the newest
// last_seen (first_seen for last_seen itself), then storage order (the
// index in recs, written in order without compaction).
func bruteOrder(recs []flow.Record, q store.Query, order string, limit int) []flow.Record {
	type row struct {
		r   flow.Record
		idx int
	}
	var rows []row
	for i := range recs {
		if matches(&recs[i], q) {
			rows = append(rows, row{recs[i], i})
		}
	}
	service := func(r *flow.Record) uint16 {
		if r.PortKind() != flow.TransportPorts {
			return 0
		}
		if r.IsTCP() && r.TCPFlags&flow.TCPSyn != 0 && r.TCPFlags&flow.TCPAck == 0 {
			return r.DstPort
		}
		return min(r.SrcPort, r.DstPort)
	}
	desc := func(a, b uint64) int { return cmp.Compare(b, a) }
	// measured: the records that measured the field first, largest
	// first, then those that did not.
	measured := func(a, b *flow.Record, bit flow.Presence, v func(*flow.Record) uint64) int {
		ha, hb := a.Has&bit != 0, b.Has&bit != 0
		if ha != hb {
			if ha {
				return -1
			}
			return 1
		}
		return desc(v(a), v(b))
	}
	key := func(a, b *flow.Record) int {
		switch order {
		case "last_seen":
			return b.LastSeen.Compare(a.LastSeen)
		case "first_seen":
			return b.FirstSeen.Compare(a.FirstSeen)
		case "bytes":
			return desc(a.Bytes, b.Bytes)
		case "packets":
			return desc(a.Packets, b.Packets)
		case "segments":
			return desc(a.Segments, b.Segments)
		case "wire_bytes":
			return desc(a.WireBytes, b.WireBytes)
		case "src":
			return a.SrcIP().Compare(b.SrcIP())
		case "dst":
			return a.DstIP().Compare(b.DstIP())
		case "port":
			return cmp.Compare(service(a), service(b))
		case "src_port":
			return cmp.Compare(a.SrcPort, b.SrcPort)
		case "dst_port":
			return cmp.Compare(a.DstPort, b.DstPort)
		case "proto":
			return cmp.Compare(a.Proto, b.Proto)
		case "vlan_id":
			return cmp.Compare(a.VlanID, b.VlanID)
		case "iface":
			return cmp.Compare(a.Iface, b.Iface)
		case "direction":
			return cmp.Compare(a.Direction, b.Direction)
		case "rtt":
			return measured(a, b, flow.HasRTTMax, func(r *flow.Record) uint64 { return r.RTTMaxNs })
		case "handshake_rtt":
			return measured(a, b, flow.HasHandshakeRTT, func(r *flow.Record) uint64 { return r.HandshakeRTTNs })
		case "retransmits":
			return measured(a, b, flow.HasRetransmits, func(r *flow.Record) uint64 { return r.Retransmits })
		case "drops":
			return measured(a, b, flow.HasDropPackets, func(r *flow.Record) uint64 { return r.DropPackets })
		case "dns_latency":
			return measured(a, b, flow.HasDNSLatency, func(r *flow.Record) uint64 { return r.DNSLatencyNs })
		case "accuracy":
			return cmp.Compare(a.Accuracy, b.Accuracy)
		}
		panic(order)
	}
	slices.SortFunc(rows, func(a, b row) int {
		tie := b.r.LastSeen.Compare(a.r.LastSeen)
		if order == "last_seen" {
			tie = b.r.FirstSeen.Compare(a.r.FirstSeen)
		}
		return cmp.Or(key(&a.r, &b.r), tie, cmp.Compare(a.idx, b.idx))
	})
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	out := make([]flow.Record, len(rows))
	for i := range rows {
		out[i] = rows[i].r
	}
	return out
}

func selectAll(t *testing.T, r *store.Reader, q store.Query, order string, limit int) []flow.Record {
	t.Helper()
	o, err := store.ParseOrder(order)
	if err != nil {
		t.Fatal(err)
	}
	var out []flow.Record
	if err := r.Select(context.Background(), q, o, limit, func(rec *flow.Record) error {
		out = append(out, *rec)
		return nil
	}); err != nil {
		t.Fatalf("Select(%s, %d): %v", order, limit, err)
	}
	return out
}

// sameSequence compares records in order: times as instants, the rest
// exactly.
func sameSequence(t *testing.T, what string, got, want []flow.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if !g.FirstSeen.Equal(w.FirstSeen) || !g.LastSeen.Equal(w.LastSeen) {
			t.Fatalf("%s: record %d times differ:\n got %+v\nwant %+v", what, i, g, w)
		}
		g.FirstSeen, g.LastSeen, w.FirstSeen, w.LastSeen = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: record %d differs:\n got %+v\nwant %+v", what, i, g, w)
		}
	}
}

func TestSelectMatchesBruteForce(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	rng := rand.New(rand.NewPCG(31, 32))
	recs := gen(rng, 6000, t0)
	// Equal keys, so that the ties decide.
	for i := 0; i < len(recs); i += 7 {
		recs[i].Bytes, recs[i].Packets, recs[i].LastSeen = 1500, 3, t0.Add(30*time.Minute)
	}
	writeAll(t, s, recs, 700) // no compaction: storage order is recs' order
	r := openReader(t, dir)
	queries := map[string]store.Query{"all": store.NewQuery()}
	q := store.NewQuery()
	q.Since, q.Until = t0.Add(10*time.Minute), t0.Add(40*time.Minute)
	queries["window"] = q
	q = store.NewQuery()
	q.Src, q.Proto, q.Direction, q.Ifaces = netip.MustParsePrefix("10.0.0.0/8"), 6, int(flow.Egress), []string{"eth*"}
	queries["filtered"] = q
	q = store.NewQuery()
	q.Has, q.Accuracy = []store.Signal{store.SignalRetransmits}, []flow.Accuracy{flow.Exact, flow.Estimated}
	queries["retransmits"] = q
	q = store.NewQuery()
	q.MinRTT, q.Has = 300*time.Microsecond, []store.Signal{store.SignalDNS}
	queries["rtt and dns"] = q
	q = store.NewQuery()
	q.Has, q.Accuracy = []store.Signal{store.SignalDrops}, []flow.Accuracy{flow.Decoded}
	queries["drops decoded"] = q
	for name, q := range queries {
		if len(bruteOrder(recs, q, "last_seen", 0)) == 0 {
			t.Fatalf("%s: no record matches: the case tests nothing", name)
		}
		for _, order := range store.OrderNames() {
			for _, limit := range []int{0, 1, 10, 50, 100000} {
				want := bruteOrder(recs, q, order, limit)
				var rep store.Report
				q.Report = &rep
				got := selectAll(t, r, q, order, limit)
				sameSequence(t, name+"/"+order, got, want)
				if all := bruteOrder(recs, q, order, 0); rep.Matched != uint64(len(all)) {
					t.Fatalf("%s/%s/%d: Matched %d, want %d", name, order, limit, rep.Matched, len(all))
				}
			}
		}
	}
	if _, err := store.ParseOrder("colour"); err == nil {
		t.Error("ParseOrder(colour): no error")
	}
	for _, alias := range []string{"src_addr", "dst_addr"} {
		if _, err := store.ParseOrder(alias); err != nil {
			t.Errorf("ParseOrder(%s): %v", alias, err)
		}
	}
}

// TestSelectAfterCompaction: merged segments answer like the batches they
// replaced, and an error from the callback stops Select.
func TestSelectAfterCompaction(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true, CompactFanIn: 3, CompactMaxSpan: 24 * time.Hour})
	defer s.Close()
	recs := gen(rand.New(rand.NewPCG(33, 34)), 5000, t0)
	for i := range recs {
		recs[i].LastSeen = recs[i].FirstSeen.Add(time.Duration(i) * time.Millisecond) // distinct: no ties
		recs[i].Bytes = uint64(i) + 1
	}
	writeAll(t, s, recs, 250)
	if err := s.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(segFiles(t, dir)); n >= 20 {
		t.Fatalf("%d segments: no compaction", n)
	}
	r := openReader(t, dir)
	for _, order := range []string{"last_seen", "bytes"} {
		sameSequence(t, order, selectAll(t, r, store.NewQuery(), order, 50), bruteOrder(recs, store.NewQuery(), order, 50))
	}
	stop := errors.New("stop")
	n := 0
	err := r.Select(context.Background(), store.NewQuery(), store.NewestFirst(), 0, func(*flow.Record) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Fatalf("Select after the callback's error: %v, %d records", err, n)
	}
}
