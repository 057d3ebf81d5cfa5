package query

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"loupe/internal/api"
	"loupe/internal/flow"
	"loupe/internal/store"
)

// testStore writes n records of a few endpoints, interfaces and protocols
// over the last ten minutes, every one a different flow, and returns the
// store's directory and the API over it.
func testStore(t *testing.T, n int) (string, http.Handler) {
	t.Helper()
	dir := t.TempDir()
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	addrs := []string{"10.0.0.1", "10.0.0.2", "10.0.1.7", "192.168.1.10", "2001:db8::1", "2001:db8::2"}
	now := time.Now().Truncate(time.Millisecond)
	recs := make([]flow.Record, n)
	for i := range recs {
		r := &recs[i]
		src, dst := netip.MustParseAddr(addrs[rng.IntN(len(addrs))]), netip.MustParseAddr(addrs[rng.IntN(len(addrs))])
		if src.Is4() != dst.Is4() {
			dst = src
		}
		r.EtherType = flow.EtherTypeIPv4
		if src.Is6() {
			r.EtherType = flow.EtherTypeIPv6
		}
		r.SrcAddr, r.DstAddr = src.As16(), dst.As16()
		r.Proto = []uint8{6, 17, 1}[rng.IntN(3)]
		r.SrcPort, r.DstPort = uint16(40000+i), []uint16{53, 80, 443}[rng.IntN(3)]
		r.Direction = flow.Direction(rng.IntN(2))
		r.Iface = []string{"eth0", "veth1"}[rng.IntN(2)]
		r.IfIndex = 2
		r.Packets = uint64(1 + rng.IntN(100))
		r.Bytes = r.Packets * uint64(60+rng.IntN(1400))
		r.LastSeen = now.Add(-time.Duration(secondsAgo(rng)) * time.Second)
		r.FirstSeen = r.LastSeen.Add(-time.Duration(rng.IntN(5000)) * time.Millisecond)
		r.Sampling = 1
		measure(r, i)
	}
	if err := s.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(Routes(dir), func(api.Access, *http.Request) *api.Denial { return nil }, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return dir, h
}

// measure gives some records kernel signals, DNS or an estimate, from
// their index alone (the random draws stay as they were): RTTs, counts
// that are measured zeros, drops, DNS exchanges, decoded and estimated
// counters.
func measure(r *flow.Record, i int) {
	if i%7 == 1 {
		r.SetRTT(uint64(i%5)*100_000, uint64(i%13)*250_000, uint64(i%9)*200_000)
	}
	if i%11 == 2 {
		r.SetRetransmits(uint64(i % 3))
	}
	if i%13 == 3 {
		r.SetDrops(uint64(1+i%4), uint64(1+i%4)*80, flow.DropReasons{"NETFILTER_DROP": uint64(1 + i%4)})
	}
	if i%17 == 4 {
		r.SetDNS(&flow.DNSExchange{ID: uint16(i), QName: []string{"a.test", "b.test"}[i%2], HasRcode: true,
			HasLatency: i%3 != 0, LatencyNs: uint64(i%29) * 10_000})
	}
	switch i % 19 {
	case 5:
		r.Accuracy = flow.Decoded
	case 6:
		r.Accuracy, r.MaxErrorPackets, r.MaxErrorBytes, r.ErrorConfidence = flow.Estimated, 3, 300, 0.95
	}
}

func get(t *testing.T, h http.Handler, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result(), rec.Body.String()
}

// secondsAgo is a record's age in whole seconds, up to 10 minutes, never
// just inside a window the tests ask for relative to now (--since 3m, 4m,
// 5m): the CLI and the API each take their own now, seconds apart on a
// loaded machine, and a record at the edge would be in one window and not
// the other.
func secondsAgo(rng *rand.Rand) int {
	for {
		ago := rng.IntN(600)
		near := false
		for _, edge := range []int{180, 240, 300} {
			near = near || (ago >= edge-15 && ago <= edge+5)
		}
		if !near {
			return ago
		}
	}
}

// cli runs a flows verb over the store and returns what it printed.
func runCLI(t *testing.T, run func([]string, io.Writer, io.Writer) error, args ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	if err := run(args, &out, &errs); err != nil {
		t.Fatalf("%v: %v: %s", args, err, errs.String())
	}
	return out.String()
}

// TestAPIEqualsCLI: for the same filters, GET /api/v1/flows returns what
// `loupe flows --json` prints and GET /api/v1/top the rows of `loupe top
// --json`, byte for byte.
func TestAPIEqualsCLI(t *testing.T) {
	dir, h := testStore(t, 3000)
	for _, c := range []struct{ params []string }{
		{nil},
		{[]string{"since", "5m"}},
		{[]string{"src", "10.0.0.0/24", "proto", "tcp"}},
		{[]string{"dst", "2001:db8::/64", "port", "443"}},
		{[]string{"iface", "veth*", "direction", "egress", "sort", "bytes", "limit", "17"}},
		{[]string{"sort", "src", "limit", "40"}},
		// Every column the UI's table shows sorts in the store, and the
		// filters on what was measured hold over every record.
		{[]string{"sort", "iface", "limit", "60"}},
		{[]string{"sort", "direction", "since", "4m"}},
		{[]string{"sort", "rtt", "limit", "90"}},
		{[]string{"sort", "retransmits", "proto", "tcp"}},
		{[]string{"sort", "drops", "limit", "30"}},
		{[]string{"sort", "dns_latency", "limit", "30"}},
		{[]string{"sort", "accuracy", "limit", "200"}},
		{[]string{"has", "rtt", "min-rtt", "1ms", "sort", "rtt"}},
		{[]string{"has", "drops,dns", "sort", "bytes"}},
		{[]string{"has", "retransmits"}},
		{[]string{"has", "dns", "sort", "dns_latency"}},
		{[]string{"accuracy", "estimated", "sort", "packets"}},
		{[]string{"accuracy", "decoded", "iface", "eth0"}},
	} {
		v := url.Values{}
		args := []string{"--store", dir, "--json"}
		for i := 0; i < len(c.params); i += 2 {
			v.Add(c.params[i], c.params[i+1])
			args = append(args, "--"+c.params[i], c.params[i+1])
		}
		want := runCLI(t, func(a []string, o, e io.Writer) error { return flows(context.Background(), a, o, e) }, args...)
		resp, got := get(t, h, FlowsPath+"?"+v.Encode())
		if resp.StatusCode != http.StatusOK || got != want {
			t.Errorf("flows %v: %d, API and CLI differ:\napi %d bytes\ncli %d bytes", c.params, resp.StatusCode, len(got), len(want))
		}
		if strings.Count(want, "\n") < 5 {
			t.Errorf("flows %v: only %d records: the case tests little", c.params, strings.Count(want, "\n"))
		}
		// The same as one array.
		resp, arr := get(t, h, FlowsPath+"?"+v.Encode(), "Accept", "application/json")
		var recs []json.RawMessage
		if err := json.Unmarshal([]byte(arr), &recs); err != nil || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("flows %v as an array: %v (%s)", c.params, err, resp.Header.Get("Content-Type"))
		}
		var lines []string
		for _, r := range recs {
			lines = append(lines, string(r)+"\n")
		}
		if strings.Join(lines, "") != want {
			t.Errorf("flows %v: the array differs from the lines", c.params)
		}
	}
	for _, by := range []string{"src", "dst", "pair", "port"} {
		for _, since := range []string{"1h", "3m"} {
			want := runCLI(t, topCmd, "--store", dir, "--json", "--by", by, "--since", since, "-n", "7")
			resp, got := get(t, h, TopPath+"?by="+by+"&since="+since+"&n=7")
			if resp.StatusCode != http.StatusOK || got != want || want == "" {
				t.Errorf("top by %s since %s: %d\napi:\n%s\ncli:\n%s", by, since, resp.StatusCode, got, want)
			}
		}
	}
}

