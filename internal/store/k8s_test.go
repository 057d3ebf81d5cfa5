package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

// Ends of the records of the names tests.
var (
	cliEnd  = flow.K8sEnd{Kind: flow.K8sPod, Namespace: "tools", Pod: "cli-0", Workload: "cli", WorkloadKind: "StatefulSet", Node: "n1"}
	cli1End = flow.K8sEnd{Kind: flow.K8sPod, Namespace: "tools", Pod: "cli-1", Workload: "cli", WorkloadKind: "StatefulSet", Node: "n1"}
	webEnd  = flow.K8sEnd{Kind: flow.K8sPod, Namespace: "shop", Pod: "web-6d4f9-abcde", Workload: "web", WorkloadKind: "Deployment", Service: "web", Node: "n1"}
	jobEnd  = flow.K8sEnd{Kind: flow.K8sPod, Namespace: "shop", Pod: "nightly-29000-x", Workload: "nightly", WorkloadKind: "CronJob", Node: "n1"}
	bareEnd = flow.K8sEnd{Kind: flow.K8sPod, Namespace: "shop", Pod: "debug", Node: "n1"}
	nodeEnd = flow.K8sEnd{Kind: flow.K8sNode, Node: "n1"}
	hostEnd = flow.K8sEnd{Kind: flow.K8sHost, Node: "n1"}
	extEnd  = flow.K8sEnd{Kind: flow.K8sExternal}
)

