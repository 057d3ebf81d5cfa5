package query

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"loupe/internal/cli"
	"loupe/internal/flow"
	"loupe/internal/store"
)

// The UI's views over the store that are neither records nor top rows:
// the traffic over time (the Overview) and the topology. Each is computed
// here once, for `loupe traffic` and `loupe topology` and for their API
// routes alike, from the same flags, so that the page and `--json` print
// the same document.

// Traffic is the body of GET /api/v1/traffic and what `loupe traffic
// --json` prints: the bytes and packets of the matching records over time,
// by interface and direction, their protocol mix and their totals. A
// record counts in the bucket of its last_seen.
type Traffic struct {
	Since       time.Time       `json:"since"`
	Until       time.Time       `json:"until"`
	StepSeconds float64         `json:"step_seconds"`
	Series      []TrafficSeries `json:"series"`
	Protocols   []ProtocolShare `json:"protocols"`
	Totals      Totals          `json:"totals"`
}

// TrafficSeries is one interface and direction: Points are [bucket start
// (Unix seconds), bytes, packets], oldest first, empty buckets left out.
type TrafficSeries struct {
	Iface     string      `json:"iface"`
	Direction string      `json:"direction"`
	Points    [][3]uint64 `json:"points"`
}

// ProtocolShare is one IP protocol's part of the traffic.
type ProtocolShare struct {
	Proto uint8  `json:"proto"`
	Name  string `json:"name"`
	Totals
}

// Totals are sums over records.
type Totals struct {
	Bytes   uint64 `json:"bytes"`
	Packets uint64 `json:"packets"`
	Flows   uint64 `json:"flows"`
}

// maxBuckets bounds a series: a step too small for the window is widened.
const maxBuckets = 2000

// trafficRequest is a parsed `loupe traffic`: the filters and the step.
type trafficRequest struct {
	q      *queryFlags
	step   *string
	asJSON *bool
	raw    *bool
}

const trafficSynopsis = "[--step D] [--since D|TIME] [--until D|TIME] [--src CIDR] [--dst CIDR] [--port N] [--proto P] [--iface GLOB] " +
	"[--direction ingress|egress] [--namespace NS] [--workload [NS/]NAME] [--min-rtt D] [--has SIGNAL] [--accuracy A] [--raw] [--json] [--store PATH]"

// bindTraffic declares the flags of `loupe traffic` on fs, for the CLI
// and for GET /api/v1/traffic alike.
func bindTraffic(fs *flag.FlagSet) trafficRequest {
	var q queryFlags
	q.bind(fs)
	return trafficRequest{
		q:      &q,
		step:   fs.String("step", "", "the width of a bucket, 1s or more (default: the window in 120 buckets, at most 2000 buckets)"),
		asJSON: fs.Bool("json", false, "print the document GET /api/v1/traffic answers: series, protocols and totals"),
		raw:    fs.Bool("raw", false, "exact numbers: bytes in bytes"),
	}
}

// parseStep returns the step asked for, 0 for the default.
func (t trafficRequest) parseStep() (time.Duration, error) {
	if *t.step == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(*t.step)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("--step %q: want a duration of 1s or more", *t.step)
	}
	return d, nil
}

