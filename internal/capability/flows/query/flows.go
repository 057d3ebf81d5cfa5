package query

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"loupe/internal/cli"
	"loupe/internal/flow"
	"loupe/internal/store"
)

// defaultLimit is how many records the flows table shows without --limit.
const defaultLimit = 50

const flowsSynopsis = "[--since D|TIME] [--until D|TIME] [--src CIDR] [--dst CIDR] [--port N] [--proto P] " +
	"[--iface GLOB] [--direction ingress|egress] [--namespace NS] [--workload [NS/]NAME] " +
	"[--min-rtt D] [--has rtt|handshake_rtt|retransmits|drops|dns] [--accuracy exact|decoded|estimated] [--sort FIELD] [--limit N] [--raw] [--json] [--follow] [--store PATH]"

func flowsCmd(args []string, stdout, stderr io.Writer) error {
	return flows(context.Background(), args, stdout, stderr)
}

// flowsOptions are the flags of `loupe flows` beyond the filters.
type flowsOptions struct {
	json, raw, follow bool
	sort              string
	limit             int
}

// bindFlows declares the flags of `loupe flows` on fs: the CLI parses
// them from its arguments, the API (GET /api/v1/flows) from its URL
// parameters, so that both take the same filters with the same rules.
func bindFlows(fs *flag.FlagSet) (*queryFlags, *flowsOptions) {
	var q queryFlags
	q.bind(fs)
	var o flowsOptions
	fs.BoolVar(&o.json, "json", false, "print one JSON object per line (every record: --limit applies only if given)")
	fs.StringVar(&o.sort, "sort", "last_seen", "sort by this `FIELD`, largest or newest first for counters and times, ascending for the others: "+
		strings.Join(store.OrderNames(), ", ")+"; port is the service port a record says on its own (the destination of a lone SYN, else the lower port)")
	fs.IntVar(&o.limit, "limit", defaultLimit, "print at most this many records, 0 for all (--json: all unless given)")
	fs.BoolVar(&o.raw, "raw", false, "exact numbers: bytes in bytes, times in RFC 3339 UTC with nanoseconds")
	fs.BoolVar(&o.follow, "follow", false, "print the records the agent writes from now on, as it writes them, until interrupted (Ctrl-C)")
	return &q, &o
}

