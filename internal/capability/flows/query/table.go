package query

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"loupe/internal/flow"
)

// table prints aligned columns. Its widths only grow, so that a table
// printed in batches (--follow) stays aligned as far as it can.
type table struct {
	w      io.Writer
	head   []string
	right  []bool // right-aligned (numbers)
	widths []int
	rows   [][]string
	headed bool
}

func newTable(w io.Writer, head []string, right []bool) *table {
	t := &table{w: w, head: head, right: right, widths: make([]int, len(head))}
	for i, h := range head {
		t.widths[i] = utf8.RuneCountInString(h)
	}
	return t
}

// widen makes the columns at least this wide.
func (t *table) widen(widths []int) {
	for i, w := range widths {
		t.widths[i] = max(t.widths[i], w)
	}
}

func (t *table) add(cells ...string) {
	for i, c := range cells {
		t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
	}
	t.rows = append(t.rows, cells)
}

// flush prints the header (once) and the rows added since the last flush.
func (t *table) flush() error {
	var b strings.Builder
	if !t.headed {
		t.line(&b, t.head)
		t.headed = true
	}
	for _, r := range t.rows {
		t.line(&b, r)
	}
	t.rows = t.rows[:0]
	_, err := io.WriteString(t.w, b.String())
	return err
}

func (t *table) line(b *strings.Builder, cells []string) {
	for i, c := range cells {
		pad := t.widths[i] - utf8.RuneCountInString(c)
		last := i == len(cells)-1
		switch {
		case t.right[i]:
			b.WriteString(strings.Repeat(" ", pad))
			b.WriteString(c)
		case last:
			b.WriteString(c)
		default:
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", pad))
		}
		if !last {
			b.WriteString("  ")
		}
	}
	b.WriteString("\n")
}

// format is how numbers and times are printed.
type format struct {
	raw bool
}

func (f format) bytes(n uint64) string {
	if f.raw {
		return strconv.FormatUint(n, 10)
	}
	return humanBytes(n)
}