// TestViewsEqualCLI: GET /api/v1/traffic and /api/v1/topology answer
// what `loupe traffic --json` and `loupe topology --json` print for the
// same flags, byte for byte.
func TestViewsEqualCLI(t *testing.T) {
	dir, h := testStore(t, 2000)
	now := time.Now()
	since, until := now.Add(-20*time.Minute).UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano)
	for _, c := range []struct {
		path string
		run  func([]string, io.Writer, io.Writer) error
		args []string
	}{
		{TrafficPath, trafficCmd, nil},
		{TrafficPath, trafficCmd, []string{"step", "30s", "proto", "udp"}},
		{TrafficPath, trafficCmd, []string{"has", "rtt", "iface", "eth0"}},
		{TopologyPath, topologyCmd, nil},
		{TopologyPath, topologyCmd, []string{"n", "4", "src", "10.0.0.0/16"}},
		{TopologyPath, topologyCmd, []string{"accuracy", "estimated"}},
		{TopologyPath, topologyCmd, []string{"flows", "false"}},
	} {
		v := url.Values{"since": {since}, "until": {until}}
		args := []string{"--store", dir, "--json", "--since", since, "--until", until}
		for i := 0; i < len(c.args); i += 2 {
			v.Add(c.args[i], c.args[i+1])
			args = append(args, "--"+c.args[i]+"="+c.args[i+1]) // a bool flag takes its value so
		}
		want := runCLI(t, c.run, args...)
		resp, got := get(t, h, c.path+"?"+v.Encode())
		if resp.StatusCode != http.StatusOK || got != want {
			t.Errorf("%s %v: %d, API and CLI differ:\napi %s\ncli %s", c.path, c.args, resp.StatusCode, got, want)
		}
		if !strings.Contains(want, `"bytes"`) || strings.Contains(want, `"totals": {\n    "bytes": 0`) {
			t.Errorf("%s %v: nothing matched: the case tests little:\n%s", c.path, c.args, want)
		}
	}
}

