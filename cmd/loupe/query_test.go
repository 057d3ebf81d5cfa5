package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"loupe/internal/capability/flows/query"
	"loupe/internal/flow"
	"loupe/internal/store"
	"loupe/internal/testutil"
)

// tableRows splits a table into its header and rows of cells. Columns
// are separated where every line has two or more spaces (cells never hold
// two spaces in a row; every header names its column), so that empty
// cells are kept. Positions are runes, as the table aligns them (µs).
func tableRows(t *testing.T, out string) (head []string, rows [][]string) {
	t.Helper()
	out = strings.TrimRight(out, "\n")
	if out == "" {
		return nil, nil
	}
	var lines [][]rune
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, []rune(l))
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l))
	}
	blank := func(p int) bool {
		for _, l := range lines {
			if p < len(l) && l[p] != ' ' {
				return false
			}
		}
		return true
	}
	// Column spans [from, to) between runs of at least two blanks.
	var spans [][2]int
	for p := 0; p < width; {
		for p < width && blank(p) {
			p++
		}
		from := p
		for p < width && !(blank(p) && (p+1 >= width || blank(p+1))) {
			p++
		}
		if p > from {
			spans = append(spans, [2]int{from, p})
		}
	}
	cut := func(l []rune) []string {
		cells := make([]string, len(spans))
		for i, sp := range spans {
			if sp[0] < len(l) {
				cells[i] = strings.TrimSpace(string(l[sp[0]:min(sp[1], len(l))]))
			}
		}
		return cells
	}
	head = cut(lines[0])
	for _, l := range lines[1:] {
		rows = append(rows, cut(l))
	}
	return head, rows
}

// column returns the cells of the column named name.
func column(t *testing.T, head []string, rows [][]string, name string) []string {
	t.Helper()
	i := slices.Index(head, name)
	if i < 0 {
		t.Fatalf("no column %s in %v", name, head)
	}
	var out []string
	for _, r := range rows {
		if len(r) != len(head) {
			t.Fatalf("row %v has %d cells, header %d", r, len(r), len(head))
		}
		out = append(out, r[i])
	}
	return out
}

// sixtyFlows are 60 records, one a minute over the last hour: record i has
// source port 1000+i, is i minutes old and has (i*7919)%60+1 kilobytes, so
// that sizes and times sort differently.
func sixtyFlows() []flow.Record {
	var recs []flow.Record
	for i := range 60 {
		r := rec("10.0.0.1", "10.0.0.2", uint16(1000+i), 443, 6, uint64((i*7919)%60+1)*1000, time.Duration(i)*time.Minute+30*time.Second)
		r.TCPFlags = flow.TCPAck
		recs = append(recs, r)
	}
	return recs
}

