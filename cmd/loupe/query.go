package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

const defaultStore = "/var/lib/loupe/flows"

// queryFlags are the filters `flows` and `top` share.
type queryFlags struct {
	store    string
	since    time.Duration
	src, dst string
	port     int
	proto    string
}

func (q *queryFlags) bind(fs *flag.FlagSet, defaultSince time.Duration) {
	fs.StringVar(&q.store, "store", defaultStore, "flow store directory")
	fs.DurationVar(&q.since, "since", defaultSince, "only flows seen in this last duration (0: all)")
	fs.StringVar(&q.src, "src", "", "only flows from this CIDR or address")
	fs.StringVar(&q.dst, "dst", "", "only flows to this CIDR or address")
	fs.IntVar(&q.port, "port", -1, "only flows with this source or destination port (ICMP: type)")
	fs.StringVar(&q.proto, "proto", "", "only this IP protocol: a number or tcp, udp, icmp, icmpv6, sctp")
}

func (q *queryFlags) query(now time.Time) (store.Query, error) {
	sq := store.NewQuery()
	if q.since < 0 {
		return sq, fmt.Errorf("--since %v: must not be negative", q.since)
	}
	if q.since > 0 {
		sq.Since = now.Add(-q.since)
	}
	var err error
	if sq.Src, err = parsePrefix(q.src); err != nil {
		return sq, fmt.Errorf("--src: %w", err)
	}
	if sq.Dst, err = parsePrefix(q.dst); err != nil {
		return sq, fmt.Errorf("--dst: %w", err)
	}
	if q.port < -1 || q.port > 65535 {
		return sq, fmt.Errorf("--port %d: want 0..65535", q.port)
	}
	sq.Port = q.port
	if q.proto != "" {
		p, err := flow.ParseProto(q.proto)
		if err != nil {
			return sq, fmt.Errorf("--proto: %w", err)
		}
		sq.Proto = int(p)
	}
	return sq, nil
}

// parsePrefix accepts a CIDR or a bare address (a /32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// protoColumn names the protocol, with the type and code for ICMP, which
// the record carries in the port fields.
func protoColumn(r *flow.Record) string {
	if r.PortKind() == flow.ICMPTypeCode && r.SrcIP().IsValid() {
		return fmt.Sprintf("%s %d/%d", flow.ProtoName(r.Proto), r.SrcPort, r.DstPort)
	}
	return flow.ProtoName(r.Proto)
}

// open validates the filters and opens the store; the returned report is
// filled by the query.
func (q *queryFlags) open(now time.Time) (*store.Reader, store.Query, *store.Report, error) {
	sq, err := q.query(now)
	if err != nil {
		return nil, sq, nil, err
	}
	rd, err := store.OpenReader(q.store)
	switch {
	case errors.Is(err, store.ErrNotStore):
		return nil, sq, nil, fmt.Errorf("%w (--store must name the agent's store.path)", err)
	case errors.Is(err, fs.ErrPermission):
		return nil, sq, nil, fmt.Errorf("%w (the store is private to the agent's user: run this as that user or as root)", err)
	case err != nil:
		return nil, sq, nil, err
	}
	sq.Report = &store.Report{}
	return rd, sq, sq.Report, nil
}

func flowsCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("flows", "[--store PATH] [--since D] [--src CIDR] [--dst CIDR] [--port N] [--proto P] [--json]", stdout, stderr)
	var q queryFlags
	q.bind(fs, 0)
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	rd, sq, rep, err := q.open(time.Now())
	if err != nil {
		return err
	}

	w := bufio.NewWriterSize(stdout, 64<<10)
	defer w.Flush()
	var tw *tabwriter.Writer
	if !*asJSON {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LAST SEEN\tIFACE\tDIR\tPROTO\tSOURCE\tDESTINATION\tPACKETS\tBYTES\tTCP FLAGS")
	}
	var buf []byte
	err = rd.Scan(context.Background(), sq, func(r *flow.Record) error {
		if *asJSON {
			buf = append(flow.AppendJSON(buf[:0], r), '\n')
			_, err := w.Write(buf)
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n",
			r.LastSeen.Local().Format("2006-01-02 15:04:05.000"), r.Iface, r.Direction, protoColumn(r),
			endpoint(r.SrcIP(), r.SrcPort, r), endpoint(r.DstIP(), r.DstPort, r), r.Packets, r.Bytes, tcpFlags(r))
		return nil
	})
	if tw != nil {
		tw.Flush()
	}
	reportSkipped(stderr, rep)
	return err
}

func topCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("top", "[--by src|dst|pair|port] [--since D] [-n N] [--store PATH]", stdout, stderr)
	var q queryFlags
	q.bind(fs, time.Hour)
	by := fs.String("by", "src", "group by src, dst, pair or port")
	n := fs.Int("n", 10, "how many rows")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	group, err := store.ParseGroupBy(*by)
	if err != nil {
		return fmt.Errorf("--by: %w", err)
	}
	if *n < 1 {
		return fmt.Errorf("-n %d: want at least 1", *n)
	}
	rd, sq, rep, err := q.open(time.Now())
	if err != nil {
		return err
	}
	rows, err := rd.Top(context.Background(), sq, group, *n)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	switch group {
	case store.BySrc:
		fmt.Fprintln(tw, "SOURCE\tBYTES\tPACKETS\tFLOWS\t")
	case store.ByDst:
		fmt.Fprintln(tw, "DESTINATION\tBYTES\tPACKETS\tFLOWS\t")
	case store.ByPair:
		fmt.Fprintln(tw, "SOURCE\tDESTINATION\tBYTES\tPACKETS\tFLOWS\t")
	case store.ByPort:
		fmt.Fprintln(tw, "PORT\tPROTO\tBYTES\tPACKETS\tFLOWS\t")
	}
	for _, r := range rows {
		switch group {
		case store.BySrc:
			fmt.Fprintf(tw, "%s\t", addrOrNonIP(r.Src))
		case store.ByDst:
			fmt.Fprintf(tw, "%s\t", addrOrNonIP(r.Dst))
		case store.ByPair:
			fmt.Fprintf(tw, "%s\t%s\t", addrOrNonIP(r.Src), addrOrNonIP(r.Dst))
		case store.ByPort:
			fmt.Fprintf(tw, "%d\t%s\t", r.Port, flow.ProtoName(r.Proto))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", humanBytes(r.Bytes), r.Packets, r.Flows)
	}
	tw.Flush()
	reportSkipped(stderr, rep)
	return nil
}

func reportSkipped(w io.Writer, rep *store.Report) {
	for _, c := range rep.Corrupt {
		fmt.Fprintf(w, "warning: skipped %v\n", c)
	}
}

func endpoint(a netip.Addr, port uint16, r *flow.Record) string {
	if !a.IsValid() {
		return fmt.Sprintf("ethertype %#04x", r.EtherType)
	}
	if r.PortKind() == flow.TransportPorts {
		return netip.AddrPortFrom(a, port).String()
	}
	return a.String()
}

func addrOrNonIP(a netip.Addr) string {
	if !a.IsValid() {
		return "(non-IP)"
	}
	return a.String()
}

var flagLetters = []struct {
	bit    uint16
	letter byte
}{{flow.TCPFin, 'F'}, {flow.TCPSyn, 'S'}, {flow.TCPRst, 'R'}, {flow.TCPPsh, 'P'}, {flow.TCPAck, 'A'}, {flow.TCPUrg, 'U'}, {flow.TCPEce, 'E'}, {flow.TCPCwr, 'C'}}

func tcpFlags(r *flow.Record) string {
	if !r.IsTCP() {
		return ""
	}
	var b []byte
	for _, f := range flagLetters {
		if r.TCPFlags&f.bit != 0 {
			b = append(b, f.letter)
		}
	}
	return string(b)
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