// TestFlowsPaging: pages of limit records, followed by their cursors, are
// the whole answer in order, each record once.
func TestFlowsPaging(t *testing.T) {
	dir, h := testStore(t, 1000)
	want := strings.SplitAfter(runCLI(t, func(a []string, o, e io.Writer) error { return flows(context.Background(), a, o, e) },
		"--store", dir, "--json", "--sort", "bytes"), "\n")
	want = want[:len(want)-1]
	var got []string
	path := FlowsPath + "?sort=bytes&limit=300"
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("more pages than records")
		}
		resp, body := get(t, h, path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if m := resp.Header.Get(MatchedHeader); m != strconv.Itoa(len(want)) {
			t.Errorf("matched %s, want %d", m, len(want))
		}
		got = append(got, strings.SplitAfter(body, "\n")...)
		got = got[:len(got)-1]
		next := resp.Header.Get(NextCursorHeader)
		if next == "" {
			break
		}
		path = FlowsPath + "?sort=bytes&limit=300&cursor=" + next
	}
	if len(got) != len(want) || strings.Join(got, "") != strings.Join(want, "") {
		t.Errorf("paged %d records, want %d; or they differ", len(got), len(want))
	}
}

// TestTrafficTotals: the traffic's totals, series and protocols each sum
// to what `loupe flows --json` lists.
func TestTrafficTotals(t *testing.T) {
	dir, h := testStore(t, 2000)
	var want Totals
	byProto := map[uint8]Totals{}
	out := runCLI(t, func(a []string, o, e io.Writer) error { return flows(context.Background(), a, o, e) }, "--store", dir, "--json", "--since", "20m")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Bytes, Packets uint64
			Proto          uint8
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		want.Bytes, want.Packets, want.Flows = want.Bytes+r.Bytes, want.Packets+r.Packets, want.Flows+1
		p := byProto[r.Proto]
		p.Bytes, p.Packets, p.Flows = p.Bytes+r.Bytes, p.Packets+r.Packets, p.Flows+1
		byProto[r.Proto] = p
	}
	resp, body := get(t, h, TrafficPath+"?since=20m&step=30s")
	var tr Traffic
	if err := json.Unmarshal([]byte(body), &tr); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %v: %s", resp.StatusCode, err, body)
	}
	if tr.Totals != want {
		t.Errorf("totals %+v, want %+v", tr.Totals, want)
	}
	var series Totals
	for _, s := range tr.Series {
		for _, p := range s.Points {
			series.Bytes += p[1]
			series.Packets += p[2]
			if (p[0]-uint64(tr.Since.Unix()))%30 != 0 {
				t.Errorf("bucket %d is not on a 30 s step from %d", p[0], tr.Since.Unix())
			}
		}
	}
	if series.Bytes != want.Bytes || series.Packets != want.Packets || len(tr.Series) != 4 {
		t.Errorf("series sum to %+v in %d series, want %+v in 4", series, len(tr.Series), want)
	}
	for _, p := range tr.Protocols {
		if p.Totals != byProto[p.Proto] {
			t.Errorf("proto %d: %+v, want %+v", p.Proto, p.Totals, byProto[p.Proto])
		}
	}
	if len(tr.Protocols) != len(byProto) {
		t.Errorf("%d protocols, want %d", len(tr.Protocols), len(byProto))
	}
}