func flows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("flows", flowsSynopsis, stdout, stderr)
	q, o := bindFlows(fs)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	if o.limit < 0 {
		return fmt.Errorf("--limit %d: want 0 (all) or more", o.limit)
	}
	if o.json && !given(fs, "limit") {
		o.limit = 0
	}
	order, err := store.ParseOrder(o.sort)
	if err != nil {
		return fmt.Errorf("--sort: %w", err)
	}
	if o.follow {
		for _, name := range []string{"sort", "limit", "since", "until"} {
			if given(fs, name) {
				return fmt.Errorf("--follow prints records as they are written, from now on: it takes no --%s (run without --follow for past records)", name)
			}
		}
		q.since = timeFlag{}
	}
	now := time.Now()
	rd, sq, rep, err := q.open(now)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	defer w.Flush()
	if o.follow {
		// Until interrupted: Ctrl-C ends a follow, not the process.
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return followFlows(ctx, rd, sq, *o, w, stderr)
	}

	tab := newFlowTable(w, format{raw: o.raw}, order.String() == "first_seen", false)
	var buf []byte
	var printed uint64
	err = rd.Select(ctx, sq, order, o.limit, func(r *flow.Record) error {
		printed++
		if o.json {
			buf = append(flow.AppendJSON(buf[:0], r), '\n')
			_, err := w.Write(buf)
			return err
		}
		tab.add(r)
		return nil
	})
	if err != nil {
		return err
	}
	if err := tab.flush(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	reportSkipped(stderr, rep)
	switch more := rep.Matched - printed; {
	case rep.Matched == 0:
		explainEmpty(ctx, stderr, "flows", rd, q, sq, now)
	case more > 0:
		fmt.Fprintf(stderr, "%d more %s matched (--limit 0 prints all)\n", more, plural(more, "record", "records"))
	}
	return nil
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// The cells of a row of the flows table, in order. VLAN, the Kubernetes
// names, ACCURACY and the kernel signals', DNS and tunnel cells are
// optional: shown when a row has one (a VLAN ID, names, counts that are
// not exact, a field measured), or always when following (the rows to
// come are unknown).
const (
	cellTime = iota
	cellIface
	cellIfacePod
	cellDir
	cellVLAN
	cellProto
	cellSrc
	cellSrcName
	cellDst
	cellDstName
	cellPackets
	cellBytes
	cellFlags
	cellAccuracy
	cellRTT
	cellHandshake
	cellRetrans
	cellDrops
	cellDNS
	cellTunnel
	numCells
)

var (
	flowHead = [numCells]string{"", "IFACE", "IFACE POD", "DIR", "VLAN", "PROTO", "SOURCE", "SRC NAME", "DESTINATION", "DST NAME", "PACKETS", "BYTES", "TCP FLAGS", "ACCURACY",
		"RTT LAST (MIN-MAX)", "HANDSHAKE", "RETRANS", "DROPS", "DNS", "TUNNEL"}
	flowRight = [numCells]bool{cellVLAN: true, cellPackets: true, cellBytes: true, cellHandshake: true, cellRetrans: true}
	// flowWidths are the widths of common cells, for a header printed
	// before any row (following).
	flowWidths = [numCells]int{0, 8, 20, 7, 4, 8, 21, 24, 21, 24, 7, 10, 9, 8, 18, 9, 7, 5, 3, 6}
)

func optionalCell(c int) bool {
	return c == cellVLAN || c == cellIfacePod || c == cellSrcName || c == cellDstName || c >= cellAccuracy
}

// flowTable is the table form of records. Rows are rendered as they come
// (cells, not records, are kept).
type flowTable struct {
	w       io.Writer
	f       format
	first   bool // the time column is first_seen
	always  bool // always show the optional columns
	any     [numCells]bool
	keep    []int // the cells shown, once the header is out
	pending [][numCells]string
	t       *table
}

func newFlowTable(w io.Writer, f format, first, always bool) *flowTable {
	return &flowTable{w: w, f: f, first: first, always: always}
}

func (ft *flowTable) add(r *flow.Record) {
	ts := r.LastSeen
	if ft.first {
		ts = r.FirstSeen
	}
	src, dst := endpoints(r)
	vlan := ""
	if r.VlanID != 0 {
		vlan = strconv.Itoa(int(r.VlanID))
	}
	est := r.Estimated()
	row := [numCells]string{cellTime: ft.f.time(ts), cellIface: r.Iface, cellDir: r.Direction.String(), cellVLAN: vlan,
		cellProto: protoColumn(r), cellSrc: src, cellDst: dst,
		cellPackets: approx(strconv.FormatUint(r.Packets, 10), est), cellBytes: approx(ft.f.bytes(r.Bytes), est), cellFlags: tcpFlags(r),
		cellAccuracy: ft.f.accuracy(r.Accuracy, r.MaxErrorPackets, r.MaxErrorBytes, r.ErrorConfidence)}
	if k := r.K8s; k != nil {
		row[cellSrcName], row[cellDstName] = endName(&k.Src), endName(&k.Dst)
		if k.IfacePod != "" {
			row[cellIfacePod] = k.IfaceNamespace + "/" + k.IfacePod
		}
	}
	ft.f.signalCells(&row, r)
	for c, v := range row {
		if v != "" {
			ft.any[c] = true
		}
	}
	ft.pending = append(ft.pending, row)
}

// flush prints the rows added since the last flush, and the header before
// the first.
func (ft *flowTable) flush() error {
	if ft.t == nil {
		if len(ft.pending) == 0 && !ft.always {
			return nil
		}
		head := flowHead
		head[cellTime] = "LAST SEEN"
		if ft.first {
			head[cellTime] = "FIRST SEEN"
		}
		var names []string
		var right []bool
		for c := range numCells {
			if !optionalCell(c) || ft.always || ft.any[c] {
				ft.keep = append(ft.keep, c)
				names, right = append(names, head[c]), append(right, flowRight[c])
			}
		}
		ft.t = newTable(ft.w, names, right)
		if ft.always {
			// Following, the header goes out before any row: make it as
			// wide as common rows, so that they line up under it (an
			// IPv6 address or a long name still widens its column).
			w := flowWidths
			w[cellTime] = len(ft.f.time(time.Unix(0, 0)))
			ft.t.widen(w[:])
		}
	}
	for _, row := range ft.pending {
		cells := make([]string, len(ft.keep))
		for i, c := range ft.keep {
			cells[i] = row[c]
		}
		ft.t.add(cells...)
	}
	ft.pending = ft.pending[:0]
	return ft.t.flush()
}
