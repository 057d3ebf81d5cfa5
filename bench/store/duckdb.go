package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"loupe/internal/store"
)

// duckResults is what duckdb_compare.py says: DuckDB's load of the CSV,
// and per grouping its warm median and its top 10 rows.
type duckResults struct {
	Version string  `json:"version"`
	Threads any     `json:"threads"`
	LoadS   float64 `json:"load_s"`
	Rows    int64   `json:"rows"`
	Queries map[string]struct {
		FirstMS float64    `json:"first_ms"`
		WarmMS  float64    `json:"warm_ms"`
		SQL     string     `json:"sql"`
		Rows    [][]string `json:"rows"`
	} `json:"queries"`
}

// runDuckDB runs the script on the CSV of the records, over the window of
// q, with runs warm runs per query.
func runDuckDB(script, csv string, q store.Query, runs int) (*duckResults, error) {
	cmd := exec.Command("python3", script, "--csv", csv,
		"--since", strconv.FormatInt(q.Since.UnixNano(), 10), "--until", strconv.FormatInt(q.Until.UnixNano(), 10),
		"--runs", strconv.Itoa(runs))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w", script, err)
	}
	var d duckResults
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		return nil, fmt.Errorf("%s: %w", script, err)
	}
	return &d, nil
}

// duckComparable is one of the store's Top answers over the last hour.
type duckComparable struct {
	by   store.GroupBy
	warm time.Duration
	rows []store.TopEntry
}

// cells are an entry's group, bytes, packets and flows, as DuckDB prints
// them.
func cells(by store.GroupBy, e store.TopEntry) []string {
	var g []string
	switch by {
	case store.BySrc:
		g = []string{e.Src.String()}
	case store.ByDst:
		g = []string{e.Dst.String()}
	case store.ByPair:
		g = []string{e.Src.String(), e.Dst.String()}
	default:
		g = []string{strconv.Itoa(int(e.Port)), strconv.Itoa(int(e.Proto))}
	}
	return append(g, strconv.FormatUint(e.Bytes, 10), strconv.FormatUint(e.Packets, 10), strconv.FormatUint(e.Flows, 10))
}

// report appends the side-by-side section: the store's warm median and
// DuckDB's, per grouping, and whether their answers are the same rows.
func (d *duckResults) report(b *strings.Builder, loupe []duckComparable, runs int) {
	fmt.Fprintf(b, "\n## Same records in DuckDB, same run\n\n")
	fmt.Fprintf(b, "DuckDB %s (PyPI `duckdb`, %v threads), through `bench/store/duckdb_compare.py`: the records above, written as CSV "+
		"(the columns sqlite_compare.sh loads) and loaded in %.1f s into an in-memory table, %d rows, addresses and MACs as text. "+
		"Each query is `SELECT group, SUM(bytes), SUM(packets), COUNT(DISTINCT (every flow key field)) ... WHERE last_seen >= since "+
		"AND first_seen <= until GROUP BY group ORDER BY 2 DESC LIMIT 10`; DuckDB counts the distinct flows of every group, "+
		"the store of the groups that may be among the first 10 only. Warm: the median of %d runs after a first, in this process, "+
		"right after the store's. The store's `port` grouping (service ports, from the SYNs) has no plain SQL form and no DuckDB row.\n\n",
		d.Version, d.Threads, d.LoadS, d.Rows, runs)
	fmt.Fprintf(b, "| grouping | store, warm | DuckDB, warm | DuckDB, first run | same top 10 (bytes, packets, flows) | store < 300 ms | store ≤ DuckDB | distinct flows of the first 10, counted exactly |\n")
	fmt.Fprintf(b, "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	slow := false
	for _, l := range loupe {
		var flows uint64
		for _, e := range l.rows {
			flows += e.Flows
		}
		slow = slow || l.warm >= 300*time.Millisecond
		q, ok := d.Queries[l.by.String()]
		if !ok {
			fmt.Fprintf(b, "| %v | %s | | | | %s | | %d |\n", l.by, ms(l.warm), yes(l.warm < 300*time.Millisecond), flows)
			continue
		}
		same := len(q.Rows) == len(l.rows)
		for i := 0; same && i < len(q.Rows); i++ {
			same = strings.Join(q.Rows[i], " ") == strings.Join(cells(l.by, l.rows[i]), " ")
		}
		duckWarm := time.Duration(q.WarmMS * float64(time.Millisecond))
		fmt.Fprintf(b, "| %v | %s | %.0f ms | %.0f ms | %s | %s | %s | %d |\n", l.by, ms(l.warm), q.WarmMS, q.FirstMS,
			yes(same), yes(l.warm < 300*time.Millisecond), yes(l.warm <= duckWarm), flows)
	}
	if slow {
		fmt.Fprintf(b, "\nWhere the store takes 300 ms or more (**no** above), see where its time goes with "+
			"`go run ./bench/store -dir DIR -query-only -by GROUPING -runs 12 -cpuprofile FILE` on the same data. "+
			"What each reading does: every grouping sums the records (BySrc, ByDst and ByPair from each segment's sums per "+
			"address, kept with the segment); ByPair then sums the pairs of the addresses whose sums reach a floor, in rounds "+
			"that raise it; ByPort first reads the segments' SYN rows; ByPair, ByPort and, warm, the port groupings count the "+
			"flows as they sum, a bit per flow id, and the others in a reading of their own. The flow ids are found once per "+
			"segment by the Reader (in the cold row: nearly every record of these is a flow of its own).\n")
	}
}