func TestFlowsSortAndLimit(t *testing.T) {
	recs := sixtyFlows()
	dir := writeRecords(t, 7, recs) // several segments, in no useful order
	ports := func(out string) []int {
		head, rows := tableRows(t, out)
		var ps []int
		for _, src := range column(t, head, rows, "SOURCE") {
			ap := netip.MustParseAddrPort(src)
			ps = append(ps, int(ap.Port()))
		}
		return ps
	}
	seq := func(from, n, step int) []int {
		var s []int
		for i := range n {
			s = append(s, from+i*step)
		}
		return s
	}

	// The default: the 50 newest, then a line on how many more.
	code, out, errOut := run(t, "flows", "--store", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got := ports(out); !slices.Equal(got, seq(1000, 50, 1)) {
		t.Errorf("default order: source ports %v, want 1000..1049 (newest first)", got)
	}
	if errOut != "10 more records matched (--limit 0 prints all)\n" {
		t.Errorf("stderr %q", errOut)
	}
	// --limit 0: all, no line.
	code, out, errOut = run(t, "flows", "--store", dir, "--limit", "0")
	if got := ports(out); code != 0 || !slices.Equal(got, seq(1000, 60, 1)) || errOut != "" {
		t.Errorf("--limit 0: exit %d, ports %v, stderr %q", code, got, errOut)
	}
	// --sort bytes: the biggest first.
	bySize := slices.Clone(recs)
	slices.SortStableFunc(bySize, func(a, b flow.Record) int { return int(b.Bytes) - int(a.Bytes) })
	code, out, errOut = run(t, "flows", "--store", dir, "--sort", "bytes", "--limit", "3", "--raw")
	head, rows := tableRows(t, out)
	if code != 0 || len(rows) != 3 || errOut != "57 more records matched (--limit 0 prints all)\n" {
		t.Fatalf("--sort bytes --limit 3: exit %d\n%s%s", code, out, errOut)
	}
	for i, b := range column(t, head, rows, "BYTES") {
		if b != strconv.FormatUint(bySize[i].Bytes, 10) {
			t.Errorf("--sort bytes row %d: %s bytes, want %d", i, b, bySize[i].Bytes)
		}
	}
	// Human sizes without --raw, exact with.
	_, out, _ = run(t, "flows", "--store", dir, "--sort", "bytes", "--limit", "1")
	if head, rows := tableRows(t, out); column(t, head, rows, "BYTES")[0] != "58.6 KiB" {
		t.Errorf("human size: %v", rows)
	}
	// Oldest first is not an order; src ascending is, ties newest first.
	_, out, _ = run(t, "flows", "--store", dir, "--sort", "src_port", "--limit", "5")
	if got := ports(out); !slices.Equal(got, seq(1000, 5, 1)) {
		t.Errorf("--sort src_port: %v", got)
	}
	_, out, _ = run(t, "flows", "--store", dir, "--sort", "first_seen", "--limit", "2")
	if head, _ := tableRows(t, out); head[0] != "FIRST SEEN" {
		t.Errorf("--sort first_seen shows %s", head[0])
	}
	// --json: every record unless --limit is given.
	code, out, errOut = run(t, "flows", "--store", dir, "--json")
	if got := jsonRecords(t, out); code != 0 || len(got) != 60 || errOut != "" || got[0].SrcPort != 1000 || got[59].SrcPort != 1059 {
		t.Errorf("--json: exit %d, %d records, stderr %q", code, len(got), errOut)
	}
	code, out, errOut = run(t, "flows", "--store", dir, "--json", "--limit", "5", "--sort", "bytes")
	got := jsonRecords(t, out)
	if code != 0 || len(got) != 5 || errOut != "55 more records matched (--limit 0 prints all)\n" {
		t.Fatalf("--json --limit 5: exit %d, %d records, stderr %q", code, len(got), errOut)
	}
	for i := range got {
		// Exactly the record's JSON form.
		want := string(flow.AppendJSON(nil, &bySize[i]))
		line := strings.Split(out, "\n")[i]
		var g, w map[string]any
		json.Unmarshal([]byte(line), &g)
		json.Unmarshal([]byte(want), &w)
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("--json line %d:\n got %s\nwant %s", i, line, want)
		}
	}
	// An unknown field: one line naming the valid ones.
	code, _, errOut = run(t, "flows", "--store", dir, "--sort", "colour")
	if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "bytes, packets, segments, wire_bytes, src, dst, port") {
		t.Errorf("--sort colour: exit %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "flows", "--store", dir, "--limit", "-1"); code != 1 || !strings.Contains(errOut, "--limit") {
		t.Errorf("--limit -1: exit %d %q", code, errOut)
	}
}

