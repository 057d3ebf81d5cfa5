package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
	"loupe/internal/store"
)

func TestRoundTripEveryField(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	rng := rand.New(rand.NewPCG(1, 2))
	recs := gen(rng, 3000, t0)
	// Hand-made edge cases: every field at its extremes.
	recs = append(recs,
		flow.Record{
			Key: flow.Key{
				SrcAddr: netip.MustParseAddr("255.255.255.255").As16(), DstAddr: netip.MustParseAddr("1.2.3.4").As16(),
				SrcMAC: [6]byte{1, 2, 3, 4, 5, 6}, DstMAC: [6]byte{0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0xfa},
				IfIndex: ^uint32(0), EtherType: flow.EtherTypeIPv4, SrcPort: 65535, DstPort: 1, Proto: 255, Direction: flow.Egress,
				VlanID: ^uint16(0),
			},
			Iface: "a-very-long-interface-name-with-ünïcödé", Packets: ^uint64(0), Bytes: ^uint64(0),
			Segments: ^uint64(0), WireBytes: ^uint64(0) - 1,
			FirstSeen: time.Unix(0, 1).UTC(), LastSeen: time.Unix(0, 1<<62+123456789).UTC(),
			Sampling: ^uint32(0), TCPFlags: ^uint16(0), DSCP: 255,
		},
		flow.Record{Key: flow.Key{EtherType: flow.EtherTypeIPv6, SrcAddr: netip.MustParseAddr("ffff::1").As16()},
			FirstSeen: time.Unix(-5, 999).UTC(), LastSeen: time.Unix(2, 3).UTC()},
		flow.Record{}, // zero everything, including zero times
	)
	writeAll(t, s, recs[:1000], 1000)
	writeAll(t, s, recs[1000:], 700)
	r := openReader(t, dir)
	var rep store.Report
	q := store.NewQuery()
	q.Report = &rep
	sameRecords(t, "scan before close", scanAll(t, r, q), recs)
	if rep.Matched != uint64(len(recs)) || rep.Read != rep.Segments || len(rep.Corrupt) != 0 {
		t.Errorf("report %+v", rep)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "scan after close", scanAll(t, r, store.NewQuery()), recs)
	st, err := r.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != uint64(len(recs)) || st.Segments != 4 || st.DiskBytes <= 0 {
		t.Errorf("reader stats %+v", st)
	}
}

func TestFilters(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	recs := gen(rand.New(rand.NewPCG(3, 4)), 5000, t0)
	writeAll(t, s, recs, 400)
	r := openReader(t, dir)
	q := func(f func(*store.Query)) store.Query {
		q := store.NewQuery()
		f(&q)
		return q
	}
	cases := map[string]store.Query{
		"all":            store.NewQuery(),
		"src v4 /24":     q(func(q *store.Query) { q.Src = netip.MustParsePrefix("10.0.0.0/24") }),
		"src v4 /8":      q(func(q *store.Query) { q.Src = netip.MustParsePrefix("10.0.0.0/8") }),
		"src v4 host":    q(func(q *store.Query) { q.Src = netip.MustParsePrefix("10.0.0.1/32") }),
		"src mapped v6":  q(func(q *store.Query) { q.Src = netip.MustParsePrefix("::ffff:10.0.0.1/128") }),
		"dst v6 /32":     q(func(q *store.Query) { q.Dst = netip.MustParsePrefix("2001:db8::/32") }),
		"dst unmasked":   q(func(q *store.Query) { q.Dst = netip.MustParsePrefix("192.168.1.77/24") }),
		"src v6 all":     q(func(q *store.Query) { q.Src = netip.MustParsePrefix("::/0") }),
		"src v4 all":     q(func(q *store.Query) { q.Src = netip.MustParsePrefix("0.0.0.0/0") }),
		"no such prefix": q(func(q *store.Query) { q.Src = netip.MustParsePrefix("8.8.8.0/24") }),
		"port 443":       q(func(q *store.Query) { q.Port = 443 }),
		"port 0":         q(func(q *store.Query) { q.Port = 0 }),
		"proto udp":      q(func(q *store.Query) { q.Proto = 17 }),
		"proto 0":        q(func(q *store.Query) { q.Proto = 0 }),
		"iface eth*":     q(func(q *store.Query) { q.Ifaces = []string{"eth*"} }),
		"iface two":      q(func(q *store.Query) { q.Ifaces = []string{"wlan0", "v?th-*"} }),
		"iface empty":    q(func(q *store.Query) { q.Ifaces = []string{""} }),
		"iface none":     q(func(q *store.Query) { q.Ifaces = []string{"lo"} }),
		"ingress":        q(func(q *store.Query) { q.Direction = int(flow.Ingress) }),
		"egress":         q(func(q *store.Query) { q.Direction = int(flow.Egress) }),
		"since":          q(func(q *store.Query) { q.Since = t0.Add(40 * time.Minute) }),
		"until":          q(func(q *store.Query) { q.Until = t0.Add(10 * time.Minute) }),
		"window":         q(func(q *store.Query) { q.Since, q.Until = t0.Add(20*time.Minute), t0.Add(21*time.Minute) }),
		"instant":        q(func(q *store.Query) { q.Since, q.Until = t0.Add(30*time.Minute), t0.Add(30*time.Minute) }),
		"after all":      q(func(q *store.Query) { q.Since = t0.Add(3 * time.Hour) }),
		"before all":     q(func(q *store.Query) { q.Until = t0.Add(-time.Hour) }),
		"everything": q(func(q *store.Query) {
			q.Since, q.Until = t0.Add(5*time.Minute), t0.Add(50*time.Minute)
			q.Src, q.Dst = netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("10.0.0.0/8")
			q.Port, q.Proto = 80, 6
			q.Ifaces, q.Direction = []string{"eth?", "wlan*"}, int(flow.Egress)
		}),
	}
	for name, q := range cases {
		t.Run(name, func(t *testing.T) {
			want := filter(recs, q)
			if name != "no such prefix" && name != "after all" && name != "before all" && name != "iface none" && len(want) == 0 && name != "everything" {
				t.Fatalf("test data does not exercise %q", name)
			}
			sameRecords(t, name, scanAll(t, r, q), want)
			for _, by := range allGroupings {
				sameTop(t, name+"/"+by.String(), top(t, r, q, by, 0), bruteTop(recs, q, by, 0))
			}
		})
	}
	bad := []store.Query{{Port: 70000, Proto: -1, Direction: -1}, {Port: -1, Proto: 300, Direction: -1}, {Port: -2, Proto: -1, Direction: -1},
		{Port: -1, Proto: -1, Direction: -1, Since: t0, Until: t0.Add(-time.Second)},
		{Port: -1, Proto: -1, Direction: 2}, {Port: -1, Proto: -1, Direction: -1, Ifaces: []string{"eth["}}}
	for _, q := range bad {
		if err := r.Scan(context.Background(), q, func(*flow.Record) error { return nil }); err == nil {
			t.Errorf("Scan(%+v): no error", q)
		}
	}
}

