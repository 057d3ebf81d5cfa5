package datapath

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
)

// The DNS capability's maps (bpf/dns/dns.h): queries awaiting their
// response, the last exchange of each flow per interval (a pair that swaps
// with the flow tables), counters and per-message statistics. The DNS unit
// (internal/capability/dns) drains them; the datapath sizes them and
// translates their layout into Go types.

// DNSSizes size the DNS capability's tables.
type DNSSizes struct {
	// Pending is the number of queries awaiting their response at once;
	// past it, queries are counted (pending_full) and not timed.
	Pending int
	// Flows is the number of flows with a DNS result per interval (each
	// table of the pair); past it, results are counted (results_full).
	Flows int
}

// DefaultDNSSizes are the sizes when the configuration says nothing.
func DefaultDNSSizes() DNSSizes { return DNSSizes{Pending: 4096, Flows: 8192} }

// MaxDNSName is the number of bytes of a query name the kernel keeps, in
// wire format (bpf/dns/dns.h DNS_NAME_MAX).
const MaxDNSName = 64

func checkTableSize(what string, n int) error {
	if n < 1 || n > 1<<20 {
		return fmt.Errorf("%s %d: must be 1 to %d", what, n, 1<<20)
	}
	return nil
}

// sizeDNS sizes the DNS maps of spec; off, at their smallest (the object
// names them, so they are created all the same).
func sizeDNS(spec *ebpf.CollectionSpec, s DNSSizes, on bool) error {
	if !on {
		s = DNSSizes{Pending: 1, Flows: 1}
	}
	if err := checkTableSize("DNS pending queries", s.Pending); err != nil {
		return err
	}
	if err := checkTableSize("DNS flows", s.Flows); err != nil {
		return err
	}
	spec.Maps[loupeMapDnsQueries].MaxEntries = uint32(s.Pending)
	spec.Maps[loupeMapDnsFlowsA].MaxEntries = uint32(s.Flows)
	spec.Maps[loupeMapDnsFlowsB].MaxEntries = uint32(s.Flows)
	return nil
}

// The flags of struct dns_result and struct dns_query (enum dns_flag).
const (
	dnsFlagResponse  = uint8(loupeDnsFlagDNS_F_RESPONSE)
	dnsFlagMatched   = uint8(loupeDnsFlagDNS_F_MATCHED)
	dnsFlagTruncated = uint8(loupeDnsFlagDNS_F_NAME_TRUNCATED)
	dnsFlagNameBad   = uint8(loupeDnsFlagDNS_F_NAME_BAD)
	dnsFlagTCP       = uint8(loupeDnsFlagDNS_F_TCP)
)

// DNSResult is what a flow's DNS traffic said in an interval: its last
// exchange (a query's flow: the query; a response's flow: the response and
// its query), or a query of the flow that timed out.
type DNSResult struct {
	ID uint16
	// QName is the query's name, dotted ("." for the root), with bytes
	// other than letters, digits, '-', '_' and '*' escaped as in a zone
	// file (\. \\ \DDD); a name longer than the kernel keeps (MaxDNSName
	// bytes in wire format) is cut and ends with "..." (QNameTruncated).
	// Empty when the question did not parse, or the response had none and
	// no query was matched.
	QName          string
	QNameTruncated bool
	// Response: a response was seen, and Rcode is its response code.
	Response bool
	Rcode    uint8
	// Matched: the response was matched to its query, and Latency is the
	// response's time at the hook less the query's (the same clock).
	Matched bool
	Latency time.Duration
	// Timeout: a query of this flow had no response within the timeout
	// (DrainDNS); ID and QName are its.
	Timeout bool
	TCP     bool
}

// RcodeName is the name of a DNS response code (RFC 1035, RFC 6895 and
// the IANA registry): NOERROR, FORMERR, SERVFAIL, NXDOMAIN, ...; RCODEn for
// the codes not assigned. The header holds 4 bits; the extended codes of
// EDNS (BADVERS and up) are in an OPT record, which the kernel does not
// read.
func RcodeName(code uint8) string { return flow.RcodeName(uint16(code)) }

// RcodeName is the result's response code by name; "" unless Response.
func (r DNSResult) RcodeName() string {
	if !r.Response {
		return ""
	}
	return RcodeName(r.Rcode)
}

// DNSName makes a dotted name of the first bytes of a name in wire format
// (length-prefixed labels). truncated says the name goes on past wire: its
// last label may be cut, and the result ends with "...".
func DNSName(wire []byte, truncated bool) string {
	var b strings.Builder
	labels := 0
	for i := 0; i < len(wire); {
		l := int(wire[i])
		i++
		if l == 0 {
			break
		}
		label := wire[i:min(i+l, len(wire))]
		i += l
		if len(label) == 0 {
			break
		}
		if labels > 0 {
			b.WriteByte('.')
		}
		labels++
		for _, c := range label {
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '*':
				b.WriteByte(c)
			case c == '.' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			default:
				fmt.Fprintf(&b, "\\%03d", c)
			}
		}
	}
	if truncated {
		b.WriteString("...")
	} else if labels == 0 {
		return "."
	}
	return b.String()
}

func dnsNameOf(name []byte, n uint8, flags uint8) string {
	if flags&dnsFlagNameBad != 0 || n == 0 {
		return ""
	}
	return DNSName(name[:min(int(n), len(name))], flags&dnsFlagTruncated != 0)
}

