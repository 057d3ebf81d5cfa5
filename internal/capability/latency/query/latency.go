package query

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"
	"time"

	"loupe/internal/cli"
	"loupe/internal/hop"
	"loupe/internal/store"
)

const defaultStore = "/var/lib/loupe/flows"

const synopsis = "[--store PATH]... [--since D] [--trace ID] [--json] [--clock-sync]"

// Commands are the latency capability's subcommands.
func Commands() []cli.Command {
	return []cli.Command{{Name: "latency", Summary: "print per-hop latency of requests and sampled segments from the store(s)", Run: latencyCmd}}
}

// storeList is the repeatable --store flag.
type storeList []string

func (s *storeList) String() string {
	if s == nil {
		return ""
	}
	return strings.Join(*s, ",")
}

func (s *storeList) Set(v string) error {
	if v == "" {
		return errors.New("want a directory")
	}
	*s = append(*s, v)
	return nil
}

func latencyCmd(args []string, stdout, stderr io.Writer) error {
	flags := cli.NewFlagSet("latency", synopsis, stdout, stderr)
	var (
		stores    storeList
		since     time.Duration
		trace     string
		asJSON    bool
		clockSync bool
	)
	flags.Var(&stores, "store", "store `PATH` (the agent's store.path; default "+defaultStore+"); repeatable: the stores of several nodes' agents are joined")
	flags.DurationVar(&since, "since", time.Hour, "only records of the last `D` (0: all)")
	flags.StringVar(&trace, "trace", "", "only the requests of this trace `ID` (32 hex digits)")
	flags.BoolVar(&asJSON, "json", false, "print one JSON object per record")
	flags.BoolVar(&clockSync, "clock-sync", false, "the nodes' clocks are in sync: report the hop between two nodes one way even if their agents did not say latency.clock_sync")
	if err := cli.Parse(flags, args, stdout); err != nil {
		return err
	}
	if since < 0 {
		return fmt.Errorf("--since %s: want a duration ago, 0 or more", since)
	}
	trace = strings.ToLower(trace)
	if trace != "" && !isHex(trace, 32) {
		return fmt.Errorf("--trace %q: want a trace id of 32 hex digits", trace)
	}
	if len(stores) == 0 {
		stores = storeList{defaultStore}
	}
	var from time.Time
	if since > 0 {
		from = time.Now().Add(-since)
	}
	all, err := readStores(stores, from, func(dir, name string) {
		fmt.Fprintf(stderr, "loupe latency: %s: a damaged record; the rest of the file was skipped\n", dir+"/"+name)
	})
	if err != nil {
		return err
	}
	recs := join(all, clockSync)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	var tw *tabwriter.Writer
	if !asJSON {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tTRACE\tSPAN\tSRC\tDST\tSEQ\tHOPS")
	}
	n := 0
	for _, r := range recs {
		if trace != "" && r.TraceID != trace {
			continue
		}
		n++
		if asJSON {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			w.Write(append(b, '\n'))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Time.Local().Format("15:04:05.000000"), orDash(r.TraceID), orDash(r.SpanID),
			hostPort(r.SrcAddr.String(), r.SrcPort), hostPort(r.DstAddr.String(), r.DstPort), r.Seq, pathText(r))
	}
	if tw != nil {
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if n == 0 {
		fmt.Fprintf(stderr, "loupe latency: no records matched (window: %s; an agent stores them with --latency)\n", windowText(since))
	}
	return w.Flush()
}

// readStores reads the latency records of each store since from; damaged
// names each damaged file whose rest was skipped.
func readStores(stores []string, from time.Time, damaged func(dir, name string)) ([][]*hop.Request, error) {
	var all [][]*hop.Request
	for _, dir := range stores {
		var rs []*hop.Request
		rep, err := store.ReadHops(dir, from, func(r *hop.Request) error {
			rs = append(rs, r)
			return nil
		})
		switch {
		case errors.Is(err, store.ErrNotStore):
			return nil, fmt.Errorf("%w (--store must name an agent's store.path)", err)
		case errors.Is(err, fs.ErrPermission):
			return nil, fmt.Errorf("%w (the store is private to the agent's user: run this as that user or as root)", err)
		case err != nil:
			return nil, err
		}
		for _, n := range rep.Corrupt {
			damaged(dir, n)
		}
		all = append(all, rs)
	}
	return all, nil
}

// pathText is the path in one line: each interface, and between two the
// hop's latency and direction; a hop between nodes names them.
func pathText(r *Record) string {
	if len(r.Hops) == 0 {
		return "-"
	}
	var b strings.Builder
	b.WriteString(ifaceText(r.Hops[0].FromNode, r.Hops[0].FromIface))
	for _, h := range r.Hops {
		fmt.Fprintf(&b, " -[%s %s]-> %s", h.Direction, time.Duration(h.LatencyNs), ifaceText(h.ToNode, h.ToIface))
	}
	if rt := r.RoundTrip; rt != nil {
		fmt.Fprintf(&b, " (round trip %s:%s<->%s:%s %s)", rt.FromNode, rt.FromIface, rt.ToNode, rt.ToIface, time.Duration(rt.LatencyNs))
	}
	return b.String()
}

func ifaceText(node, iface string) string {
	if node == "" {
		return iface
	}
	return node + ":" + iface
}

func hostPort(addr string, port uint16) string {
	if strings.Contains(addr, ":") {
		return fmt.Sprintf("[%s]:%d", addr, port)
	}
	return fmt.Sprintf("%s:%d", addr, port)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func windowText(since time.Duration) string {
	if since == 0 {
		return "all"
	}
	return "the last " + since.String()
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
