package query

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	h := handlers{dir: dir, reader: &sharedReader{}}
	return []api.Route{
		{Method: http.MethodGet, Path: FlowsPath, Access: api.Read, Handler: http.HandlerFunc(h.flows)},
		{Method: http.MethodGet, Path: TopPath, Access: api.Read, Handler: http.HandlerFunc(h.top)},
		{Method: http.MethodGet, Path: TrafficPath, Access: api.Read, Handler: http.HandlerFunc(h.traffic)},
		{Method: http.MethodGet, Path: TopologyPath, Access: api.Read, Handler: http.HandlerFunc(h.topology)},
	}
}

type handlers struct {
	dir    string
	reader *sharedReader
}

// sharedReader is the one store.Reader every request of the routes reads
// through: it keeps the segments a top-N maps and checks from one query to
// the next (a new Reader per request would map and check every segment
// again, the most of a warm query's time), and follows the store as it
// grows. It is opened at the first request, once the agent's store exists.
type sharedReader struct {
	mu sync.Mutex
	rd *store.Reader
}

func (s *sharedReader) get(q *queryFlags, now time.Time) (*store.Reader, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rd == nil {
		rd, _, _, err := q.open(now)
		if err != nil {
			return nil, err
		}
		s.rd = rd
	}
	return s.rd, nil
}

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
	rd, err := h.reader.get(q, now)
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
	groups, sort, err := t.parse()
	if err != nil {
		badRequest(w, err)
		return
	}
	rd, sq, ok := h.open(w, t.q, time.Now())
	if !ok {
		return
	}
	answers, err := t.rows(r.Context(), rd, sq, groups, sort)
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := api.NewLines(w, r)
	for g, group := range groups {
		for i := range answers[g] {
			if out.Add(appendTopJSON(nil, group, &answers[g][i], *t.flows, len(groups) > 1)) != nil {
				return
			}
		}
	}
	out.End()
}

// traffic answers GET /api/v1/traffic: the flags of `loupe traffic`.
func (h handlers) traffic(w http.ResponseWriter, r *http.Request) {
	fs := newFlagSet("traffic")
	t := bindTraffic(fs)
	if err := setFlags(fs, r.URL.Query()); err != nil {
		badRequest(w, err)
		return
	}
	step, err := t.parseStep()
	if err != nil {
		badRequest(w, err)
		return
	}
	now := time.Now()
	rd, sq, ok := h.open(w, t.q, now)
	if !ok {
		return
	}
	out, err := trafficOf(r.Context(), rd, sq, now, step)
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// topology answers GET /api/v1/topology: the flags of `loupe topology`.
func (h handlers) topology(w http.ResponseWriter, r *http.Request) {
	fs := newFlagSet("topology")
	t := bindTopology(fs)
	if err := setFlags(fs, r.URL.Query()); err != nil {
		badRequest(w, err)
		return
	}
	if err := t.check(); err != nil {
		badRequest(w, err)
		return
	}
	rd, sq, ok := h.open(w, t.q, time.Now())
	if !ok {
		return
	}
	out, err := topologyOf(r.Context(), rd, sq, *t.n, *t.flows)
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	api.WriteJSON(w, http.StatusOK, out)
}
