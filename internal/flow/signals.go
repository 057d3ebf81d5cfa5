package flow

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"loupe/internal/tunnel"
)

// Presence is a set of the record's optional fields: one bit per field
// that is present only where it was measured (Record.Has).
//
// The bit numbers are part of the store's format (a segment keeps each
// record's Presence in a column of its own): they never change, and a new
// optional field takes the next free bit.
type Presence uint32

// The optional fields' bits.
const (
	HasRTTMin Presence = 1 << iota
	HasRTTMax
	HasRTTLast
	HasHandshakeRTT
	HasRetransmits
	HasDropPackets
	HasDropBytes
	HasDropReasons
	HasDNSID
	HasDNSQName
	HasDNSRcode
	HasDNSLatency
	HasTunnelType
	HasTunnelID
	HasOuterSrcAddr
	HasOuterDstAddr
	HasOuterSrcPort
	HasOuterDstPort

	// The groups of fields that are measured together.
	HasRTT    = HasRTTMin | HasRTTMax | HasRTTLast
	HasDrops  = HasDropPackets | HasDropBytes | HasDropReasons
	HasTunnel = HasTunnelType | HasOuterSrcAddr | HasOuterDstAddr | HasOuterSrcPort | HasOuterDstPort
)

// Any reports whether any of p's fields is in s.
func (s Presence) Any(p Presence) bool { return s&p != 0 }

// DropReasons counts a record's dropped packets by the kernel's drop
// reason, named as the running kernel's enum skb_drop_reason names it
// without its SKB_DROP_REASON_ prefix (NETFILTER_DROP, NO_SOCKET); a
// reason the enum does not name is its number. A record's map is never
// changed once the record is made: copies of a record share it.
type DropReasons map[string]uint64

// Names returns the reasons, sorted: the order every encoder writes them
// in, so that a record always encodes the same.
func (d DropReasons) Names() []string { return d.AppendNames(nil) }

// AppendNames appends the reasons to dst, sorted, for an encoder that
// allocates nothing (dst on its stack).
func (d DropReasons) AppendNames(dst []string) []string {
	start := len(dst)
	for n := range d {
		dst = append(dst, n)
	}
	slices.Sort(dst[start:])
	return dst
}

// String is the reasons as "NAME=packets" sorted by name and separated by
// commas, the form the CLI's table prints.
func (d DropReasons) String() string {
	var b strings.Builder
	for i, n := range d.Names() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteByte('=')
		b.WriteString(strconv.FormatUint(d[n], 10))
	}
	return b.String()
}

// SetRTT sets the RTT fields: the minimum, maximum and last smoothed RTT
// of the interval, in nanoseconds.
func (r *Record) SetRTT(minNs, maxNs, lastNs uint64) {
	r.RTTMinNs, r.RTTMaxNs, r.RTTLastNs = minNs, maxNs, lastNs
	r.Has |= HasRTT
}

// SetRetransmits sets the retransmitted segments (0: measured, none).
func (r *Record) SetRetransmits(n uint64) {
	r.Retransmits = n
	r.Has |= HasRetransmits
}

// SetDrops sets the dropped packets, their bytes and their packets by
// reason (which r keeps: the caller must not change it afterwards).
func (r *Record) SetDrops(packets, bytes uint64, reasons DropReasons) {
	r.DropPackets, r.DropBytes, r.DropReasons = packets, bytes, reasons
	r.Has |= HasDrops
}

// SetHandshakeRTT sets the handshake RTT, in nanoseconds.
func (r *Record) SetHandshakeRTT(ns uint64) {
	r.HandshakeRTTNs = ns
	r.Has |= HasHandshakeRTT
}

// DNSExchange is a flow's DNS exchange over an interval, as the hook saw
// it: a query, and its response if one came.
type DNSExchange struct {
	ID uint16
	// QName is the query's name; "" when the question did not parse.
	QName string
	// HasRcode says a response was seen, with Rcode.
	HasRcode bool
	Rcode    uint16
	// HasLatency says the response was matched to its query, LatencyNs
	// after it.
	HasLatency bool
	LatencyNs  uint64
}

// SetDNS sets the DNS fields of what x holds.
func (r *Record) SetDNS(x *DNSExchange) {
	r.DNSID = x.ID
	r.Has |= HasDNSID
	if x.QName != "" {
		r.DNSQName = x.QName
		r.Has |= HasDNSQName
	}
	if x.HasRcode {
		r.DNSRcode = x.Rcode
		r.Has |= HasDNSRcode
	}
	if x.HasLatency {
		r.DNSLatencyNs = x.LatencyNs
		r.Has |= HasDNSLatency
	}
}

