package query

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"loupe/internal/cli"
	"loupe/internal/flow"
	"loupe/internal/store"
)

const topSynopsis = "[--by src|dst|pair|port|src-port|dst-port] [-n N] [--since D|TIME] [--until D|TIME] [--src CIDR] [--dst CIDR] " +
	"[--port N] [--proto P] [--iface GLOB] [--direction ingress|egress] [--raw] [--json] [--store PATH]"

func topCmd(args []string, stdout, stderr io.Writer) error {
	ctx := context.Background()
	fs := cli.NewFlagSet("top", topSynopsis, stdout, stderr)
	var q queryFlags
	q.bind(fs)
	by := fs.String("by", "src", "group by `WHAT`: src, dst, pair (addresses); port (the service port: the port of the side that "+
		"accepted the connection, from the SYNs in the window, else the lower port); src-port or dst-port")
	n := fs.Int("n", 10, "how many rows")
	asJSON := fs.Bool("json", false, "print one JSON object per row, with named fields")
	raw := fs.Bool("raw", false, "exact numbers: bytes in bytes")
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	group, err := store.ParseGroupBy(*by)
	if err != nil {
		return fmt.Errorf("--by: %w", err)
	}
	if *n < 1 {
		return fmt.Errorf("-n %d: want at least 1", *n)
	}
	now := time.Now()
	rd, sq, rep, err := q.open(now)
	if err != nil {
		return err
	}
	rows, err := rd.Top(ctx, sq, group, *n)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	if *asJSON {
		var b []byte
		for i := range rows {
			b = append(appendTopJSON(b[:0], group, &rows[i]), '\n')
			w.Write(b)
		}
	} else if len(rows) > 0 {
		printTopTable(w, group, rows, format{raw: *raw})
	}
	if err := w.Flush(); err != nil {
		return err
	}
	reportSkipped(stderr, rep)
	if len(rows) == 0 {
		explainEmpty(ctx, stderr, "top", rd, &q, sq, now)
	}
	return nil
}

func printTopTable(w io.Writer, group store.GroupBy, rows []store.TopEntry, f format) {
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
	}
	right := make([]bool, len(head))
	if len(head) == 2 && head[1] == "PROTO" {
		right[0] = true
	}
	head = append(head, "BYTES", "PACKETS", "FLOWS")
	right = append(right, true, true, true)
	// ACCURACY when a group's sums are not all exact: its estimates'
	// bounds, summed.
	withAccuracy := slices.ContainsFunc(rows, func(e store.TopEntry) bool { return e.Error.Accuracy != flow.Exact })
	if withAccuracy {
		head, right = append(head, "ACCURACY"), append(right, false)
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
		default:
			cells = []string{strconv.Itoa(int(r.Port)), flow.ProtoName(r.Proto)}
		}
		e := &r.Error
		est := e.Accuracy == flow.Estimated
		cells = append(cells, approx(f.bytes(r.Bytes), est), approx(strconv.FormatUint(r.Packets, 10), est), strconv.FormatUint(r.Flows, 10))
		if withAccuracy {
			cells = append(cells, f.accuracy(e.Accuracy, e.MaxErrorPackets, e.MaxErrorBytes, e.Confidence()))
		}
		t.add(cells...)
	}
	t.flush()
}

// appendTopJSON appends one row of `top --json`: the grouping's fields,
// named as in a record's JSON (src_addr, dst_addr, src_port, dst_port,
// proto; port for the service port), then bytes, packets and flows, and
// the accuracy of the sums as a record says it: accuracy, and for an
// estimate max_error_packets, max_error_bytes and error_confidence.
func appendTopJSON(b []byte, group store.GroupBy, e *store.TopEntry) []byte {
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
	}
	if group >= store.ByPort {
		b = num(b, "proto", uint64(e.Proto))
	}
	b = num(b, "bytes", e.Bytes)
	b = num(b, "packets", e.Packets)
	b = num(b, "flows", e.Flows)
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
	b[len(b)-1] = '}'
	return b
}

func reportSkipped(w io.Writer, rep *store.Report) {
	for _, c := range rep.Corrupt {
		fmt.Fprintf(w, "warning: skipped %v\n", c)
	}
}