// trafficOf sums the records of sq over time (the window ends at now
// when sq has no until); step 0 is the window in 120 buckets.
func trafficOf(ctx context.Context, rd *store.Reader, sq store.Query, now time.Time, step time.Duration) (Traffic, error) {
	since, until := sq.Since, cmp.Or(sq.Until, now)
	type key struct {
		iface string
		dir   flow.Direction
	}
	type point struct{ bytes, packets uint64 }
	// The store sums per second (the step may follow from the oldest
	// record, with no since); the buckets are made of the seconds here.
	sums, err := rd.Traffic(ctx, sq)
	if err != nil {
		return Traffic{}, err
	}
	series := map[key]map[int64]*point{}
	for _, pt := range sums.Points {
		k := key{pt.Iface, pt.Direction}
		m := series[k]
		if m == nil {
			m = map[int64]*point{}
			series[k] = m
		}
		m[pt.Sec] = &point{pt.Bytes, pt.Packets}
	}
	protos := map[uint8]*Totals{}
	for p, v := range sums.Protos {
		if v.Records > 0 {
			protos[uint8(p)] = &Totals{Bytes: v.Bytes, Packets: v.Packets, Flows: v.Records}
		}
	}
	tot := Totals{Bytes: sums.Total.Bytes, Packets: sums.Total.Packets, Flows: sums.Total.Records}
	oldest := sums.Oldest
	if since.IsZero() {
		since = cmp.Or(oldest, until)
	}
	window := until.Sub(since)
	if step == 0 {
		step = max(time.Second, (window / 120).Round(time.Second))
	}
	if window/step > maxBuckets {
		step = (window/maxBuckets + time.Second).Truncate(time.Second)
	}
	out := Traffic{Since: since.UTC(), Until: until.UTC(), StepSeconds: step.Seconds(), Totals: tot,
		Series: []TrafficSeries{}, Protocols: []ProtocolShare{}}
	stepSec := int64(step / time.Second)
	for k, m := range series {
		buckets := map[int64]*point{}
		for sec, pt := range m {
			b := sec - (sec-since.Unix())%stepSec
			if sec < since.Unix() {
				b = since.Unix()
			}
			agg := buckets[b]
			if agg == nil {
				agg = &point{}
				buckets[b] = agg
			}
			agg.bytes += pt.bytes
			agg.packets += pt.packets
		}
		ts := TrafficSeries{Iface: k.iface, Direction: k.dir.String()}
		for b, pt := range buckets {
			ts.Points = append(ts.Points, [3]uint64{uint64(b), pt.bytes, pt.packets})
		}
		slices.SortFunc(ts.Points, func(a, b [3]uint64) int { return cmp.Compare(a[0], b[0]) })
		out.Series = append(out.Series, ts)
	}
	slices.SortFunc(out.Series, func(a, b TrafficSeries) int {
		return cmp.Or(strings.Compare(a.Iface, b.Iface), strings.Compare(a.Direction, b.Direction))
	})
	for p, t := range protos {
		out.Protocols = append(out.Protocols, ProtocolShare{Proto: p, Name: flow.ProtoName(p), Totals: *t})
	}
	slices.SortFunc(out.Protocols, func(a, b ProtocolShare) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Proto, b.Proto))
	})
	return out, nil
}

func trafficCmd(args []string, stdout, stderr io.Writer) error {
	ctx := context.Background()
	fs := cli.NewFlagSet("traffic", trafficSynopsis, stdout, stderr)
	t := bindTraffic(fs)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	step, err := t.parseStep()
	if err != nil {
		return err
	}
	now := time.Now()
	rd, sq, rep, err := t.q.open(now)
	if err != nil {
		return err
	}
	tr, err := trafficOf(ctx, rd, sq, now, step)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	if *t.asJSON {
		if err := writeJSON(w, tr); err != nil {
			return err
		}
	} else {
		printTraffic(w, &tr, format{raw: *t.raw})
	}
	if err := w.Flush(); err != nil {
		return err
	}
	reportSkipped(stderr, rep)
	if tr.Totals.Flows == 0 {
		explainEmpty(ctx, stderr, "traffic", rd, t.q, sq, now)
	}
	return nil
}

