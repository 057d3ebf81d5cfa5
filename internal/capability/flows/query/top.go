package query

import (
	"bufio"
	"context"
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

const topSynopsis = "[--by src|dst|pair|port|src-port|dst-port|namespace|workload|service[,...]] [--sort bytes|rtt|drops|retransmits|dns_latency] [-n N] " +
	"[--since D|TIME] [--until D|TIME] [--src CIDR] [--dst CIDR] [--port N] [--proto P] [--iface GLOB] " +
	"[--direction ingress|egress] [--namespace NS] [--workload [NS/]NAME] [--min-rtt D] [--has SIGNAL] [--accuracy A] [--flows=false] [--raw] [--json] [--store PATH]"

// topRequest is a parsed `loupe top`: the filters, the grouping, the
// ranking and how many rows.
type topRequest struct {
	q      *queryFlags
	by     *string
	sort   *string
	n      *int
	flows  *bool
	asJSON *bool
	raw    *bool
}

// bindTop declares the flags of `loupe top` on fs, for the CLI and for
// GET /api/v1/top alike.
func bindTop(fs *flag.FlagSet) topRequest {
	var q queryFlags
	q.bind(fs)
	return topRequest{
		q: &q,
		by: fs.String("by", "src", "group by `WHAT`: src, dst, pair (addresses); port (the service port: the port of the side that "+
			"accepted the connection, from the SYNs in the window, else the lower port); src-port or dst-port; "+
			"namespace, workload or service (the Kubernetes names of the source and the destination, as a pair; an end without "+
			"that name under its namespace and kind, host and external ends under (host) and (external)); several, separated by commas "+
			"(src,dst,pair,port), give each grouping's rows in turn, a JSON row naming its own (by), in one reading of the store where they share one"),
		sort: fs.String("sort", "bytes", "rank the groups by `WHAT`: bytes (then packets and flows); rtt (the largest RTT a record "+
			"of the group saw), drops (packets dropped), retransmits (segments retransmitted), dns_latency (the slowest DNS answer), "+
			"among the groups whose records measured it"),
		n: fs.Int("n", 10, "how many rows"),
		flows: fs.Bool("flows", true, "count each group's distinct flows; false leaves them out (no FLOWS column, no flows field), "+
			"which is faster over many records; it ranks by bytes alone, and groups of equal bytes and packets by their keys"),
		asJSON: fs.Bool("json", false, "print one JSON object per row, with named fields"),
		raw:    fs.Bool("raw", false, "exact numbers: bytes in bytes"),
	}
}

// parse checks the groupings (one, or several separated by commas), the
// ranking and the row count.
func (t topRequest) parse() ([]store.GroupBy, store.Sort, error) {
	var groups []store.GroupBy
	for name := range strings.SplitSeq(*t.by, ",") {
		group, err := store.ParseGroupBy(name)
		if err != nil {
			return nil, 0, fmt.Errorf("--by: %w", err)
		}
		if slices.Contains(groups, group) {
			return nil, 0, fmt.Errorf("--by: %s twice", group)
		}
		groups = append(groups, group)
	}
	sort, err := store.ParseSort(*t.sort)
	if err != nil {
		return nil, 0, fmt.Errorf("--sort: %w", err)
	}
	if *t.n < 1 {
		return nil, 0, fmt.Errorf("-n %d: want at least 1", *t.n)
	}
	if !*t.flows && sort != store.SortBytes {
		return nil, 0, fmt.Errorf("--sort %s needs the flows counted: --flows=false ranks by bytes alone", *t.sort)
	}
	return groups, sort, nil
}

// rows runs the request on rd: the groups of each grouping, with their
// flows counted, or without (--flows=false), in one reading of the store
// where the groupings share one (Reader.TopUncountedMany).
func (t topRequest) rows(ctx context.Context, rd *store.Reader, sq store.Query, groups []store.GroupBy, sort store.Sort) ([][]store.TopEntry, error) {
	if !*t.flows {
		return rd.TopUncountedMany(ctx, sq, groups, *t.n)
	}
	out := make([][]store.TopEntry, len(groups))
	for i, group := range groups {
		rows, err := rd.TopBy(ctx, sq, group, sort, *t.n)
		if err != nil {
			return nil, err
		}
		out[i] = rows
	}
	return out, nil
}

func topCmd(args []string, stdout, stderr io.Writer) error {
	ctx := context.Background()
	fs := cli.NewFlagSet("top", topSynopsis, stdout, stderr)
	t := bindTop(fs)
	q, asJSON, raw := t.q, t.asJSON, t.raw
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	groups, sort, err := t.parse()
	if err != nil {
		return err
	}
	now := time.Now()
	rd, sq, rep, err := q.open(now)
	if err != nil {
		return err
	}
	answers, err := t.rows(ctx, rd, sq, groups, sort)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	named := len(groups) > 1
	for g, group := range groups {
		rows := answers[g]
		if *asJSON {
			var b []byte
			for i := range rows {
				b = append(appendTopJSON(b[:0], group, &rows[i], *t.flows, named), '\n')
				w.Write(b)
			}
			continue
		}
		if named {
			if g > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "by %s:\n", group)
		}
		if len(rows) > 0 {
			printTopTable(w, group, rows, format{raw: *raw}, *t.flows)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	reportSkipped(stderr, rep)
	if !slices.ContainsFunc(answers, func(rows []store.TopEntry) bool { return len(rows) > 0 }) {
		if sort != store.SortBytes && rep.Matched > 0 {
			fmt.Fprintf(stderr, "no record of the %d that matched measured %s (is that signal on? loupe status says)\n", rep.Matched, sort)
			return nil
		}
		explainEmpty(ctx, stderr, "top", rd, q, sq, now)
	}
	return nil
}

func printTopTable(w io.Writer, group store.GroupBy, rows []store.TopEntry, f format, counted bool) {
	var head []string
	switch group {
	case store.BySrc:
		head = []string{"SOURCE"}
	case store.ByDst:
		head = []string{"DESTINATION"}
	case store.ByPair:
		head = []string{"SOURCE", "DESTINATION"}
	case store.ByPort:
		head = []string{"PORT", "PROTO"}
	case store.BySrcPort:
		head = []string{"SRC PORT", "PROTO"}
	case store.ByDstPort:
		head = []string{"DST PORT", "PROTO"}
	case store.ByNamespace:
		head = []string{"SRC NAMESPACE", "DST NAMESPACE"}
	case store.ByWorkload:
		head = []string{"SRC WORKLOAD", "DST WORKLOAD"}
	case store.ByService:
		head = []string{"SRC SERVICE", "DST SERVICE"}
	}
	right := make([]bool, len(head))
	if len(head) == 2 && head[1] == "PROTO" {
		right[0] = true
	}
	head = append(head, "BYTES", "PACKETS")
	right = append(right, true, true)
	if counted {
		head, right = append(head, "FLOWS"), append(right, true)
	}
	// ACCURACY when a group's sums are not all exact: its estimates'
	// bounds, summed.
	withAccuracy := slices.ContainsFunc(rows, func(e store.TopEntry) bool { return e.Error.Accuracy != flow.Exact })
	if withAccuracy {
		head, right = append(head, "ACCURACY"), append(right, false)
	}
	// A column for each signal a group measured.
	var has flow.Presence
	for _, r := range rows {
		has |= r.Signals.Has
	}
	sigCols := topSignalCols(has)
	for _, c := range sigCols {
		head, right = append(head, c.head), append(right, true)
	}
	t := newTable(w, head, right)
	for _, r := range rows {
		var cells []string
		switch group {
		case store.BySrc:
			cells = []string{addrOrNonIP(r.Src)}
		case store.ByDst:
			cells = []string{addrOrNonIP(r.Dst)}
		case store.ByPair:
			cells = []string{addrOrNonIP(r.Src), addrOrNonIP(r.Dst)}
		case store.ByPort:
			port := strconv.Itoa(int(r.Port))
			if !flow.HasPorts(r.Proto) {
				port = "-"
			}
			cells = []string{port, flow.ProtoName(r.Proto)}
		case store.ByNamespace, store.ByWorkload, store.ByService:
			cells = []string{groupName(&r.SrcK8s), groupName(&r.DstK8s)}
		default:
			cells = []string{strconv.Itoa(int(r.Port)), flow.ProtoName(r.Proto)}
		}
		e := &r.Error
		est := e.Accuracy == flow.Estimated
		cells = append(cells, approx(f.bytes(r.Bytes), est), approx(strconv.FormatUint(r.Packets, 10), est))
		if counted {
			cells = append(cells, strconv.FormatUint(r.Flows, 10))
		}
		if withAccuracy {
			cells = append(cells, f.accuracy(e.Accuracy, e.MaxErrorPackets, e.MaxErrorBytes, e.Confidence()))
		}
		for _, c := range sigCols {
			cells = append(cells, c.cell(f, &r.Signals))
		}
		t.add(cells...)
	}
	t.flush()
}

// appendTopJSON appends one row of `top --json`: its grouping's name (by)
// if named, when a request asked for several; the grouping's fields,
// named as in a record's JSON (src_addr, dst_addr, src_port, dst_port,
// proto; port for the service port), then bytes, packets and flows (if
// counted), and the accuracy of the sums as a record says it: accuracy,
// and for an estimate max_error_packets, max_error_bytes and
// error_confidence.
func appendTopJSON(b []byte, group store.GroupBy, e *store.TopEntry, counted, named bool) []byte {
	addr := func(b []byte, name string, a netip.Addr) []byte {
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":"`...)
		if a.IsValid() {
			b = a.AppendTo(b)
		}
		return append(b, `",`...)
	}
	num := func(b []byte, name string, v uint64) []byte {
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
		b = strconv.AppendUint(b, v, 10)
		return append(b, ',')
	}
	b = append(b, '{')
	if named {
		b = append(b, `"by":"`...)
		b = append(b, group.String()...)
		b = append(b, `",`...)
	}
	switch group {
	case store.BySrc:
		b = addr(b, "src_addr", e.Src)
	case store.ByDst:
		b = addr(b, "dst_addr", e.Dst)
	case store.ByPair:
		b = addr(b, "src_addr", e.Src)
		b = addr(b, "dst_addr", e.Dst)
	case store.ByPort:
		b = num(b, "port", uint64(e.Port))
	case store.BySrcPort:
		b = num(b, "src_port", uint64(e.Port))
	case store.ByDstPort:
		b = num(b, "dst_port", uint64(e.Port))
	case store.ByNamespace, store.ByWorkload, store.ByService:
		b = appendGroupJSON(b, "src", group, &e.SrcK8s)
		b = appendGroupJSON(b, "dst", group, &e.DstK8s)
	}
	if group >= store.ByPort && group <= store.ByDstPort {
		b = num(b, "proto", uint64(e.Proto))
	}
	b = num(b, "bytes", e.Bytes)
	b = num(b, "packets", e.Packets)
	if counted {
		b = num(b, "flows", e.Flows)
	}
	b = append(b, `"accuracy":"`...)
	b = append(b, e.Error.Accuracy.String()...)
	b = append(b, `",`...)
	if e.Error.Accuracy == flow.Estimated {
		b = num(b, "max_error_packets", e.Error.MaxErrorPackets)
		b = num(b, "max_error_bytes", e.Error.MaxErrorBytes)
		b = append(b, `"error_confidence":`...)
		b = strconv.AppendFloat(b, e.Error.Confidence(), 'g', -1, 64)
		b = append(b, ',')
	}
	s := &e.Signals
	for _, v := range []struct {
		name string
		has  flow.Presence
		v    uint64
	}{
		{"rtt_min_ns", flow.HasRTTMin, s.RTTMinNs}, {"rtt_max_ns", flow.HasRTTMax, s.RTTMaxNs},
		{"retransmits", flow.HasRetransmits, s.Retransmits}, {"drop_packets", flow.HasDropPackets, s.DropPackets},
		{"drop_bytes", flow.HasDropBytes, s.DropBytes}, {"dns_latency_ns", flow.HasDNSLatency, s.DNSLatencyMaxNs},
	} {
		if s.Has.Any(v.has) {
			b = num(b, v.name, v.v)
		}
	}
	b[len(b)-1] = '}'
	return b
}

// topSignalCol is a column of loupe top for a signal its groups measured.
type topSignalCol struct {
	head string
	cell func(f format, s *store.SignalSums) string
}

// topSignalCols are the columns of the signals in has: RTT (the smallest
// and largest a record saw), retransmits and drops (summed), the slowest
// DNS answer. A group that did not measure one has "-" in its column.
func topSignalCols(has flow.Presence) []topSignalCol {
	var out []topSignalCol
	cell := func(bit flow.Presence, v func(f format, s *store.SignalSums) string) func(format, *store.SignalSums) string {
		return func(f format, s *store.SignalSums) string {
			if !s.Has.Any(bit) {
				return "-"
			}
			return v(f, s)
		}
	}
	if has.Any(flow.HasRTTMin | flow.HasRTTMax) {
		out = append(out, topSignalCol{"RTT (MIN-MAX)", cell(flow.HasRTTMin|flow.HasRTTMax, func(f format, s *store.SignalSums) string {
			return f.duration(s.RTTMinNs) + "-" + f.duration(s.RTTMaxNs)
		})})
	}
	if has.Any(flow.HasRetransmits) {
		out = append(out, topSignalCol{"RETRANS", cell(flow.HasRetransmits, func(_ format, s *store.SignalSums) string {
			return strconv.FormatUint(s.Retransmits, 10)
		})})
	}
	if has.Any(flow.HasDropPackets) {
		out = append(out, topSignalCol{"DROPS", cell(flow.HasDropPackets, func(_ format, s *store.SignalSums) string {
			return strconv.FormatUint(s.DropPackets, 10)
		})})
	}
	if has.Any(flow.HasDNSLatency) {
		out = append(out, topSignalCol{"DNS LATENCY (MAX)", cell(flow.HasDNSLatency, func(f format, s *store.SignalSums) string {
			return f.duration(s.DNSLatencyMaxNs)
		})})
	}
	return out
}

func reportSkipped(w io.Writer, rep *store.Report) {
	for _, c := range rep.Corrupt {
		fmt.Fprintf(w, "warning: skipped %v\n", c)
	}
}