// TestFlowsSortsNewFields: segments and wire_bytes sort like bytes, where
// the store keeps them.
func TestFlowsSortsNewFields(t *testing.T) {
	recs := sixtyFlows()
	for i := range recs {
		recs[i].Segments = uint64((i * 31) % 60)
		recs[i].WireBytes = recs[i].Bytes + uint64(i)
	}
	dir := writeRecords(t, 9, recs)
	if _, out, _ := run(t, "flows", "--store", dir, "--json", "--limit", "1", "--sort", "segments"); jsonRecords(t, out)[0].Segments == 0 {
		t.Skip("this store format does not keep segments and wire_bytes")
	}
	for _, c := range []struct {
		field string
		of    func(r *flow.Record) uint64
	}{{"segments", func(r *flow.Record) uint64 { return r.Segments }}, {"wire_bytes", func(r *flow.Record) uint64 { return r.WireBytes }}} {
		_, out, _ := run(t, "flows", "--store", dir, "--json", "--sort", c.field)
		got := jsonRecords(t, out)
		if len(got) != 60 || !slices.IsSortedFunc(got, func(a, b flow.Record) int { return int(c.of(&b)) - int(c.of(&a)) }) {
			t.Errorf("--sort %s: not descending", c.field)
		}
	}
}

func TestFlowsNonIPRows(t *testing.T) {
	arp := flow.Record{
		Key: flow.Key{SrcMAC: [6]byte{0x02, 0, 0, 0, 0, 0x01}, DstMAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			EtherType: flow.EtherTypeARP, IfIndex: 2, Direction: flow.Egress},
		Iface: "eth0", Packets: 2, Bytes: 84, FirstSeen: time.Now().Add(-time.Minute), LastSeen: time.Now().Add(-time.Minute), Sampling: 1,
	}
	lldp := arp
	lldp.EtherType, lldp.DstMAC = 0x88cc, [6]byte{0x01, 0x80, 0xc2, 0, 0, 0x0e}
	other := arp
	other.EtherType = 0x9000
	dir := writeRecords(t, 3, []flow.Record{arp, lldp, other})
	code, out, errOut := run(t, "flows", "--store", dir, "--sort", "dst")
	head, rows := tableRows(t, out)
	if code != 0 || len(rows) != 3 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	want := map[string][2]string{
		"arp (0x0806)":     {"02:00:00:00:00:01", "ff:ff:ff:ff:ff:ff"},
		"lldp (0x88cc)":    {"02:00:00:00:00:01", "01:80:c2:00:00:0e"},
		"ethertype 0x9000": {"02:00:00:00:00:01", "ff:ff:ff:ff:ff:ff"},
	}
	protos, srcs, dsts := column(t, head, rows, "PROTO"), column(t, head, rows, "SOURCE"), column(t, head, rows, "DESTINATION")
	for i, p := range protos {
		if w, ok := want[p]; !ok || srcs[i] != w[0] || dsts[i] != w[1] {
			t.Errorf("row %d: %s %s -> %s", i, p, srcs[i], dsts[i])
		}
	}
}

// TestFlowsTableVLAN: through the store, which keeps the VLAN, the VLAN
// column sorts (the column itself: internal/capability/flows/query).
func TestFlowsTableVLAN(t *testing.T) {
	r := rec("10.0.0.1", "10.0.0.2", 1000, 80, 6, 500, time.Minute)
	tagged := r
	tagged.VlanID = 100
	// Through the store, where it keeps the VLAN.
	dir := writeRecords(t, 2, []flow.Record{r, tagged})
	_, out, _ := run(t, "flows", "--store", dir, "--json")
	if recs := jsonRecords(t, out); !slices.ContainsFunc(recs, func(r flow.Record) bool { return r.VlanID == 100 }) {
		t.Skip("this store format does not keep vlan_id")
	}
	_, out, _ = run(t, "flows", "--store", dir, "--sort", "vlan_id")
	if head, rows := tableRows(t, out); !slices.Equal(column(t, head, rows, "VLAN")[1:], []string{"100"}) {
		t.Errorf("VLAN column:\n%s", out)
	}
}