// writeJSON writes v as the API answers it (api.WriteJSON), byte for
// byte.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printTraffic prints the totals, the protocol mix and each series'
// sums; the points themselves are for --json (or a chart).
func printTraffic(w io.Writer, tr *Traffic, f format) {
	fmt.Fprintf(w, "%s to %s, %g s buckets: %s, %d packets, %d flow records\n\n", tr.Since.Format(time.RFC3339), tr.Until.Format(time.RFC3339),
		tr.StepSeconds, f.bytes(tr.Totals.Bytes), tr.Totals.Packets, tr.Totals.Flows)
	if tr.Totals.Flows == 0 {
		return
	}
	pt := newTable(w, []string{"PROTO", "BYTES", "PACKETS", "FLOWS", "SHARE"}, []bool{false, true, true, true, true})
	for _, p := range tr.Protocols {
		pt.add(p.Name, f.bytes(p.Bytes), strconv.FormatUint(p.Packets, 10), strconv.FormatUint(p.Flows, 10),
			fmt.Sprintf("%.1f %%", 100*float64(p.Bytes)/float64(max(tr.Totals.Bytes, 1))))
	}
	pt.flush()
	fmt.Fprintln(w)
	st := newTable(w, []string{"IFACE", "DIR", "BYTES", "PACKETS", "BUCKETS", "PEAK BYTES/S"}, []bool{false, false, true, true, true, true})
	for _, s := range tr.Series {
		var b, p, peak uint64
		for _, x := range s.Points {
			b, p, peak = b+x[1], p+x[2], max(peak, x[1])
		}
		st.add(s.Iface, s.Direction, f.bytes(b), strconv.FormatUint(p, 10), strconv.Itoa(len(s.Points)), f.bytes(uint64(float64(peak)/tr.StepSeconds)))
	}
	st.flush()
}

// Topology is the body of GET /api/v1/topology and what `loupe topology
// --json` prints: the endpoints of the heaviest conversations (the pairs
// `loupe top --by pair` ranks first) and the conversations between them.
type Topology struct {
	Nodes []TopologyNode `json:"nodes"`
	Edges []TopologyEdge `json:"edges"`
	// Truncated is set when more pairs matched than n: the lightest were
	// left out.
	Truncated bool `json:"truncated"`
}

// TopologyNode is an endpoint: its address and the bytes of its edges.
type TopologyNode struct {
	Addr  string `json:"addr"`
	Bytes uint64 `json:"bytes"`
}

// TopologyEdge is a conversation from Src to Dst.
type TopologyEdge struct {
	Src     string `json:"src_addr"`
	Dst     string `json:"dst_addr"`
	Bytes   uint64 `json:"bytes"`
	Packets uint64 `json:"packets"`
	// Flows is left out when not counted (--flows=false).
	Flows *uint64 `json:"flows,omitempty"`
}

// maxTopologyEdges bounds n: past a few thousand edges no layout is
// readable, and the page groups endpoints instead.
const maxTopologyEdges = 5000

const topologySynopsis = "[-n N] [--flows=false] [--since D|TIME] [--until D|TIME] [--src CIDR] [--dst CIDR] [--port N] [--proto P] [--iface GLOB] " +
	"[--direction ingress|egress] [--namespace NS] [--workload [NS/]NAME] [--min-rtt D] [--has SIGNAL] [--accuracy A] [--raw] [--json] [--store PATH]"

// topologyRequest is a parsed `loupe topology`: the filters and how many
// pairs.
type topologyRequest struct {
	q      *queryFlags
	n      *int
	flows  *bool
	asJSON *bool
	raw    *bool
}

// bindTopology declares the flags of `loupe topology` on fs, for the CLI
// and for GET /api/v1/topology alike.
func bindTopology(fs *flag.FlagSet) topologyRequest {
	var q queryFlags
	q.bind(fs)
	return topologyRequest{
		q: &q,
		n: fs.Int("n", 300, fmt.Sprintf("how many pairs, the heaviest by bytes (1..%d)", maxTopologyEdges)),
		flows: fs.Bool("flows", true, "count each conversation's distinct flows; false leaves them out, which is faster over many records "+
			"(pairs of equal bytes and packets are then ordered by their addresses alone)"),
		asJSON: fs.Bool("json", false, "print the document GET /api/v1/topology answers: nodes, edges and whether pairs were left out"),
		raw:    fs.Bool("raw", false, "exact numbers: bytes in bytes"),
	}
}