// TestTopologyEdgesArePairs: the edges are `loupe top --by pair`'s rows.
func TestTopologyEdgesArePairs(t *testing.T) {
	dir, h := testStore(t, 500)
	want := runCLI(t, topCmd, "--store", dir, "--json", "--by", "pair", "-n", "5")
	_, body := get(t, h, TopologyPath+"?n=5")
	var topo Topology
	if err := json.Unmarshal([]byte(body), &topo); err != nil {
		t.Fatal(err)
	}
	var got, rows strings.Builder
	for _, e := range topo.Edges {
		fmt.Fprintf(&got, "%s %s %d %d %d\n", e.Src, e.Dst, e.Bytes, e.Packets, *e.Flows)
	}
	for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
		var r struct {
			Src                   string `json:"src_addr"`
			Dst                   string `json:"dst_addr"`
			Bytes, Packets, Flows uint64
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rows, "%s %s %d %d %d\n", r.Src, r.Dst, r.Bytes, r.Packets, r.Flows)
	}
	if got.String() != rows.String() || len(topo.Edges) != 5 || !topo.Truncated {
		t.Errorf("edges:\n%s\nwant:\n%s (truncated %v)", got.String(), rows.String(), topo.Truncated)
	}
	// Without flows: the same pairs and sums, no flows field.
	_, body = get(t, h, TopologyPath+"?n=5&flows=false")
	if strings.Contains(body, `"flows"`) {
		t.Errorf("flows=false: the edges have flows: %s", body)
	}
	var bare Topology
	if err := json.Unmarshal([]byte(body), &bare); err != nil {
		t.Fatal(err)
	}
	for i := range topo.Edges {
		topo.Edges[i].Flows = nil
	}
	if fmt.Sprint(bare) != fmt.Sprint(topo) {
		t.Errorf("flows=false: %v, want %v without flows", bare, topo)
	}
}