// TestFlowsFollow: --follow prints what a writer adds while it runs, once,
// filtered, and nothing from before, in JSON lines and in a table; also
// the records of a segment merged before the follower read it.
func TestFlowsFollow(t *testing.T) {
	for _, asJSON := range []bool{true, false} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			// Compaction when the test says, so that a merge can come
			// right after a write, before the follower read it.
			st, err := store.Open(dir, store.Options{NoBackground: true, CompactFanIn: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			write := func(first, n int) {
				t.Helper()
				var recs []flow.Record
				for i := range n {
					r := rec("10.0.0.1", "10.0.0.2", uint16(first+i), 80, 6, 1000, 0)
					if i%2 == 1 {
						r.Iface = "eth2" // filtered out
					} else {
						r.Iface = "eth1"
					}
					recs = append(recs, r)
				}
				if err := st.Write(context.Background(), recs); err != nil {
					t.Fatal(err)
				}
			}
			write(100, 5) // before: never printed
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out, errOut testutil.Buffer
			args := []string{"--follow", "--store", dir, "--iface", "eth1"}
			if asJSON {
				args = append(args, "--json")
			}
			done := make(chan error, 1)
			go func() { done <- query.Flows(ctx, args, &out, &errOut) }()
			printed := func() []int {
				var got []int
				if asJSON {
					for _, r := range jsonRecords(t, out.String()) {
						got = append(got, int(r.SrcPort))
					}
					return got
				}
				head, rows := tableRows(t, out.String())
				if head == nil {
					return nil
				}
				for _, src := range column(t, head, rows, "SOURCE") {
					got = append(got, int(netip.MustParseAddrPort(src).Port()))
				}
				return got
			}
			waitFor := func(n int) {
				t.Helper()
				for ctx.Err() == nil && len(printed()) < n {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if !asJSON {
				// The header first: the follower runs.
				for ctx.Err() == nil && !strings.Contains(out.String(), "SOURCE") {
					time.Sleep(10 * time.Millisecond)
				}
			}
			time.Sleep(2 * query.FollowPoll) // it has read the first manifest
			var want []int
			for b := range 6 {
				first := 1000 + 100*b
				write(first, 6)
				want = append(want, first, first+2, first+4)
				if b%2 == 1 {
					// Merged at once: the follower may find it only
					// inside the merge.
					if err := st.Maintain(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				waitFor(len(want))
			}
			time.Sleep(2 * query.FollowPoll) // more would be duplicates
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			got := printed()
			if st.Stats().Compactions == 0 {
				t.Error("no compaction")
			}
			if !slices.Equal(got, want) || errOut.String() != "" {
				t.Errorf("followed source ports %v, want %v; stderr %q\n%s", got, want, errOut.String(), out.String())
			}
		})
	}
	dir := writeStore(t)
	for _, extra := range [][]string{{"--sort", "bytes"}, {"--limit", "5"}, {"--since", "5m"}, {"--until", "1m"}} {
		code, _, errOut := run(t, append([]string{"flows", "--store", dir, "--follow"}, extra...)...)
		if code != 1 || !strings.Contains(errOut, "--follow") || !strings.Contains(errOut, extra[0]) {
			t.Errorf("--follow %v: exit %d %q", extra, code, errOut)
		}
	}
}

// TestTopCountsFlowsNotRecords: an hour-long connection evicted every 5 s
// is 720 records each way, and one flow each way.
func TestTopCountsFlowsNotRecords(t *testing.T) {
	var recs []flow.Record
	for i := range 720 {
		age := time.Duration(i) * 5 * time.Second
		out := rec("10.0.0.1", "10.0.0.2", 40000, 443, 6, 1500, age)
		back := rec("10.0.0.2", "10.0.0.1", 443, 40000, 6, 100000, age)
		back.Direction = flow.Ingress
		recs = append(recs, out, back)
	}
	recs = append(recs, rec("10.0.0.1", "10.0.0.3", 40001, 443, 6, 1000, time.Minute))
	dir := writeRecords(t, 50, recs)
	code, out, errOut := run(t, "top", "--store", dir, "--by", "src", "--since", "2h", "--raw")
	head, rows := tableRows(t, out)
	if code != 0 || len(rows) != 2 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	want := [][]string{{"10.0.0.2", "72000000", "720000", "1"}, {"10.0.0.1", "1081000", "10810", "2"}}
	if !slices.Equal(head, []string{"SOURCE", "BYTES", "PACKETS", "FLOWS"}) || !slices.EqualFunc(rows, want, slices.Equal[[]string]) {
		t.Errorf("top --by src:\n%s\nwant rows %v", out, want)
	}
}

// TestTopByServicePort: both directions of a connection count under the
// server's port, from the SYNs, even when the client's port is lower;
// without the SYN the lower port; src-port and dst-port as recorded.
func TestTopByServicePort(t *testing.T) {
	const synAck = flow.TCPSyn | flow.TCPAck
	conn := func(client, server string, cport, sport uint16, age time.Duration, flags uint16) []flow.Record {
		c := rec(client, server, cport, sport, 6, 2000, age)
		s := rec(server, client, sport, cport, 6, 50000, age)
		c.TCPFlags, s.TCPFlags = flags, flags
		s.FirstSeen = c.FirstSeen.Add(time.Millisecond) // the SYN+ACK after the SYN
		return []flow.Record{c, s}
	}
	var recs []flow.Record
	// Three connections from low client ports to 8443, over two
	// evictions each: the SYNs in the first.
	for i := range 3 {
		cport := uint16(1000 + i)
		recs = append(recs, conn("10.0.0.1", "10.0.0.2", cport, 8443, 10*time.Second, synAck)...)
		recs = append(recs, conn("10.0.0.1", "10.0.0.2", cport, 8443, 5*time.Second, flow.TCPAck)...)
	}
	// One whose SYNs were two hours ago: in the last hour, the lower port.
	recs = append(recs, conn("10.0.0.3", "10.0.0.2", 2000, 9000, 2*time.Hour, synAck)...)
	recs = append(recs, conn("10.0.0.3", "10.0.0.2", 2000, 9000, time.Minute, flow.TCPAck)...)
	dir := writeRecords(t, 5, recs)

	jsonTop := func(args ...string) []map[string]any {
		t.Helper()
		code, out, errOut := run(t, append([]string{"top", "--store", dir, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("top %v: exit %d: %s", args, code, errOut)
		}
		var rows []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("bad line %q: %v", l, err)
			}
			rows = append(rows, m)
		}
		return rows
	}
	got := fmt.Sprint(jsonTop("--by", "port"))
	want := "[map[accuracy:exact bytes:312000 flows:6 packets:3120 port:8443 proto:6] map[accuracy:exact bytes:52000 flows:2 packets:520 port:2000 proto:6]]"
	if got != want {
		t.Errorf("top --by port:\n got %s\nwant %s", got, want)
	}
	// With the window reaching the old SYNs, 9000 is the service.
	got = fmt.Sprint(jsonTop("--by", "port", "--since", "3h", "-n", "1", "--src", "10.0.0.3"))
	if want := "[map[accuracy:exact bytes:4000 flows:1 packets:40 port:9000 proto:6]]"; got != want {
		t.Errorf("top --by port --since 3h --src 10.0.0.3:\n got %s\nwant %s", got, want)
	}
	// The explicit groupings: each record's own port.
	got = fmt.Sprint(jsonTop("--by", "dst-port", "-n", "2"))
	if want := "[map[accuracy:exact bytes:100000 dst_port:1000 flows:1 packets:1000 proto:6] map[accuracy:exact bytes:100000 dst_port:1001 flows:1 packets:1000 proto:6]]"; got != want {
		t.Errorf("top --by dst-port:\n got %s\nwant %s", got, want)
	}
	got = fmt.Sprint(jsonTop("--by", "src-port", "-n", "1"))
	if want := "[map[accuracy:exact bytes:300000 flows:3 packets:3000 proto:6 src_port:8443]]"; got != want {
		t.Errorf("top --by src-port:\n got %s\nwant %s", got, want)
	}
	code, out, _ := run(t, "top", "--store", dir, "--by", "port")
	if head, rows := tableRows(t, out); code != 0 || !slices.Equal(head, []string{"PORT", "PROTO", "BYTES", "PACKETS", "FLOWS"}) ||
		!slices.Equal(rows[0], []string{"8443", "tcp", "304.7 KiB", "3120", "6"}) {
		t.Errorf("top --by port table:\n%s", out)
	}
}

// TestTopJSONFieldNames: each grouping's row names its fields as a
// record's JSON does.
func TestTopJSONFieldNames(t *testing.T) {
	recs := []flow.Record{rec("10.0.0.1", "10.0.0.2", 40000, 443, 6, 1000, time.Minute)}
	arp := recs[0]
	arp.EtherType, arp.SrcAddr, arp.DstAddr, arp.Proto, arp.SrcPort, arp.DstPort = flow.EtherTypeARP, [16]byte{}, [16]byte{}, 0, 0, 0
	recs = append(recs, arp)
	dir := writeRecords(t, 2, recs)
	for _, c := range []struct {
		by   string
		want string
	}{
		// Equal totals: the group key decides, non-IP first.
		{"src", `{"src_addr":"","bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}` + "\n" + `{"src_addr":"10.0.0.1","bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}`},
		{"dst", `{"dst_addr":"","bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}` + "\n" + `{"dst_addr":"10.0.0.2","bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}`},
		{"pair", `{"src_addr":"","dst_addr":"","bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}` + "\n" + `{"src_addr":"10.0.0.1","dst_addr":"10.0.0.2","bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}`},
		{"port", `{"port":0,"proto":0,"bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}` + "\n" + `{"port":443,"proto":6,"bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}`},
		{"src-port", `{"src_port":0,"proto":0,"bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}` + "\n" + `{"src_port":40000,"proto":6,"bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}`},
		{"dst-port", `{"dst_port":0,"proto":0,"bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}` + "\n" + `{"dst_port":443,"proto":6,"bytes":1000,"packets":10,"flows":1,"accuracy":"exact"}`},
	} {
		code, out, errOut := run(t, "top", "--store", dir, "--by", c.by, "--json")
		if code != 0 || strings.TrimSpace(out) != c.want || errOut != "" {
			t.Errorf("top --by %s --json: exit %d\n got %s\nwant %s\n%s", c.by, code, out, c.want, errOut)
		}
	}
}

// TestEmptyResultExplained: nothing matched says why on stderr: an empty
// store, an empty window (with the store's span), filters, and whether an
// agent writes the store.
func TestEmptyResultExplained(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "store")
	st, err := store.Open(empty, store.Options{NoBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	old := writeRecords(t, 1, []flow.Record{rec("10.0.0.1", "10.0.0.2", 1, 2, 17, 100, 5*time.Hour)})
	recent := writeStore(t)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"empty store", []string{"--store", empty}, []string{"store:  empty", "agent:  not running (no process holds " + filepath.Join(empty, "LOCK")}},
		{"old records", []string{"--store", old}, []string{"1 record from ", "none in the window", "(--since 1h) to now"}},
		{"filters", []string{"--store", recent, "--proto", "sctp"}, []string{"6 records from ", "4 in the window, none matching the filters"}},
	} {
		for _, cmd := range []string{"flows", "top"} {
			code, out, errOut := run(t, append([]string{cmd}, c.args...)...)
			if code != 0 || out != "" || !strings.HasPrefix(errOut, "loupe "+cmd+": no records matched\n") {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q", c.name, cmd, code, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("%s %s: stderr lacks %q:\n%s", c.name, cmd, w, errOut)
				}
			}
		}
	}
	// An agent writing the store: the lock's holder is this process.
	st, err = store.Open(old, store.Options{NoBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, _, errOut := run(t, "flows", "--store", old)
	if want := fmt.Sprintf("agent:  running (pid %d), writing this store", os.Getpid()); !strings.Contains(errOut, want) {
		t.Errorf("with a writer: stderr lacks %q:\n%s", want, errOut)
	}
}