func (t topologyRequest) check() error {
	if *t.n < 1 || *t.n > maxTopologyEdges {
		return fmt.Errorf("-n %d: want 1..%d", *t.n, maxTopologyEdges)
	}
	return nil
}

// topologyOf returns the n heaviest pairs of sq and their endpoints, and
// their flows if flows is set.
func topologyOf(ctx context.Context, rd *store.Reader, sq store.Query, n int, flows bool) (Topology, error) {
	// One more than asked: whether there were more is worth saying.
	var rows []store.TopEntry
	var err error
	if flows {
		rows, err = rd.TopBy(ctx, sq, store.ByPair, store.SortBytes, n+1)
	} else {
		rows, err = rd.TopUncounted(ctx, sq, store.ByPair, n+1)
	}
	if err != nil {
		return Topology{}, err
	}
	out := Topology{Nodes: []TopologyNode{}, Edges: []TopologyEdge{}}
	if len(rows) > n {
		rows, out.Truncated = rows[:n], true
	}
	nodes := map[string]*TopologyNode{}
	node := func(a netip.Addr, b uint64) string {
		s := ""
		if a.IsValid() {
			s = a.String()
		}
		n := nodes[s]
		if n == nil {
			n = &TopologyNode{Addr: s}
			nodes[s] = n
		}
		n.Bytes += b
		return s
	}
	for _, e := range rows {
		edge := TopologyEdge{Src: node(e.Src, e.Bytes), Dst: node(e.Dst, e.Bytes), Bytes: e.Bytes, Packets: e.Packets}
		if flows {
			edge.Flows = &e.Flows
		}
		out.Edges = append(out.Edges, edge)
	}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, *n)
	}
	slices.SortFunc(out.Nodes, func(a, b TopologyNode) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Addr, b.Addr))
	})
	return out, nil
}

func topologyCmd(args []string, stdout, stderr io.Writer) error {
	ctx := context.Background()
	fs := cli.NewFlagSet("topology", topologySynopsis, stdout, stderr)
	t := bindTopology(fs)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	if err := t.check(); err != nil {
		return err
	}
	now := time.Now()
	rd, sq, rep, err := t.q.open(now)
	if err != nil {
		return err
	}
	topo, err := topologyOf(ctx, rd, sq, *t.n, *t.flows)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	if *t.asJSON {
		if err := writeJSON(w, topo); err != nil {
			return err
		}
	} else if len(topo.Edges) > 0 {
		f := format{raw: *t.raw}
		fmt.Fprintf(w, "%d endpoints, %d conversations", len(topo.Nodes), len(topo.Edges))
		if topo.Truncated {
			fmt.Fprintf(w, " (the heaviest %d pairs: -n for more)", len(topo.Edges))
		}
		fmt.Fprint(w, "\n\n")
		tab := newTable(w, []string{"SOURCE", "DESTINATION", "BYTES", "PACKETS", "FLOWS"}, []bool{false, false, true, true, true})
		for _, e := range topo.Edges {
			flows := "-" // not counted
			if e.Flows != nil {
				flows = strconv.FormatUint(*e.Flows, 10)
			}
			tab.add(nonIP(e.Src), nonIP(e.Dst), f.bytes(e.Bytes), strconv.FormatUint(e.Packets, 10), flows)
		}
		tab.flush()
	}
	if err := w.Flush(); err != nil {
		return err
	}
	reportSkipped(stderr, rep)
	if len(topo.Edges) == 0 {
		explainEmpty(ctx, stderr, "topology", rd, t.q, sq, now)
	}
	return nil
}

// nonIP names the endpoint of a record without addresses in a table.
func nonIP(addr string) string { return cmp.Or(addr, "non-IP") }
