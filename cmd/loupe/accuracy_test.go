package main

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
)

// TestFlowsAndTopSayHowExact: loupe flows marks an estimate's counts and
// says its bounds, a decoded record says so, an exact one says nothing;
// --json carries the record's fields; loupe top sums the bounds of a
// group's estimates.
func TestFlowsAndTopSayHowExact(t *testing.T) {
	conf := -math.Expm1(-4) // a count-min sketch of 4 rows
	exact := rec("10.0.0.1", "10.0.1.1", 40000, 443, 6, 9000, time.Minute)
	decoded := rec("10.0.0.2", "10.0.1.1", 40001, 443, 6, 3000, time.Minute)
	decoded.Accuracy = flow.Decoded
	est1 := rec("10.0.0.1", "10.0.1.2", 40002, 80, 6, 5000, time.Minute)
	est1.Accuracy, est1.MaxErrorPackets, est1.MaxErrorBytes, est1.ErrorConfidence = flow.Estimated, 17, 2500, conf
	est2 := rec("10.0.0.1", "10.0.1.3", 40003, 80, 6, 1000, time.Minute)
	est2.Accuracy, est2.MaxErrorPackets, est2.MaxErrorBytes, est2.ErrorConfidence = flow.Estimated, 3, 300, 0.99
	dir := writeRecords(t, 2, []flow.Record{exact, decoded, est1, est2})

	code, out, errOut := run(t, "flows", "--store", dir, "--sort", "bytes", "--raw")
	if code != 0 {
		t.Fatalf("flows: exit %d: %s", code, errOut)
	}
	head, rows := tableRows(t, out)
	want := [][]string{ // packets, bytes, accuracy: by bytes, largest first
		{"90", "9000", ""},
		{"~50", "~5000", "over by <=17 pkts, <=2500 B (0.9816843611112658)"},
		{"30", "3000", "decoded"},
		{"~10", "~1000", "over by <=3 pkts, <=300 B (0.99)"},
	}
	for i, name := range []string{"PACKETS", "BYTES", "ACCURACY"} {
		got := column(t, head, rows, name)
		for j := range want {
			if got[j] != want[j][i] {
				t.Errorf("flows: row %d %s %q, want %q:\n%s", j, name, got[j], want[j][i], out)
			}
		}
	}
	if _, out, _ := run(t, "flows", "--store", dir, "--sort", "bytes"); !strings.Contains(out, "over by <=17 pkts, <=2.4 KiB (98.1%)") {
		t.Errorf("flows: no human-readable bound (98.168%% rounds down):\n%s", out)
	}
	if _, out, _ := run(t, "flows", "--store", dir, "--dst", "10.0.1.1/32", "--src", "10.0.0.1/32"); strings.Contains(out, "ACCURACY") || !strings.Contains(out, "8.8 KiB") {
		t.Errorf("flows: an ACCURACY column for an exact record alone:\n%s", out)
	}

	code, out, _ = run(t, "flows", "--store", dir, "--sort", "bytes", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 {
		t.Fatalf("flows --json: exit %d:\n%s", code, out)
	}
	for i, w := range []string{`"accuracy":"exact",`, `"accuracy":"estimated","max_error_packets":17,"max_error_bytes":2500,"error_confidence":0.9816843611112658,`,
		`"accuracy":"decoded",`, `"accuracy":"estimated","max_error_packets":3,"max_error_bytes":300,"error_confidence":0.99,`} {
		if !strings.Contains(lines[i], w) || (!strings.Contains(w, "estimated") && strings.Contains(lines[i], "error")) {
			t.Errorf("flows --json line %d: want %s in\n%s", i, w, lines[i])
		}
	}

	// By source: 10.0.0.1 sums an exact record and two estimates, so its
	// sums are an estimate over by at most 17+3 packets and 2500+300
	// bytes, with probability at least 1 - (1-conf) - (1-0.99).
	code, out, _ = run(t, "top", "--store", dir, "--raw")
	head, rows = tableRows(t, out)
	if code != 0 || !slices.Equal(head, []string{"SOURCE", "BYTES", "PACKETS", "FLOWS", "ACCURACY"}) || len(rows) != 2 {
		t.Fatalf("top: exit %d:\n%s", code, out)
	}
	sumConf := 1 - (1 - conf) - 0.01
	if r := rows[0]; !slices.Equal(r[:4], []string{"10.0.0.1", "~15000", "~150", "3"}) || !strings.HasPrefix(r[4], "over by <=20 pkts, <=2800 B (0.9716") {
		t.Errorf("top: row %v, want confidence %v:\n%s", r, sumConf, out)
	}
	if r := rows[1]; !slices.Equal(r, []string{"10.0.0.2", "3000", "30", "1", "decoded"}) {
		t.Errorf("top: row %v:\n%s", r, out)
	}
	code, out, _ = run(t, "top", "--store", dir, "--json")
	type topRow struct {
		Accuracy string   `json:"accuracy"`
		ErrP     *uint64  `json:"max_error_packets"`
		ErrB     *uint64  `json:"max_error_bytes"`
		Conf     *float64 `json:"error_confidence"`
	}
	var tops []topRow
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var e topRow
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("top --json: %q: %v", l, err)
		}
		tops = append(tops, e)
	}
	if code != 0 || len(tops) != 2 {
		t.Fatalf("top --json: exit %d:\n%s", code, out)
	}
	if e := tops[0]; e.Accuracy != "estimated" || e.ErrP == nil || *e.ErrP != 20 || e.ErrB == nil || *e.ErrB != 2800 ||
		e.Conf == nil || math.Abs(*e.Conf-sumConf) > 1e-12 {
		t.Errorf("top --json, 10.0.0.1:\n%s", out)
	}
	if e := tops[1]; e.Accuracy != "decoded" || e.ErrP != nil || e.ErrB != nil || e.Conf != nil {
		t.Errorf("top --json, 10.0.0.2 (decoded: no bounds):\n%s", out)
	}
}