// SetTunnel sets the tunnel fields from the outer side of the flow's
// packets: the ID only when the tunnel has one (VNI, GRE key), the outer
// ports only for the tunnels over UDP.
func (r *Record) SetTunnel(t *tunnel.Info) {
	if t.Type == tunnel.None {
		return
	}
	r.TunnelType = t.Type
	r.OuterSrcAddr, r.OuterDstAddr = t.SrcAddr, t.DstAddr
	r.Has |= HasTunnelType | HasOuterSrcAddr | HasOuterDstAddr
	if t.HasID {
		r.TunnelID = t.ID
		r.Has |= HasTunnelID
	}
	if t.Type == tunnel.VXLAN || t.Type == tunnel.Geneve {
		r.OuterSrcPort, r.OuterDstPort = t.SrcPort, t.DstPort
		r.Has |= HasOuterSrcPort | HasOuterDstPort
	}
}

// DNS response codes (RFC 1035 and IANA's "DNS RCODEs" registry), by
// value: a record's dns_rcode is written by name.
var rcodeNames = map[uint16]string{
	0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED",
	6: "YXDOMAIN", 7: "YXRRSET", 8: "NXRRSET", 9: "NOTAUTH", 10: "NOTZONE", 11: "DSOTYPENI",
	16: "BADVERS", 17: "BADKEY", 18: "BADTIME", 19: "BADMODE", 20: "BADNAME", 21: "BADALG",
	22: "BADTRUNC", 23: "BADCOOKIE",
}

// MaxRcode is the largest response code: 12 bits, the header's 4 and
// EDNS's 8 more.
const MaxRcode = 1<<12 - 1

// RcodeName names a DNS response code as IANA's registry does, uppercase
// (NXDOMAIN); a code the registry leaves unassigned is RCODE<n>.
func RcodeName(rc uint16) string {
	if n, ok := rcodeNames[rc]; ok {
		return n
	}
	return "RCODE" + strconv.Itoa(int(rc))
}

// ParseRcode is the inverse of RcodeName; it also takes the names in any
// case.
func ParseRcode(s string) (uint16, error) {
	u := strings.ToUpper(s)
	for v, n := range rcodeNames {
		if n == u {
			return v, nil
		}
	}
	if rest, ok := strings.CutPrefix(u, "RCODE"); ok {
		if v, err := strconv.ParseUint(rest, 10, 16); err == nil && v <= MaxRcode {
			return uint16(v), nil
		}
	}
	return 0, fmt.Errorf("unknown DNS response code %q", s)
}

// FiveTuple is a flow's addresses, ports and protocol, in the key's
// conventions: what the kernel signals are measured per.
type FiveTuple struct {
	SrcAddr, DstAddr [16]byte
	SrcPort, DstPort uint16
	Proto            uint8
}

// FiveTuple returns k's 5-tuple.
func (k *Key) FiveTuple() FiveTuple {
	return FiveTuple{SrcAddr: k.SrcAddr, DstAddr: k.DstAddr, SrcPort: k.SrcPort, DstPort: k.DstPort, Proto: k.Proto}
}

// key is a flow key of the 5-tuple, on no interface (ifindex 0, no MAC,
// no VLAN), for a record of signals that no record of the interval's
// carries: an IPv4-mapped address is an IPv4 flow's, any other an IPv6
// one's, and the zero 5-tuple (drops whose headers could not be read) no
// IP flow's.
func (t *FiveTuple) key(dir Direction) Key {
	k := Key{SrcAddr: t.SrcAddr, DstAddr: t.DstAddr, SrcPort: t.SrcPort, DstPort: t.DstPort, Proto: t.Proto, Direction: dir}
	switch {
	case *t == FiveTuple{}:
	case isMapped(&t.SrcAddr):
		k.EtherType = EtherTypeIPv4
	default:
		k.EtherType = EtherTypeIPv6
	}
	return k
}

// isMapped reports whether a is IPv4-mapped (::ffff:a.b.c.d).
func isMapped(a *[16]byte) bool {
	for _, b := range a[:10] {
		if b != 0 {
			return false
		}
	}
	return a[10] == 0xff && a[11] == 0xff
}
