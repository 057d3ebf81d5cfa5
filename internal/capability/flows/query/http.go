package query

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"loupe/internal/api"
	"loupe/internal/flow"
	"loupe/internal/store"
)

// The flows' query routes (docs/api.md, "Flows").
const (
	FlowsPath    = api.Prefix + "flows"
	TopPath      = api.Prefix + "top"
	TrafficPath  = api.Prefix + "traffic"
	TopologyPath = api.Prefix + "topology"
)

// Headers of GET /api/v1/flows: how many records matched in all, and the
// cursor of the next page when there is one.
const (
	MatchedHeader    = "Loupe-Matched"
	NextCursorHeader = "Loupe-Next-Cursor"
)

// Routes are the routes that answer the flows' queries over the store in
// dir: the same flags as `loupe flows` and `loupe top`, given as URL
// parameters, parsed by the same code, so that the API and the CLI give
// the same answer for the same filters. They read addresses and counters,
// not what the packets carried: access Read.
func Routes(dir string) []api.Route {
	h := handlers{dir: dir}
	return []api.Route{
		{Method: http.MethodGet, Path: FlowsPath, Access: api.Read, Handler: http.HandlerFunc(h.flows)},
		{Method: http.MethodGet, Path: TopPath, Access: api.Read, Handler: http.HandlerFunc(h.top)},
		{Method: http.MethodGet, Path: TrafficPath, Access: api.Read, Handler: http.HandlerFunc(h.traffic)},
		{Method: http.MethodGet, Path: TopologyPath, Access: api.Read, Handler: http.HandlerFunc(h.topology)},
	}
}

type handlers struct{ dir string }

// cliOnly are the flags of the commands that the API does not take: the
// store is the agent's, the output is JSON, and a follow is not a query.
var cliOnly = []string{"store", "json", "raw", "follow"}

// setFlags sets fs's flags from URL parameters of the same names (a
// repeated parameter is a repeated flag). Parameters in own are the
// route's own and are left to the caller; any other unknown name is an
// error, so that a misspelt filter never widens a query silently.
func setFlags(fs *flag.FlagSet, v url.Values, own ...string) error {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(own, k) {
			continue
		}
		if fs.Lookup(k) == nil || slices.Contains(cliOnly, k) {
			return fmt.Errorf("unknown parameter %q", k)
		}
		for _, val := range v[k] {
			if err := fs.Set(k, val); err != nil {
				return fmt.Errorf("%s=%s: %w", k, val, err)
			}
		}
	}
	return nil
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// badRequest answers a parameter error: the CLI's message, its flag named
// as the parameter is.
func badRequest(w http.ResponseWriter, err error) {
	msg := err.Error()
	msg = strings.Replace(msg, "--", "", 1)
	api.WriteError(w, http.StatusBadRequest, msg)
}

// open opens the store for q at now; a store that does not exist yet
// (the agent has written nothing) or cannot be read is the agent's
// failure, 500.
func (h handlers) open(w http.ResponseWriter, q *queryFlags, now time.Time) (*store.Reader, store.Query, bool) {
	q.store = h.dir
	sq, err := q.query(now)
	if err != nil {
		badRequest(w, err)
		return nil, sq, false
	}
	rd, _, _, err := q.open(now)
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return nil, sq, false
	}
	sq.Report = &store.Report{}
	return rd, sq, true
}

// cursor is where the next page of GET /api/v1/flows starts: how many
// records the pages before it held, and the time the first page was
// asked at, which every page's window is computed from, so that a window
// given as a duration ago does not move between pages.
type cursor struct {
	Offset int   `json:"o"`
	Now    int64 `json:"t"`
}

func (c cursor) String() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseCursor(s string) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Offset < 0 || c.Now <= 0 {
		return cursor{}, errors.New("cursor: not one this API gave")
	}
	return c, nil
}

// flows answers GET /api/v1/flows: the records `loupe flows --json`
// prints for the same parameters (every record unless limit is given),
// and with limit a cursor for the next page in Loupe-Next-Cursor.
func (h handlers) flows(w http.ResponseWriter, r *http.Request) {
	fs := newFlagSet("flows")
	q, o := bindFlows(fs)
	v := r.URL.Query()
	if err := setFlags(fs, v, "cursor"); err != nil {
		badRequest(w, err)
		return
	}
	if !given(fs, "limit") {
		o.limit = 0
	}
	if o.limit < 0 {
		badRequest(w, fmt.Errorf("limit %d: want 0 (all) or more", o.limit))
		return
	}
	order, err := store.ParseOrder(o.sort)
	if err != nil {
		badRequest(w, fmt.Errorf("sort: %w", err))
		return
	}
	cur := cursor{Now: time.Now().UnixNano()}
	if s := v.Get("cursor"); s != "" {
		if cur, err = parseCursor(s); err != nil {
			badRequest(w, err)
			return
		}
	}
	now := time.Unix(0, cur.Now)
	rd, sq, ok := h.open(w, q, now)
	if !ok {
		return
	}
	if sq.Until.IsZero() {
		// Pages after the first see the store as of the first: what
		// was written since does not push records from page to page.
		sq.Until = now
	}
	limit := 0
	if o.limit > 0 {
		limit = cur.Offset + o.limit
	}
	out := api.NewLines(w, r)
	skip := cur.Offset
	// The count goes in a header, known only once the query ran: the
	// records are kept until then (a page, or what --json would print).
	var recs [][]byte
	err = rd.Select(r.Context(), sq, order, limit, func(rec *flow.Record) error {
		if skip > 0 {
			skip--
			return nil
		}
		recs = append(recs, flow.AppendJSON(nil, rec))
		return nil
	})
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	matched := sq.Report.Matched
	w.Header().Set(MatchedHeader, strconv.FormatUint(matched, 10))
	if next := cur.Offset + len(recs); o.limit > 0 && uint64(next) < matched {
		w.Header().Set(NextCursorHeader, cursor{Offset: next, Now: cur.Now}.String())
	}
	for _, b := range recs {
		if out.Add(b) != nil {
			return
		}
	}
	out.End()
}