// namedStore writes records with and without names, over three segments
// (the last without any name, as a segment from before them), and opens
// it for reading.
func namedStore(t *testing.T) *store.Reader {
	t.Helper()
	named := func(r flow.Record, src, dst flow.K8sEnd) flow.Record {
		r.K8s = &flow.K8s{Src: src, Dst: dst}
		return r
	}
	seg1 := []flow.Record{
		named(tcpRec("10.244.0.3", "10.244.0.2", 40000, 8080, flow.TCPAck, t0, 500), cliEnd, webEnd),
		named(tcpRec("10.244.0.2", "10.244.0.3", 8080, 40000, flow.TCPAck, t0, 300), webEnd, cliEnd),
		named(tcpRec("192.168.1.10", "10.244.0.2", 41000, 8080, flow.TCPAck, t0, 200), nodeEnd, webEnd),
		// The address 10.244.0.9 was the Job's pod's, then cli-1's: one
		// flow, its records named after each.
		named(tcpRec("203.0.113.5", "10.244.0.9", 1234, 80, flow.TCPAck, t0, 40), extEnd, jobEnd),
	}
	seg2 := []flow.Record{
		named(tcpRec("10.244.0.3", "10.244.0.2", 40000, 8080, flow.TCPAck, t0.Add(5*time.Second), 500), cliEnd, webEnd),
		named(tcpRec("10.244.0.2", "198.51.100.1", 42000, 443, flow.TCPAck, t0, 100), webEnd, extEnd),
		named(tcpRec("10.244.0.7", "10.0.0.1", 43000, 22, flow.TCPAck, t0, 50), bareEnd, hostEnd),
		named(tcpRec("203.0.113.5", "10.244.0.9", 1234, 80, flow.TCPAck, t0.Add(5*time.Second), 40), extEnd, cli1End),
	}
	seg3 := []flow.Record{tcpRec("10.9.9.9", "10.9.9.8", 1, 2, flow.TCPAck, t0, 7)}
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	for _, seg := range [][]flow.Record{seg1, seg2, seg3} {
		writeAll(t, s, seg, len(seg))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openReader(t, dir)
}

// topRow is a Top entry as the tests below write it: each end's group
// and the sums.
func topRow(e store.TopEntry) string {
	end := func(g store.K8sGroup) string {
		return fmt.Sprintf("%s|%s|%s|%s", g.Kind, g.Namespace, g.Name, g.WorkloadKind)
	}
	return fmt.Sprintf("%s > %s: %d bytes %d packets %d flows", end(e.SrcK8s), end(e.DstK8s), e.Bytes, e.Packets, e.Flows)
}

func TestTopByNames(t *testing.T) {
	r := namedStore(t)
	for _, tc := range []struct {
		by   store.GroupBy
		q    func(q *store.Query)
		want []string
	}{
		{store.ByNamespace, nil, []string{
			"|tools|| > |shop||: 1000 bytes 10 packets 1 flows",
			"|shop|| > |tools||: 300 bytes 3 packets 1 flows",
			"node||| > |shop||: 200 bytes 2 packets 1 flows",
			"|shop|| > external|||: 100 bytes 1 packets 1 flows",
			"|shop|| > host|||: 50 bytes 0 packets 1 flows",
			// One flow, in two groups: the address changed holders.
			"external||| > |shop||: 40 bytes 0 packets 1 flows",
			"external||| > |tools||: 40 bytes 0 packets 1 flows",
			"||| > |||: 7 bytes 0 packets 1 flows",
		}},
		{store.ByWorkload, nil, []string{
			"|tools|cli|StatefulSet > |shop|web|Deployment: 1000 bytes 10 packets 1 flows",
			"|shop|web|Deployment > |tools|cli|StatefulSet: 300 bytes 3 packets 1 flows",
			"node||| > |shop|web|Deployment: 200 bytes 2 packets 1 flows",
			"|shop|web|Deployment > external|||: 100 bytes 1 packets 1 flows",
			"pod|shop|| > host|||: 50 bytes 0 packets 1 flows",
			"external||| > |shop|nightly|CronJob: 40 bytes 0 packets 1 flows",
			"external||| > |tools|cli|StatefulSet: 40 bytes 0 packets 1 flows",
			"||| > |||: 7 bytes 0 packets 1 flows",
		}},
		{store.ByService, nil, []string{
			"pod|tools|| > |shop|web|: 1000 bytes 10 packets 1 flows",
			"|shop|web| > pod|tools||: 300 bytes 3 packets 1 flows",
			"node||| > |shop|web|: 200 bytes 2 packets 1 flows",
			"|shop|web| > external|||: 100 bytes 1 packets 1 flows",
			"pod|shop|| > host|||: 50 bytes 0 packets 1 flows",
			"external||| > pod|shop||: 40 bytes 0 packets 1 flows",
			"external||| > pod|tools||: 40 bytes 0 packets 1 flows",
			"||| > |||: 7 bytes 0 packets 1 flows",
		}},
		{store.ByNamespace, func(q *store.Query) { q.Namespace = "tools" }, []string{
			"|tools|| > |shop||: 1000 bytes 10 packets 1 flows",
			"|shop|| > |tools||: 300 bytes 3 packets 1 flows",
			"external||| > |tools||: 40 bytes 0 packets 1 flows",
		}},
		{store.ByWorkload, func(q *store.Query) { q.Workload = "shop/web"; q.Port = 8080 }, []string{
			"|tools|cli|StatefulSet > |shop|web|Deployment: 1000 bytes 10 packets 1 flows",
			"|shop|web|Deployment > |tools|cli|StatefulSet: 300 bytes 3 packets 1 flows",
			"node||| > |shop|web|Deployment: 200 bytes 2 packets 1 flows",
		}},
	} {
		q := store.NewQuery()
		if tc.q != nil {
			tc.q(&q)
		}
		got := top(t, r, q, tc.by, 0)
		var rows []string
		for _, e := range got {
			rows = append(rows, topRow(e))
		}
		if fmt.Sprint(rows) != fmt.Sprint(tc.want) {
			t.Errorf("top --by %v (namespace %q, workload %q):\n got %q\nwant %q", tc.by, q.Namespace, q.Workload, rows, tc.want)
		}
		// Counted one candidate at a time, in bits of its own, the flows
		// come out the same.
		var readings int
		one, err := r.TopBitsBudget(context.Background(), q, tc.by, 0, 1, &readings)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one, got) || readings != len(got) {
			t.Errorf("top --by %v, a candidate a reading: %d readings of %v, want %d of %v", tc.by, readings, one, len(got), got)
		}
		// The first n are the first n of all.
		if n := 2; len(got) > n {
			if short := top(t, r, q, tc.by, n); fmt.Sprint(short) != fmt.Sprint(got[:n]) {
				t.Errorf("top --by %v -n %d: %v, want %v", tc.by, n, short, got[:n])
			}
		}
	}
}