func dnsResultFromBPF(v *loupeDnsResult) DNSResult {
	return DNSResult{
		ID:             v.Id,
		QName:          dnsNameOf(v.Name[:], v.NameLen, v.Flags),
		QNameTruncated: v.Flags&dnsFlagTruncated != 0 && v.Flags&dnsFlagNameBad == 0,
		Response:       v.Flags&dnsFlagResponse != 0,
		Rcode:          v.Rcode,
		Matched:        v.Flags&dnsFlagMatched != 0,
		Latency:        time.Duration(v.LatencyNs),
		TCP:            v.Flags&dnsFlagTCP != 0,
	}
}

// DrainDNS ends the DNS results' interval: it returns, by flow, the last
// exchange of every flow in the interval the flow tables' last swap
// (Rotate) ended, and forgets them. Called right after each Rotate, its
// results are those of the flow records drained from the table Rotate
// returned. It also finds the queries that have waited longer than
// timeout: each is forgotten (a response arriving later counts as
// unmatched) and reported as a Timeout on its query's flow, unless that
// flow's result of the interval is a response.
func (d *Datapath) DrainDNS(timeout time.Duration) (map[flow.Key]DNSResult, error) {
	if !d.hasCapability("dns") {
		return nil, errors.New("the dns capability is not loaded")
	}
	out := map[flow.Key]DNSResult{}
	err := drainStandby(d, d.objs.DnsFlowsA, d.objs.DnsFlowsB, func(k *flow.Key, v *loupeDnsResult) {
		out[*k] = dnsResultFromBPF(v)
	})
	if terr := d.expireDNS(timeout, out); terr != nil {
		err = errors.Join(err, terr)
	}
	return out, err
}

// expireDNS removes the queries older than timeout from the pending
// table and adds them to out as timeouts.
func (d *Datapath) expireDNS(timeout time.Duration, out map[flow.Key]DNSResult) error {
	now := monoNow()
	if uint64(timeout) >= now {
		return nil
	}
	cutoff := now - uint64(timeout)
	var (
		k       loupeDnsQueryKey
		v       loupeDnsQuery
		expired []loupeDnsQueryKey
		queries []loupeDnsQuery
	)
	it := d.objs.DnsQueries.Iterate()
	for it.Next(&k, &v) {
		if v.Time < cutoff {
			expired = append(expired, k)
			queries = append(queries, v)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read pending DNS queries: %w", err)
	}
	for i := range expired {
		// The response may have come since it was read: only the
		// delete that removes the query makes it a timeout.
		if err := d.objs.DnsQueries.Delete(&expired[i]); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				continue
			}
			return fmt.Errorf("remove a timed-out DNS query: %w", err)
		}
		q := &queries[i]
		var fk flow.Key
		keyFromBPF(&fk, &q.Flow)
		if cur, ok := out[fk]; ok && cur.Response {
			continue
		}
		out[fk] = DNSResult{
			ID:             expired[i].Id,
			QName:          dnsNameOf(q.Name[:], q.NameLen, q.Flags),
			QNameTruncated: q.Flags&dnsFlagTruncated != 0 && q.Flags&dnsFlagNameBad == 0,
			Timeout:        true,
			TCP:            q.Flags&dnsFlagTCP != 0,
		}
	}
	return nil
}

// DNSPending counts the queries awaiting their response.
func (d *Datapath) DNSPending() (int, error) {
	var (
		k loupeDnsQueryKey
		v loupeDnsQuery
		n int
	)
	it := d.objs.DnsQueries.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("count pending DNS queries: %w", err)
	}
	return n, nil
}

// DNSStats are the responses the kernel read, by response code, and the
// latency of those matched to their query: every message, where the
// per-flow results keep one exchange per flow and interval.
type DNSStats struct {
	Rcodes  [16]uint64
	Latency LatencyHist
}

// DNSStats reads the DNS statistics, summed over the CPUs.
func (d *Datapath) DNSStats() (DNSStats, error) {
	var s DNSStats
	per, err := perCPUValue[loupeDnsStats](d, d.objs.DnsStats)
	if err != nil {
		return s, err
	}
	for _, v := range per {
		for i, n := range v.Rcodes {
			s.Rcodes[i] += n
		}
		s.Latency.add(v.LatencyNs, v.Hist[:])
	}
	return s, nil
}

// dnsCounterNames follows enum dns_counter.
var dnsCounterNames = [loupeDnsCounterDNS_COUNTER_MAX]string{
	loupeDnsCounterDNS_QUERIES:              "queries",
	loupeDnsCounterDNS_RESPONSES:            "responses",
	loupeDnsCounterDNS_MATCHED:              "matched",
	loupeDnsCounterDNS_UNMATCHED:            "unmatched",
	loupeDnsCounterDNS_REPEATED:             "repeated",
	loupeDnsCounterDNS_PENDING_FULL:         "pending_full",
	loupeDnsCounterDNS_RESULTS_FULL:         "results_full",
	loupeDnsCounterDNS_NAME_TRUNCATED:       "name_truncated",
	loupeDnsCounterDNS_NAME_BAD:             "name_bad",
	loupeDnsCounterDNS_NOT_PARSED_SHORT:     "not_parsed_short",
	loupeDnsCounterDNS_NOT_PARSED_MALFORMED: "not_parsed_malformed",
	loupeDnsCounterDNS_NOT_PARSED_LOAD:      "not_parsed_load",
	loupeDnsCounterDNS_NOT_PARSED_HEADERS:   "not_parsed_headers",
	loupeDnsCounterDNS_TCP_REST_NOT_PARSED:  "tcp_rest_not_parsed",
}

// DNSCounters reads and sums the DNS capability's per-CPU counters.
func (d *Datapath) DNSCounters() ([]Counter, error) {
	return sumCounters(d.objs.DnsCounters, dnsCounterNames[:], d.ncpu)
}