func (f format) time(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if f.raw {
		return t.UTC().Format(flow.TimeLayout)
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

// accuracy is the ACCURACY cell of counts: empty when exact, "decoded"
// for exact counts decoded from the sketch, and for an estimate how far
// over the truth its counts may be, and with what confidence:
// "over by <=17 pkts, <=24.4 KiB (98.1%)" (the percentage rounded down,
// so that it never claims more than it has).
func (f format) accuracy(a flow.Accuracy, maxErrPackets, maxErrBytes uint64, confidence float64) string {
	switch a {
	case flow.Exact:
		return ""
	case flow.Estimated:
		conf := strconv.FormatFloat(confidence, 'g', -1, 64)
		if !f.raw {
			conf = strconv.FormatFloat(math.Floor(confidence*1000)/10, 'f', 1, 64) + "%"
		}
		bytes := f.bytes(maxErrBytes)
		if f.raw {
			bytes += " B" // a bare number next to the packets' would be read as packets
		}
		return fmt.Sprintf("over by <=%d pkts, <=%s (%s)", maxErrPackets, bytes, conf)
	}
	return a.String()
}

// duration is a time in nanoseconds: exactly with --raw, else to three or
// four significant digits (310µs, 2.438ms, 1.25s).
func (f format) duration(ns uint64) string {
	if f.raw {
		return strconv.FormatUint(ns, 10)
	}
	d := time.Duration(min(ns, math.MaxInt64))
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

// signalCells fills the cells of the kernel signals, DNS and tunnel of
// r's row, each empty where r did not measure it.
func (f format) signalCells(row *[numCells]string, r *flow.Record) {
	if r.Has.Any(flow.HasRTT) {
		row[cellRTT] = f.duration(r.RTTLastNs) + " (" + f.duration(r.RTTMinNs) + "-" + f.duration(r.RTTMaxNs) + ")"
	}
	if r.Has.Any(flow.HasHandshakeRTT) {
		row[cellHandshake] = f.duration(r.HandshakeRTTNs)
	}
	if r.Has.Any(flow.HasRetransmits) {
		row[cellRetrans] = strconv.FormatUint(r.Retransmits, 10)
	}
	if r.Has.Any(flow.HasDrops) {
		row[cellDrops] = strconv.FormatUint(r.DropPackets, 10)
		if len(r.DropReasons) > 0 {
			row[cellDrops] += " " + r.DropReasons.String()
		}
	}
	if r.Has.Any(flow.HasDNSID | flow.HasDNSQName | flow.HasDNSRcode | flow.HasDNSLatency) {
		var parts []string
		if r.Has.Any(flow.HasDNSQName) {
			parts = append(parts, r.DNSQName)
		}
		if r.Has.Any(flow.HasDNSRcode) {
			parts = append(parts, flow.RcodeName(r.DNSRcode))
		} else {
			parts = append(parts, "no response")
		}
		if r.Has.Any(flow.HasDNSLatency) {
			parts = append(parts, f.duration(r.DNSLatencyNs))
		}
		if r.Has.Any(flow.HasDNSID) {
			parts = append(parts, fmt.Sprintf("id %d", r.DNSID))
		}
		row[cellDNS] = strings.Join(parts, " ")
	}
	if r.Has.Any(flow.HasTunnelType) {
		t := r.TunnelType.String()
		if r.Has.Any(flow.HasTunnelID) {
			t += " " + strconv.FormatUint(uint64(r.TunnelID), 10)
		}
		t += " " + outerEnd(r.OuterSrcAddr, r.OuterSrcPort, r.Has.Any(flow.HasOuterSrcPort)) +
			" > " + outerEnd(r.OuterDstAddr, r.OuterDstPort, r.Has.Any(flow.HasOuterDstPort))
		row[cellTunnel] = t
	}
}

// outerEnd is a tunnel's outer address, with its port if it has one.
func outerEnd(a netip.Addr, port uint16, hasPort bool) string {
	if hasPort {
		return netip.AddrPortFrom(a, port).String()
	}
	return a.String()
}

// approx marks an estimated count.
func approx(count string, estimated bool) string {
	if estimated {
		return "~" + count
	}
	return count
}

// etherTypeNames names the EtherTypes of non-IP flows a host commonly sees.
var etherTypeNames = map[uint16]string{
	flow.EtherTypeARP: "arp",
	0x8035:            "rarp",
	0x888e:            "eapol",
	0x88cc:            "lldp",
	0x88f7:            "ptp",
	0x8809:            "slow", // LACP and other slow protocols
	0x8863:            "pppoe-disc",
	0x8864:            "pppoe",
	0x8847:            "mpls",
	0x8848:            "mpls-mc",
}

// protoColumn names the protocol, with the type and code for ICMP, which
// the record carries in the port fields; a non-IP flow shows its
// EtherType.
func protoColumn(r *flow.Record) string {
	switch {
	case !r.IsIP():
		if n, ok := etherTypeNames[r.EtherType]; ok {
			return fmt.Sprintf("%s (%#04x)", n, r.EtherType)
		}
		return fmt.Sprintf("ethertype %#04x", r.EtherType)
	case r.PortKind() == flow.ICMPTypeCode && r.SrcIP().IsValid():
		return fmt.Sprintf("%s %d/%d", flow.ProtoName(r.Proto), r.SrcPort, r.DstPort)
	}
	return flow.ProtoName(r.Proto)
}

// endpoints are the source and destination columns: address and port, or
// the MAC addresses of a non-IP flow (and of an IPv4 header cut short
// before its addresses).
func endpoints(r *flow.Record) (src, dst string) {
	return endpoint(r.SrcIP(), r.SrcPort, &r.SrcMAC, r), endpoint(r.DstIP(), r.DstPort, &r.DstMAC, r)
}

func endpoint(a netip.Addr, port uint16, mac *[6]byte, r *flow.Record) string {
	if !a.IsValid() {
		return string(flow.AppendMAC(nil, mac))
	}
	if r.AggPrefix != 0 {
		// An aggregate's endpoints are prefixes (IPv4: at most /32).
		bits := int(r.AggPrefix)
		if a.Is4() {
			bits = min(bits, 32)
		}
		return netip.PrefixFrom(a, bits).String()
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
