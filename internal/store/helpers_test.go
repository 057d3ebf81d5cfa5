package store_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
	"loupe/internal/tunnel"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// gen makes n varied records: IPv4, IPv6 (including an IPv4-mapped address
// inside IPv6), non-IP with arbitrary address bytes, all within an hour of
// base, from small address pools so that groups collide.
func gen(rng *rand.Rand, n int, base time.Time) []flow.Record {
	v4 := []string{"10.0.0.1", "10.0.0.2", "10.0.1.7", "10.1.2.3", "192.168.1.10", "192.168.1.11", "172.16.5.4", "0.0.0.0"}
	v6 := []string{"2001:db8::1", "2001:db8::2", "2001:db8:1::5", "fd00::1", "fe80::1", "::ffff:10.0.0.1", "::"}
	ifaces := []string{"eth0", "eth1", "", "wlan0", "véth-ü"}
	ports := []uint16{0, 22, 53, 80, 443, 8080, 51000}
	macs := [][6]byte{{0, 1, 2, 3, 4, 5}, {0xde, 0xad, 0xbe, 0xef, 0, 1}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	pick := func(s []string) [16]byte { return netip.MustParseAddr(s[rng.IntN(len(s))]).As16() }
	recs := make([]flow.Record, n)
	for i := range recs {
		r := &recs[i]
		switch k := rng.IntN(10); {
		case k < 6:
			r.EtherType = flow.EtherTypeIPv4
			r.SrcAddr, r.DstAddr = pick(v4), pick(v4)
			r.Proto = []uint8{6, 6, 17, 1}[rng.IntN(4)]
		case k < 9:
			r.EtherType = flow.EtherTypeIPv6
			r.SrcAddr, r.DstAddr = pick(v6), pick(v6)
			r.Proto = []uint8{6, 17, 58}[rng.IntN(3)]
		default:
			r.EtherType = []uint16{0x0806, 0x88cc, 0}[rng.IntN(3)]
			for j := range r.SrcAddr {
				r.SrcAddr[j], r.DstAddr[j] = byte(rng.IntN(3)), byte(rng.IntN(256))
			}
		}
		r.SrcPort, r.DstPort = ports[rng.IntN(len(ports))], ports[rng.IntN(len(ports))]
		if rng.IntN(4) == 0 {
			r.SrcPort = uint16(rng.IntN(65536))
		}
		r.SrcMAC, r.DstMAC = macs[rng.IntN(len(macs))], macs[rng.IntN(len(macs))]
		if rng.IntN(5) == 0 {
			for j := range r.SrcMAC {
				r.SrcMAC[j] = byte(rng.Uint32())
			}
		}
		r.IfIndex = uint32(rng.IntN(4)) + 1
		r.Direction = flow.Direction(rng.IntN(2))
		r.Iface = ifaces[rng.IntN(len(ifaces))]
		r.Packets = uint64(rng.IntN(1000)) + 1
		r.Bytes = r.Packets * uint64(40+rng.IntN(1460))
		if rng.IntN(50) == 0 {
			r.Bytes = 1 << 40 // big values must add exactly
		}
		// Derived, not drawn: the other fields keep the values they had
		// before these fields existed, which some tests depend on.
		r.Segments = r.Packets * uint64(1+i%3)
		r.WireBytes = r.Bytes + (r.Segments-r.Packets)*66
		if i%3 == 0 {
			r.VlanID = uint16(i*37) % 4096
		}
		first := base.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		r.FirstSeen = first
		r.LastSeen = first.Add(time.Duration(rng.Int64N(int64(time.Minute))))
		if rng.IntN(100) == 0 {
			r.LastSeen = first.Add(-time.Second) // insane, but must still round-trip and filter exactly
		}
		r.Sampling = uint32(rng.IntN(3)) + 1
		r.TCPFlags = uint16(rng.IntN(0x200))
		r.DSCP = uint8(rng.IntN(64))
		// Derived as well: a few records decoded from the sketch, a few
		// estimated, with bounds and confidences that differ.
		switch {
		case i%11 == 5:
			r.Accuracy = flow.Decoded
		case i%13 == 7:
			r.Accuracy = flow.Estimated
			r.MaxErrorPackets, r.MaxErrorBytes = r.Packets/8+uint64(i%5), r.Bytes/8+uint64(i%7)
			r.ErrorConfidence = []float64{-math.Expm1(-4), 0.99, 0.95}[i%3]
		}
		// And a few with kernel signals, DNS or a tunnel, some of whose
		// values are measured zeros.
		if i%17 == 3 {
			r.SetRTT(uint64(i%7)*1000, uint64(i%7)*1000+uint64(i%97)*10_000, uint64(i%7)*1000+5)
			r.SetRetransmits(uint64(i % 4))
		}
		if i%19 == 4 {
			reasons := flow.DropReasons{[]string{"NETFILTER_DROP", "NO_SOCKET", "TC_INGRESS"}[i%3]: uint64(1 + i%5)}
			if i%2 == 0 {
				reasons["TCP_CSUM"] = 2
			}
			var n uint64
			for _, v := range reasons {
				n += v
			}
			r.SetDrops(n, n*60, reasons)
		}
		if i%23 == 6 {
			r.SetDNS(&flow.DNSExchange{ID: uint16(i), QName: []string{"a.test", "nosuch.test", "xn--bcher-kva.test"}[i%3],
				HasRcode: i%2 == 0, Rcode: uint16(i % 4), HasLatency: i%2 == 0, LatencyNs: uint64(i%41) * 1000})
		}
		if i%37 == 11 {
			// The signals of a socket whose egress no hook saw: a record
			// on no interface, with no packets.
			r.IfIndex, r.Iface, r.Direction = 0, "", flow.Egress
			r.Packets, r.Bytes, r.Segments, r.WireBytes = 0, 0, 0, 0
			r.SetRTT(uint64(i)*10, uint64(i)*30, uint64(i)*20)
			r.SetRetransmits(uint64(i % 5))
		}
		if i%29 == 8 {
			r.SetTunnel(&tunnel.Info{Type: tunnel.Type(1 + i%4), ID: uint32(i), HasID: i%4 != 3,
				SrcAddr: netip.MustParseAddr([]string{"10.88.0.1", "fd88::1"}[i%2]), DstAddr: netip.MustParseAddr([]string{"10.88.0.2", "fd88::2"}[i%2]),
				SrcPort: uint16(i), DstPort: 4789})
		}
	}
	return recs
}

func openStore(t *testing.T, dir string, opts store.Options) *store.Store {
	t.Helper()
	s, err := store.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func writeAll(t *testing.T, s *store.Store, recs []flow.Record, batch int) {
	t.Helper()
	for i := 0; i < len(recs); i += batch {
		if err := s.Write(context.Background(), recs[i:min(i+batch, len(recs))]); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
}

func openReader(t *testing.T, dir string) *store.Reader {
	t.Helper()
	r, err := store.OpenReader(dir)
	if err != nil {
		t.Fatalf("OpenReader: %v", err)
	}
	return r
}

func scanAll(t *testing.T, r *store.Reader, q store.Query) []flow.Record {
	t.Helper()
	var out []flow.Record
	if err := r.Scan(context.Background(), q, func(rec *flow.Record) error {
		out = append(out, *rec)
		return nil
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out
}

// recCmp is a total order on records, for comparing multisets.
func recCmp(a, b flow.Record) int {
	return cmp.Or(
		a.FirstSeen.Compare(b.FirstSeen), a.LastSeen.Compare(b.LastSeen),
		slices.Compare(a.SrcAddr[:], b.SrcAddr[:]), slices.Compare(a.DstAddr[:], b.DstAddr[:]),
		cmp.Compare(a.SrcPort, b.SrcPort), cmp.Compare(a.DstPort, b.DstPort),
		cmp.Compare(a.Bytes, b.Bytes), cmp.Compare(a.Packets, b.Packets),
		cmp.Compare(a.Iface, b.Iface), slices.Compare(a.SrcMAC[:], b.SrcMAC[:]), slices.Compare(a.DstMAC[:], b.DstMAC[:]),
		cmp.Compare(a.IfIndex, b.IfIndex), cmp.Compare(a.EtherType, b.EtherType), cmp.Compare(a.Proto, b.Proto),
		cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Sampling, b.Sampling),
		cmp.Compare(a.TCPFlags, b.TCPFlags), cmp.Compare(a.DSCP, b.DSCP),
		cmp.Compare(a.Segments, b.Segments), cmp.Compare(a.WireBytes, b.WireBytes), cmp.Compare(a.VlanID, b.VlanID))
}

func sameRecords(t *testing.T, what string, got, want []flow.Record) {
	t.Helper()
	got, want = slices.Clone(got), slices.Clone(want)
	slices.SortFunc(got, recCmp)
	slices.SortFunc(want, recCmp)
	if len(got) != len(want) {
		t.Fatalf("%s: got %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		// Times must be the same instant; everything else identical.
		if !g.FirstSeen.Equal(w.FirstSeen) || !g.LastSeen.Equal(w.LastSeen) || g.FirstSeen.IsZero() != w.FirstSeen.IsZero() {
			t.Fatalf("%s: record %d times differ:\n got %+v\nwant %+v", what, i, g, w)
		}
		g.FirstSeen, g.LastSeen, w.FirstSeen, w.LastSeen = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: record %d differs:\n got %+v\nwant %+v", what, i, g, w)
		}
	}
}

// matches is the query semantics, written independently of the store.
func matches(r *flow.Record, q store.Query) bool {
	if !q.Until.IsZero() && r.FirstSeen.After(q.Until) {
		return false
	}
	if !q.Since.IsZero() && (r.LastSeen.IsZero() || r.LastSeen.Before(q.Since)) {
		return false
	}
	if q.Src.IsValid() && !q.Src.Contains(r.SrcIP()) {
		return false
	}
	if q.Dst.IsValid() && !q.Dst.Contains(r.DstIP()) {
		return false
	}
	if q.Port != store.Any && int(r.SrcPort) != q.Port && int(r.DstPort) != q.Port {
		return false
	}
	if q.Direction != store.Any && int(r.Direction) != q.Direction {
		return false
	}
	if len(q.Ifaces) > 0 && !slices.ContainsFunc(q.Ifaces, func(g string) bool { ok, _ := path.Match(g, r.Iface); return ok }) {
		return false
	}
	if !matchesMeasured(r, q) {
		return false
	}
	return q.Proto == store.Any || int(r.Proto) == q.Proto
}

// matchesMeasured is Query.MinRTT, Has and Accuracy as they are
// documented.
func matchesMeasured(r *flow.Record, q store.Query) bool {
	if q.MinRTT > 0 && (r.Has&flow.HasRTTMax == 0 || r.RTTMaxNs < uint64(q.MinRTT)) {
		return false
	}
	for _, s := range q.Has {
		ok := false
		switch s {
		case store.SignalRTT:
			ok = r.Has&flow.HasRTTMax != 0
		case store.SignalHandshakeRTT:
			ok = r.Has&flow.HasHandshakeRTT != 0
		case store.SignalRetransmits:
			ok = r.Retransmits > 0
		case store.SignalDrops:
			ok = r.DropPackets > 0
		case store.SignalDNS:
			ok = r.Has&(flow.HasDNSID|flow.HasDNSQName) != 0
		}
		if !ok {
			return false
		}
	}
	return len(q.Accuracy) == 0 || slices.Contains(q.Accuracy, r.Accuracy)
}

func filter(recs []flow.Record, q store.Query) []flow.Record {
	var out []flow.Record
	for i := range recs {
		if matches(&recs[i], q) {
			out = append(out, recs[i])
		}
	}
	return out
}

// bruteTop computes Top by brute force, with its own ordering code: flows
// are distinct flow.Keys, and the service port comes from the SYNs of the
// window as the store documents it (service.go), written here from
// netip.Addr comparisons rather than the store's ids.
func bruteTop(recs []flow.Record, q store.Query, by store.GroupBy, n int) []store.TopEntry {
	return bruteTopBy(recs, q, by, store.SortBytes, n)
}

// bruteSignals adds what r measured to a group's signal sums.
func bruteSignals(s *store.SignalSums, r *flow.Record) {
	if r.Has&flow.HasRTTMin != 0 && (s.Has&flow.HasRTTMin == 0 || r.RTTMinNs < s.RTTMinNs) {
		s.RTTMinNs = r.RTTMinNs
	}
	if r.Has&flow.HasRTTMax != 0 && r.RTTMaxNs > s.RTTMaxNs {
		s.RTTMaxNs = r.RTTMaxNs
	}
	if r.Has&flow.HasDNSLatency != 0 && r.DNSLatencyNs > s.DNSLatencyMaxNs {
		s.DNSLatencyMaxNs = r.DNSLatencyNs
	}
	s.Retransmits += r.Retransmits
	s.DropPackets += r.DropPackets
	s.DropBytes += r.DropBytes
	s.Has |= r.Has & (flow.HasRTTMin | flow.HasRTTMax | flow.HasRetransmits | flow.HasDropPackets | flow.HasDropBytes | flow.HasDNSLatency)
}

// bruteMetric is what a group is ranked by, and whether it has it.
func bruteMetric(e *store.TopEntry, sort store.Sort) (uint64, bool) {
	s := &e.Signals
	switch sort {
	case store.SortRTT:
		return s.RTTMaxNs, s.Has&flow.HasRTTMax != 0
	case store.SortDrops:
		return s.DropPackets, s.Has&flow.HasDropPackets != 0
	case store.SortRetransmits:
		return s.Retransmits, s.Has&flow.HasRetransmits != 0
	case store.SortDNSLatency:
		return s.DNSLatencyMaxNs, s.Has&flow.HasDNSLatency != 0
	}
	return 0, true
}

// bruteTopBy is bruteTop ranked by sort.
func bruteTopBy(recs []flow.Record, q store.Query, by store.GroupBy, sort store.Sort, n int) []store.TopEntry {
	type key struct {
		src, dst netip.Addr
		port     uint16
		proto    uint8
	}
	service := bruteServices(recs, q)
	groups := map[key]*store.TopEntry{}
	flows := map[key]map[flow.Key]bool{}
	for i := range recs {
		r := &recs[i]
		if !matches(r, q) {
			continue
		}
		var k key
		switch by {
		case store.BySrc:
			k.src = r.SrcIP()
		case store.ByDst:
			k.dst = r.DstIP()
		case store.ByPair:
			k.src, k.dst = r.SrcIP(), r.DstIP()
		case store.ByPort:
			k.proto = r.Proto
			if r.PortKind() == flow.TransportPorts {
				k.port = service(r)
			}
		case store.BySrcPort:
			k.port, k.proto = r.SrcPort, r.Proto
		case store.ByDstPort:
			k.port, k.proto = r.DstPort, r.Proto
		}
		e := groups[k]
		if e == nil {
			e = &store.TopEntry{Src: k.src, Dst: k.dst, Port: k.port, Proto: k.proto}
			groups[k] = e
			flows[k] = map[flow.Key]bool{}
		}
		e.Bytes += r.Bytes
		e.Packets += r.Packets
		e.Error.AddRecord(r)
		bruteSignals(&e.Signals, r)
		if r.Packets > 0 || r.Bytes > 0 { // a record of signals alone is no flow
			flows[k][r.Key] = true
		}
	}
	var out []store.TopEntry
	for k, e := range groups {
		e.Flows = uint64(len(flows[k]))
		if _, ok := bruteMetric(e, sort); ok && (sort != store.SortBytes || e.Bytes > 0 || e.Packets > 0) {
			out = append(out, *e)
		}
	}
	slices.SortFunc(out, func(a, b store.TopEntry) int {
		ma, _ := bruteMetric(&a, sort)
		mb, _ := bruteMetric(&b, sort)
		switch {
		case ma != mb:
			return cmp.Compare(mb, ma)
		case a.Bytes != b.Bytes:
			return cmp.Compare(b.Bytes, a.Bytes)
		case a.Packets != b.Packets:
			return cmp.Compare(b.Packets, a.Packets)
		case a.Flows != b.Flows:
			return cmp.Compare(b.Flows, a.Flows)
		case a.Src != b.Src:
			return a.Src.Compare(b.Src)
		case a.Dst != b.Dst:
			return a.Dst.Compare(b.Dst)
		case a.Proto != b.Proto:
			return cmp.Compare(a.Proto, b.Proto)
		}
		return cmp.Compare(a.Port, b.Port)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// bruteServices returns the service port of a record with ports: per TCP
// connection of q's window (whatever q's other filters), the client is the
// side of a SYN without ACK seen in one direction only, else the side
// whose SYN record started first; failing that, the lower port.
func bruteServices(recs []flow.Record, q store.Query) func(r *flow.Record) uint16 {
	type conn struct{ lo, hi netip.AddrPort }
	type side struct {
		first time.Time
		syn   bool
		alone bool
	}
	connOf := func(r *flow.Record) (conn, int) {
		s, d := netip.AddrPortFrom(r.SrcIP(), r.SrcPort), netip.AddrPortFrom(r.DstIP(), r.DstPort)
		if s.Compare(d) <= 0 {
			return conn{s, d}, 0
		}
		return conn{d, s}, 1
	}
	win := store.NewQuery()
	win.Since, win.Until = q.Since, q.Until
	sides := map[conn]*[2]side{}
	for i := range recs {
		r := &recs[i]
		if !matches(r, win) || !r.IsTCP() || r.TCPFlags&flow.TCPSyn == 0 {
			continue
		}
		c, dir := connOf(r)
		if sides[c] == nil {
			sides[c] = &[2]side{}
		}
		sd := &sides[c][dir]
		if !sd.syn || r.FirstSeen.Before(sd.first) {
			sd.first = r.FirstSeen
		}
		sd.syn = true
		sd.alone = sd.alone || r.TCPFlags&flow.TCPAck == 0
	}
	return func(r *flow.Record) uint16 {
		lower := min(r.SrcPort, r.DstPort)
		if !r.IsTCP() {
			return lower
		}
		c, dir := connOf(r)
		sd := sides[c]
		if sd == nil {
			return lower
		}
		client := -1
		switch {
		case sd[0].alone && !sd[1].alone:
			client = 0
		case sd[1].alone && !sd[0].alone:
			client = 1
		case sd[0].syn && sd[1].syn && sd[0].first.Before(sd[1].first):
			client = 0
		case sd[0].syn && sd[1].syn && sd[1].first.Before(sd[0].first):
			client = 1
		}
		switch client {
		case -1:
			return lower
		case dir:
			return r.DstPort
		}
		return r.SrcPort
	}
}

func top(t *testing.T, r *store.Reader, q store.Query, by store.GroupBy, n int) []store.TopEntry {
	t.Helper()
	got, err := r.Top(context.Background(), q, by, n)
	if err != nil {
		t.Fatalf("Top(%v): %v", by, err)
	}
	return got
}

func sameTop(t *testing.T, what string, got, want []store.TopEntry) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %d entries, want %d\n got %v\nwant %v", what, len(got), len(want), head(got), head(want))
	}
}

func head(e []store.TopEntry) string {
	return fmt.Sprint(e[:min(len(e), 5)])
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "seg-*.lseg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// copyDir copies the regular files of src into a new temp directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	des, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		copyFile(t, filepath.Join(src, de.Name()), filepath.Join(dst, de.Name()))
	}
	return dst
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