func TestScanStopsOnCallbackError(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	writeAll(t, s, gen(rand.New(rand.NewPCG(5, 6)), 1000, t0), 100)
	stop := errors.New("stop")
	n := 0
	err := openReader(t, dir).Scan(context.Background(), store.NewQuery(), func(*flow.Record) error {
		n++
		if n == 150 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 150 {
		t.Fatalf("err %v after %d records", err, n)
	}
}

func TestSecondWriterRefused(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	_, err := store.Open(dir, store.Options{NoBackground: true})
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "already open for writing") {
		t.Fatalf("second Open: %v", err)
	}
	// Readers need no lock.
	if _, err := store.OpenReader(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(context.Background(), gen(rand.New(rand.NewPCG(1, 1)), 1, t0)); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	s2 := openStore(t, dir, store.Options{NoBackground: true})
	s2.Close()
}

func TestTempLeftoversRemovedAndIgnored(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	recs := gen(rand.New(rand.NewPCG(7, 8)), 500, t0)
	writeAll(t, s, recs, 100)
	s.Close()
	// What an interrupted write and an interrupted manifest publish leave.
	junk := []string{".tmp-seg-00000000000000ff.lseg", ".tmp-MANIFEST"}
	for _, j := range junk {
		if err := os.WriteFile(filepath.Join(dir, j), []byte("half a file"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := openReader(t, dir)
	sameRecords(t, "readers ignore temp files", scanAll(t, r, store.NewQuery()), recs)
	s = openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	for _, j := range junk {
		if _, err := os.Stat(filepath.Join(dir, j)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed on Open: %v", j, err)
		}
	}
	sameRecords(t, "after reopen", scanAll(t, r, store.NewQuery()), recs)
}

func TestEmptyAndMissing(t *testing.T) {
	if _, err := store.OpenReader(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Error("OpenReader of a missing directory: no error")
	}
	dir := t.TempDir()
	// An empty directory is not a store for a reader: a mistyped --store
	// must not look like a quiet host.
	if _, err := store.OpenReader(dir); !errors.Is(err, store.ErrNotStore) || !strings.Contains(err.Error(), "empty") {
		t.Errorf("OpenReader of an empty directory: %v", err)
	}
	// The writer makes it a store at once, before its first write.
	s := openStore(t, dir, store.Options{NoBackground: true})
	defer s.Close()
	r := openReader(t, dir)
	if got := scanAll(t, r, store.NewQuery()); len(got) != 0 {
		t.Errorf("empty store scanned %d records", len(got))
	}
	if got := top(t, r, store.NewQuery(), store.BySrc, 10); len(got) != 0 {
		t.Errorf("empty store top %v", got)
	}
	if err := s.Write(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Segments != 0 || st.Records != 0 {
		t.Errorf("stats after empty write %+v", st)
	}
}

// TestEveryFieldCovered is the store's field-coverage test: a record
// written and read back keeps every field of flow.Fields exactly. A field
// added to the table without a column fails here.
func TestEveryFieldCovered(t *testing.T) {
	flowtest.Coverage{
		Encode: func(t testing.TB, r *flow.Record) flowtest.Parts {
			dir := t.TempDir()
			s, err := store.Open(dir, store.Options{NoBackground: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Write(context.Background(), []flow.Record{*r}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			var back []flow.Record
			rd, err := store.OpenReader(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := rd.Scan(context.Background(), store.NewQuery(), func(r *flow.Record) error {
				back = append(back, *r)
				return nil
			}); err != nil || len(back) != 1 {
				t.Fatalf("read back %d records: %v", len(back), err)
			}
			return flowtest.Values(&back[0])
		},
		IDs: func(f *flow.Field) []string { return []string{f.Name} },
	}.Check(t)
}