func TestNameFilters(t *testing.T) {
	r := namedStore(t)
	for _, tc := range []struct {
		namespace, workload string
		want                uint64 // bytes of the records that match
		records             int
	}{
		{"", "", 500 + 300 + 200 + 40 + 500 + 100 + 50 + 40 + 7, 9},
		{"shop", "", 500 + 300 + 200 + 40 + 500 + 100 + 50, 7},
		{"tools", "", 500 + 300 + 500 + 40, 4},
		{"nowhere", "", 0, 0},
		{"", "cli", 500 + 300 + 500 + 40, 4},
		{"", "tools/cli", 500 + 300 + 500 + 40, 4},
		{"", "shop/cli", 0, 0},
		{"", "nightly", 40, 1},
		// Each filter at either end: web's end in shop, cli's in tools.
		{"shop", "cli", 500 + 300 + 500, 3},
	} {
		q := store.NewQuery()
		q.Namespace, q.Workload = tc.namespace, tc.workload
		recs := scanAll(t, r, q)
		var bytes uint64
		for _, rec := range recs {
			bytes += rec.Bytes
		}
		if bytes != tc.want || len(recs) != tc.records {
			t.Errorf("--namespace %q --workload %q: %d records, %d bytes; want %d, %d", tc.namespace, tc.workload, len(recs), bytes, tc.records, tc.want)
		}
		var rep store.Report
		q.Report = &rep
		n := 0
		if err := r.Select(context.Background(), q, store.NewestFirst(), 0, func(*flow.Record) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != tc.records || rep.Matched != uint64(tc.records) {
			t.Errorf("Select --namespace %q --workload %q: %d records, %d matched; want %d", tc.namespace, tc.workload, n, rep.Matched, tc.records)
		}
	}
	for _, bad := range []string{"/web", "shop/", "a/b/c"} {
		q := store.NewQuery()
		q.Workload = bad
		if err := r.Scan(context.Background(), q, func(*flow.Record) error { return nil }); err == nil {
			t.Errorf("workload %q accepted", bad)
		}
	}
}

// TestTopByNamesBare: records without names, in segments that hold none
// (every record one group, summed at once) and in segments beside named
// records, flows repeated across them; the group of no names has the
// sums and the distinct flows of those records, under a filter too.
func TestTopByNamesBare(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	recs := gen(rng, 2000, t0)
	// Flows that go on: the same keys again, later.
	for _, r := range recs[:600] {
		r.FirstSeen, r.LastSeen = r.FirstSeen.Add(time.Second), r.LastSeen.Add(time.Second)
		recs = append(recs, r)
	}
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	dir := t.TempDir()
	s := openStore(t, dir, store.Options{NoBackground: true})
	var all []flow.Record
	for i, seg := range slices.Collect(slices.Chunk(recs, 400)) {
		seg = slices.Clone(seg)
		if i%2 == 1 { // every third record named
			for j := 0; j < len(seg); j += 3 {
				seg[j].K8s = &flow.K8s{Src: webEnd, Dst: cliEnd}
			}
		}
		writeAll(t, s, seg, len(seg))
		all = append(all, seg...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := openReader(t, dir)
	q443 := store.NewQuery()
	q443.Port = 443
	for _, q := range []store.Query{store.NewQuery(), q443} {
		var want store.TopEntry
		keys := map[flow.Key]bool{}
		for i := range all {
			if all[i].K8s != nil || !matches(&all[i], q) {
				continue
			}
			want.Bytes, want.Packets = want.Bytes+all[i].Bytes, want.Packets+all[i].Packets
			if all[i].Packets > 0 || all[i].Bytes > 0 {
				keys[all[i].Key] = true
			}
		}
		want.Flows = uint64(len(keys))
		for _, by := range []store.GroupBy{store.ByNamespace, store.ByWorkload, store.ByService} {
			var got *store.TopEntry
			rows := top(t, r, q, by, 0)
			for i := range rows {
				if rows[i].SrcK8s == (store.K8sGroup{}) && rows[i].DstK8s == (store.K8sGroup{}) {
					got = &rows[i]
				}
			}
			if got == nil || got.Bytes != want.Bytes || got.Packets != want.Packets || got.Flows != want.Flows {
				t.Errorf("%v, port %d: the group of no names is %v, want %d bytes %d packets %d flows", by, q.Port, got, want.Bytes, want.Packets, want.Flows)
			}
			if len(rows) != 2 {
				t.Errorf("%v, port %d: %d groups, want 2", by, q.Port, len(rows))
			}
		}
	}
}
