package query

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/netip"
	"path"
	"strings"
	"time"

	"loupe/internal/flow"
	"loupe/internal/store"
)

const defaultStore = "/var/lib/loupe/flows"

// defaultSince is the window of `flows` and `top` without --since.
const defaultSince = time.Hour

// queryFlags are the filters `flows` and `top` share.
type queryFlags struct {
	store        string
	since, until timeFlag
	src, dst     string
	port         int
	proto        string
	ifaces       globList
	direction    string
	namespace    string
	workload     string
	minRTT       time.Duration
	has          signalList
	accuracy     string
}

func (q *queryFlags) bind(fs *flag.FlagSet) {
	q.since = timeFlag{ago: defaultSince}
	fs.StringVar(&q.store, "store", defaultStore, "flow store directory")
	fs.Var(&q.since, "since", "only flows seen since `TIME`: a duration ago (5m, 2h30m) or an RFC 3339 time (2026-01-02T15:04:05Z); 0: no bound")
	fs.Var(&q.until, "until", "only flows seen until `TIME`: a duration ago or an RFC 3339 time (default now)")
	fs.StringVar(&q.src, "src", "", "only flows from this CIDR or address")
	fs.StringVar(&q.dst, "dst", "", "only flows to this CIDR or address")
	fs.IntVar(&q.port, "port", -1, "only flows with this source or destination port (ICMP: type)")
	fs.StringVar(&q.proto, "proto", "", "only this IP protocol: a number or a name (tcp, udp, icmp, icmpv6, sctp, ...)")
	fs.Var(&q.ifaces, "iface", "only flows of interfaces matching this `GLOB` (eth0, 'veth*'); repeatable")
	fs.StringVar(&q.direction, "direction", "", "only flows that crossed this hook: ingress or egress")
	fs.StringVar(&q.namespace, "namespace", "", "only flows with an end in this Kubernetes `NAMESPACE` (src_namespace or dst_namespace)")
	fs.StringVar(&q.workload, "workload", "", "only flows with an end in this Kubernetes workload: `NAME` or NAMESPACE/NAME (src_workload or dst_workload)")
	fs.DurationVar(&q.minRTT, "min-rtt", 0, "only flows whose largest smoothed RTT (rtt_max_ns) is at least `D` (500us, 20ms)")
	fs.Var(&q.has, "has", "only flows that measured this `SIGNAL`: "+strings.Join(store.SignalNames(), ", ")+
		" (retransmits and drops: at least one); repeatable or comma-separated, all must hold")
	fs.StringVar(&q.accuracy, "accuracy", "", "only flows whose counters are this exact: exact, decoded or estimated")
}

func (q *queryFlags) query(now time.Time) (store.Query, error) {
	sq := store.NewQuery()
	sq.Since, sq.Until = q.since.at(now), q.until.at(now)
	if !sq.Since.IsZero() && !sq.Until.IsZero() && sq.Since.After(sq.Until) {
		return sq, fmt.Errorf("--since %s is after --until %s", q.since.String(), q.until.String())
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
	sq.Ifaces = q.ifaces
	if q.direction != "" {
		d, err := flow.ParseDirection(q.direction)
		if err != nil {
			return sq, fmt.Errorf("--direction: %w", err)
		}
		sq.Direction = int(d)
	}
	if q.workload != "" {
		if _, _, err := store.ParseWorkload(q.workload); err != nil {
			return sq, fmt.Errorf("--workload: %w", err)
		}
	}
	sq.Namespace, sq.Workload = q.namespace, q.workload
	if q.minRTT < 0 {
		return sq, fmt.Errorf("--min-rtt %v: want 0 or more", q.minRTT)
	}
	sq.MinRTT, sq.Has = q.minRTT, q.has
	if q.accuracy != "" {
		a, err := flow.ParseAccuracy(q.accuracy)
		if err != nil {
			return sq, fmt.Errorf("--accuracy: %w", err)
		}
		sq.Accuracy = []flow.Accuracy{a}
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
		if err != nil {
			return p, fmt.Errorf("invalid prefix %q: %s", s, netipReason(err))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid address %q: %s", s, netipReason(err))
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// netipReason is a netip error without the function name and the input it
// starts with (`netip.ParsePrefix("10.0.0.0/33"): prefix length out of
// range`): the caller names the flag and the value.
func netipReason(err error) string {
	_, reason, ok := strings.Cut(err.Error(), "): ")
	if !ok {
		return err.Error()
	}
	return reason
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

// timeFlag is a point in time given as a duration ago or an RFC 3339
// time. The zero value (and "0") is no bound.
type timeFlag struct {
	ago time.Duration
	abs time.Time
}

func (f *timeFlag) String() string {
	if f == nil {
		return ""
	}
	if !f.abs.IsZero() {
		return f.abs.Format(time.RFC3339Nano)
	}
	return shortDuration(f.ago)
}

// shortDuration is d as it would be typed: 1h rather than 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (f *timeFlag) Set(s string) error {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return fmt.Errorf("a duration ago must not be negative")
		}
		*f = timeFlag{ago: d}
		return nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		*f = timeFlag{abs: t}
		return nil
	}
	return fmt.Errorf("want a duration ago (30s, 5m, 2h30m) or an RFC 3339 time (2026-01-02T15:04:05Z)")
}

// at returns the time relative to now; the zero time is no bound.
func (f *timeFlag) at(now time.Time) time.Time {
	switch {
	case !f.abs.IsZero():
		return f.abs
	case f.ago == 0:
		return time.Time{}
	}
	return now.Add(-f.ago)
}

// globList is a repeatable flag of interface name globs.
type globList []string

func (g *globList) String() string {
	if g == nil {
		return ""
	}
	return strings.Join(*g, ",")
}

func (g *globList) Set(s string) error {
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Errorf("bad glob: %w", err)
	}
	*g = append(*g, s)
	return nil
}

// signalList is the repeatable --has: signals by name, one per flag or
// several separated by commas.
type signalList []store.Signal

func (l *signalList) String() string {
	if l == nil {
		return ""
	}
	names := make([]string, len(*l))
	for i, s := range *l {
		names[i] = s.String()
	}
	return strings.Join(names, ",")
}

func (l *signalList) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		s, err := store.ParseSignal(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		*l = append(*l, s)
	}
	return nil
}

// given reports whether the flag named name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