// top answers GET /api/v1/top: the rows of `loupe top --json`.
func (h handlers) top(w http.ResponseWriter, r *http.Request) {
	fs := newFlagSet("top")
	t := bindTop(fs)
	if err := setFlags(fs, r.URL.Query()); err != nil {
		badRequest(w, err)
		return
	}
	group, sort, err := t.parse()
	if err != nil {
		badRequest(w, err)
		return
	}
	rd, sq, ok := h.open(w, t.q, time.Now())
	if !ok {
		return
	}
	rows, err := rd.TopBy(r.Context(), sq, group, sort, *t.n)
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := api.NewLines(w, r)
	for i := range rows {
		if out.Add(appendTopJSON(nil, group, &rows[i])) != nil {
			return
		}
	}
	out.End()
}

// Traffic is the body of GET /api/v1/traffic: the bytes and packets of the
// matching records over time, by interface and direction, their protocol
// mix and their totals. A record counts in the bucket of its last_seen.
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

func (t *Totals) add(r *flow.Record) {
	t.Bytes += r.Bytes
	t.Packets += r.Packets
	t.Flows++
}

// maxBuckets bounds a series: a step too small for the window is widened.
const maxBuckets = 2000

// traffic answers GET /api/v1/traffic: the filters of `loupe flows`, and
// step, the width of a bucket (default: the window in 120 buckets).
func (h handlers) traffic(w http.ResponseWriter, r *http.Request) {
	fs := newFlagSet("traffic")
	q, _ := bindFlows(fs)
	v := r.URL.Query()
	if err := setFlags(fs, v, "step"); err != nil {
		badRequest(w, err)
		return
	}
	if given(fs, "sort") || given(fs, "limit") {
		badRequest(w, errors.New("traffic sums every matching record: it takes no sort or limit"))
		return
	}
	now := time.Now()
	rd, sq, ok := h.open(w, q, now)
	if !ok {
		return
	}
	since, until := sq.Since, cmp.Or(sq.Until, now)
	var step time.Duration
	if s := v.Get("step"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Second {
			badRequest(w, fmt.Errorf("step %q: want a duration of 1s or more", s))
			return
		}
		step = d
	}
	type key struct {
		iface string
		dir   flow.Direction
	}
	type point struct{ bytes, packets uint64 }
	series := map[key]map[int64]*point{}
	protos := map[uint8]*Totals{}
	var tot Totals
	var oldest time.Time
	err := rd.Scan(r.Context(), sq, func(rec *flow.Record) error {
		tot.add(rec)
		p := protos[rec.Proto]
		if p == nil {
			p = &Totals{}
			protos[rec.Proto] = p
		}
		p.add(rec)
		k := key{rec.Iface, rec.Direction}
		m := series[k]
		if m == nil {
			m = map[int64]*point{}
			series[k] = m
		}
		// Seconds now, buckets once the step is known (it may follow
		// from the oldest record, with no since).
		sec := rec.LastSeen.Unix()
		pt := m[sec]
		if pt == nil {
			pt = &point{}
			m[sec] = pt
		}
		pt.bytes += rec.Bytes
		pt.packets += rec.Packets
		if oldest.IsZero() || rec.FirstSeen.Before(oldest) {
			oldest = rec.FirstSeen
		}
		return nil
	})
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
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
	api.WriteJSON(w, http.StatusOK, out)
}

// Topology is the body of GET /api/v1/topology: the endpoints of the
// heaviest conversations (the pairs `loupe top --by pair` ranks first) and
// the conversations between them.
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
	Src string `json:"src_addr"`
	Dst string `json:"dst_addr"`
	Totals
}

// maxTopologyEdges bounds n: past a few thousand edges no layout is
// readable, and the page groups endpoints instead.
const maxTopologyEdges = 5000

// topology answers GET /api/v1/topology: the filters of `loupe top` and n,
// how many pairs (default 300).
func (h handlers) topology(w http.ResponseWriter, r *http.Request) {
	fs := newFlagSet("topology")
	t := bindTop(fs)
	*t.n = 300
	if err := setFlags(fs, r.URL.Query()); err != nil {
		badRequest(w, err)
		return
	}
	if given(fs, "by") || given(fs, "sort") {
		badRequest(w, errors.New("topology ranks pairs by bytes: it takes no by or sort"))
		return
	}
	if *t.n < 1 || *t.n > maxTopologyEdges {
		badRequest(w, fmt.Errorf("n %d: want 1..%d", *t.n, maxTopologyEdges))
		return
	}
	rd, sq, ok := h.open(w, t.q, time.Now())
	if !ok {
		return
	}
	// One more than asked: whether there were more is worth saying.
	rows, err := rd.TopBy(r.Context(), sq, store.ByPair, store.SortBytes, *t.n+1)
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := Topology{Nodes: []TopologyNode{}, Edges: []TopologyEdge{}}
	if len(rows) > *t.n {
		rows, out.Truncated = rows[:*t.n], true
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
		out.Edges = append(out.Edges, TopologyEdge{Src: node(e.Src, e.Bytes), Dst: node(e.Dst, e.Bytes),
			Totals: Totals{Bytes: e.Bytes, Packets: e.Packets, Flows: e.Flows}})
	}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, *n)
	}
	slices.SortFunc(out.Nodes, func(a, b TopologyNode) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Addr, b.Addr))
	})
	api.WriteJSON(w, http.StatusOK, out)
}