// TestTopWithoutFlows: `loupe top --flows=false` and GET /api/v1/top with
// flows=false give each grouping's rows with their sums and no flows
// field, the groups the counted ranking gives where bytes decide it; a
// ranking by a signal needs the flows counted.
func TestTopWithoutFlows(t *testing.T) {
	dir, h := testStore(t, 500)
	type row struct {
		Src     string `json:"src_addr"`
		Dst     string `json:"dst_addr"`
		Port    uint16 `json:"port"`
		Bytes   uint64 `json:"bytes"`
		Packets uint64 `json:"packets"`
	}
	rows := func(out string) []row {
		var rs []row
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var r row
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			rs = append(rs, r)
		}
		return rs
	}
	for _, by := range []string{"src", "dst", "pair", "port"} {
		counted := runCLI(t, topCmd, "--store", dir, "--json", "--by", by, "-n", "5")
		bare := runCLI(t, topCmd, "--store", dir, "--json", "--by", by, "-n", "5", "--flows=false")
		_, body := get(t, h, TopPath+"?n=5&flows=false&by="+by)
		if strings.Contains(bare, `"flows"`) || strings.Contains(body, `"flows"`) || !strings.Contains(counted, `"flows"`) {
			t.Fatalf("by %s: flows field: counted %q, uncounted %q, API %q", by, counted, bare, body)
		}
		if body != bare {
			t.Errorf("by %s: API %q, CLI %q", by, body, bare)
		}
		want, got := rows(counted), rows(bare)
		if len(want) != 5 || len(got) != 5 {
			t.Fatalf("by %s: %d and %d rows, want 5", by, len(want), len(got))
		}
		for i := range want {
			// A tie in bytes and packets may order differently.
			if got[i].Bytes != want[i].Bytes || got[i].Packets != want[i].Packets {
				t.Errorf("by %s row %d: %+v, counted %+v", by, i, got[i], want[i])
			}
		}
	}
	// Several groupings at once: each grouping's rows in turn, each row
	// naming its own, the rows of the grouping asked alone.
	for _, flows := range []string{"true", "false"} {
		var want strings.Builder
		for _, by := range []string{"src", "dst", "pair", "port"} {
			alone := runCLI(t, topCmd, "--store", dir, "--json", "--by", by, "-n", "4", "--flows="+flows)
			if strings.Count(alone, "\n") != 4 {
				t.Fatalf("by %s: %q, want 4 rows", by, alone)
			}
			want.WriteString(strings.ReplaceAll(alone, "{", `{"by":"`+by+`",`))
		}
		many := runCLI(t, topCmd, "--store", dir, "--json", "--by", "src,dst,pair,port", "-n", "4", "--flows="+flows)
		_, body := get(t, h, TopPath+"?n=4&by=src,dst,pair,port&flows="+flows)
		if many != want.String() || body != many {
			t.Errorf("flows=%s: by src,dst,pair,port:\nCLI %s\nAPI %s\nwant %s", flows, many, body, want.String())
		}
	}
	if out := runCLI(t, topCmd, "--store", dir, "--by", "src,pair", "-n", "2", "--flows=false"); !strings.HasPrefix(out, "by src:\n") || !strings.Contains(out, "\n\nby pair:\nSOURCE") {
		t.Errorf("tables of several groupings:\n%s", out)
	}
	if resp, body := get(t, h, TopPath+"?by=src,src"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "src twice") {
		t.Errorf("by=src,src: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, h, TopPath+"?flows=false&sort=rtt"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "--flows=false ranks by bytes") {
		t.Errorf("flows=false&sort=rtt: %d %s", resp.StatusCode, body)
	}
	if out := runCLI(t, topCmd, "--store", dir, "--by", "pair", "-n", "3", "--flows=false"); strings.Contains(out, "FLOWS") || !strings.Contains(out, "PACKETS") {
		t.Errorf("table without flows:\n%s", out)
	}
}

// TestBadParameters: an unknown or CLI-only parameter, or a bad value, is
// a 400 that names it.
func TestBadParameters(t *testing.T) {
	_, h := testStore(t, 10)
	for path, msg := range map[string]string{
		FlowsPath + "?srcc=10.0.0.1":   `unknown parameter "srcc"`,
		FlowsPath + "?store=/etc":      `unknown parameter "store"`,
		FlowsPath + "?follow=true":     `unknown parameter "follow"`,
		FlowsPath + "?src=10.0.0.0/33": "src: invalid prefix",
		FlowsPath + "?cursor=xyz":      "cursor: not one this API gave",
		TopPath + "?by=host":           "by: ",
		TopPath + "?n=0":               "n 0: want at least 1",
		TrafficPath + "?step=1ms":      "step",
		TopologyPath + "?by=src":       `unknown parameter "by"`,
		TopologyPath + "?n=6000":       "n 6000: want 1..5000",
		TrafficPath + "?sort=bytes":    `unknown parameter "sort"`,
	} {
		resp, body := get(t, h, path)
		var e api.Error
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error, msg) {
			t.Errorf("%s: %d %s, want 400 with %q", path, resp.StatusCode, body, msg)
		}
	}
}
