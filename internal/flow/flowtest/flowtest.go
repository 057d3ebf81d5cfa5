// Package flowtest is test support for the encoders of flow records: base
// records of every shape, and the field-coverage check each encoder runs,
// which fails when a field of flow.Fields is neither carried by the
// encoder nor listed as deliberately excluded.
package flowtest

import (
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/tunnel"
)

// Base is a record of one shape, every field that applies to it non-zero.
type Base struct {
	Name string
	Rec  flow.Record
}

// T0 is the time around which the base records lie.
var T0 = time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)

// Bases returns one record of each shape an encoder treats differently:
// IPv4 and IPv6, transport ports and ICMP type/code, both directions, a
// non-IP flow, an aggregate, a record of each accuracy, one with kernel
// signals, one with DNS, and flows out of tunnels (VXLAN, GRE, Geneve;
// outer IPv4 and IPv6). Every field that applies to a shape is non-zero
// in it (but for the zero values of the enumerations: ingress, exact; and
// retransmits, measured as zero).
func Bases() []Base {
	mac1 := [6]byte{0x02, 0x42, 0xac, 0x11, 0x00, 0x02}
	mac2 := [6]byte{0xfe, 0xed, 0xfa, 0xce, 0xbe, 0xef}
	addr := func(s string) [16]byte { return netip.MustParseAddr(s).As16() }
	rec := func(k flow.Key, iface string, i uint64) flow.Record {
		k.SrcMAC, k.DstMAC = mac1, mac2
		k.SrcMAC[5] += byte(i)
		return flow.Record{
			Key: k, Iface: iface,
			Packets: 10 * i, Bytes: 15000 * i, Segments: 12 * i, WireBytes: 15080 * i,
			FirstSeen: T0.Add(time.Duration(i) * time.Second), LastSeen: T0.Add(time.Duration(i)*time.Second + 4*time.Second + 7*time.Millisecond),
			Sampling: uint32(i), DSCP: uint8(10 + i),
		}
	}
	tcp := rec(flow.Key{SrcAddr: addr("10.0.0.1"), DstAddr: addr("192.0.2.200"), IfIndex: 7, EtherType: flow.EtherTypeIPv4,
		SrcPort: 40000, DstPort: 443, VlanID: 100, Proto: flow.ProtoTCP, Direction: flow.Ingress}, "eth0", 1)
	tcp.TCPFlags = flow.TCPSyn | flow.TCPAck
	udp := rec(flow.Key{SrcAddr: addr("2001:db8::1"), DstAddr: addr("2001:db8:ffff::53"), IfIndex: 9, EtherType: flow.EtherTypeIPv6,
		SrcPort: 5353, DstPort: 53, VlanID: 200, Proto: flow.ProtoUDP, Direction: flow.Egress}, "veth1a2b", 2)
	icmp := rec(flow.Key{SrcAddr: addr("10.0.0.1"), DstAddr: addr("8.8.8.8"), IfIndex: 3, EtherType: flow.EtherTypeIPv4,
		SrcPort: 3, DstPort: 1, VlanID: 4094, Proto: flow.ProtoICMP, Direction: flow.Egress}, "eth1", 3)
	icmp6 := rec(flow.Key{SrcAddr: addr("fe80::1"), DstAddr: addr("ff02::1:ff00:2"), IfIndex: 4, EtherType: flow.EtherTypeIPv6,
		SrcPort: 135, DstPort: 1, VlanID: 1, Proto: flow.ProtoICMPv6, Direction: flow.Ingress}, "br0", 4)
	arp := rec(flow.Key{IfIndex: 5, EtherType: flow.EtherTypeARP, VlanID: 10, Direction: flow.Ingress}, "eth0", 5)
	arp.DSCP = 0 // does not apply
	for _, r := range []*flow.Record{&udp, &icmp, &icmp6} {
		r.TCPFlags = 0
	}
	// An aggregate (a rule's aggregate /24): addresses cut to the prefix,
	// no ports or MACs.
	agg := rec(flow.Key{SrcAddr: addr("10.0.0.0"), DstAddr: addr("192.0.2.0"), IfIndex: 7, EtherType: flow.EtherTypeIPv4,
		VlanID: 100, Proto: flow.ProtoTCP, Direction: flow.Egress, AggPrefix: 24}, "eth0", 6)
	agg.SrcMAC, agg.DstMAC = [6]byte{}, [6]byte{}
	agg.TCPFlags = flow.TCPAck
	// Counts decoded from the sketch's flow set: exact, no bounds.
	dec := rec(flow.Key{SrcAddr: addr("10.0.0.9"), DstAddr: addr("192.0.2.53"), IfIndex: 7, EtherType: flow.EtherTypeIPv4,
		SrcPort: 41000, DstPort: 53, VlanID: 100, Proto: flow.ProtoUDP, Direction: flow.Ingress}, "eth0", 7)
	dec.Accuracy = flow.Decoded
	// Counts estimated by a count-min sketch of 4 rows, with its bounds.
	est := rec(flow.Key{SrcAddr: addr("2001:db8::7"), DstAddr: addr("2001:db8:ffff::443"), IfIndex: 9, EtherType: flow.EtherTypeIPv6,
		SrcPort: 50000, DstPort: 443, VlanID: 200, Proto: flow.ProtoTCP, Direction: flow.Egress}, "veth1a2b", 8)
	est.TCPFlags = flow.TCPPsh | flow.TCPAck
	est.Accuracy, est.MaxErrorPackets, est.MaxErrorBytes, est.ErrorConfidence = flow.Estimated, 17, 25000, -math.Expm1(-4)
	// A TCP socket's egress record with its kernel signals: RTT, a
	// handshake RTT, no retransmission (measured: 0), and drops of two
	// reasons.
	sig := rec(flow.Key{SrcAddr: addr("10.0.0.1"), DstAddr: addr("192.0.2.80"), IfIndex: 7, EtherType: flow.EtherTypeIPv4,
		SrcPort: 40080, DstPort: 80, VlanID: 100, Proto: flow.ProtoTCP, Direction: flow.Egress}, "eth0", 9)
	sig.TCPFlags = flow.TCPPsh | flow.TCPAck
	sig.SetRTT(180_000, 2_400_000, 310_000)
	sig.HandshakeRTTNs, sig.Has = 150_000, sig.Has|flow.HasHandshakeRTT
	sig.SetRetransmits(0)
	sig.SetDrops(4, 5840, flow.DropReasons{"NETFILTER_DROP": 3, "TCP_INVALID_SEQUENCE": 1})
	// A DNS exchange: query and response.
	dns := rec(flow.Key{SrcAddr: addr("2001:db8::53"), DstAddr: addr("2001:db8::1"), IfIndex: 9, EtherType: flow.EtherTypeIPv6,
		SrcPort: 53, DstPort: 33000, VlanID: 200, Proto: flow.ProtoUDP, Direction: flow.Ingress}, "veth1a2b", 10)
	dns.DNSID, dns.DNSQName, dns.DNSRcode, dns.DNSLatencyNs = 0x4a2f, "nosuch.example.com", 3, 1_250_000
	dns.Has |= flow.HasDNSID | flow.HasDNSQName | flow.HasDNSRcode | flow.HasDNSLatency
	// Flows taken out of tunnels: VXLAN over IPv6, GRE (with a key) and
	// Geneve over IPv4.
	vx := rec(flow.Key{SrcAddr: addr("10.99.0.1"), DstAddr: addr("10.99.0.2"), IfIndex: 11, EtherType: flow.EtherTypeIPv4,
		SrcPort: 40001, DstPort: 40002, VlanID: 300, Proto: flow.ProtoUDP, Direction: flow.Egress}, "veth-under", 11)
	vx.SetTunnel(&tunnel.Info{Type: tunnel.VXLAN, ID: 42, HasID: true, SrcAddr: netip.MustParseAddr("fd88::1"),
		DstAddr: netip.MustParseAddr("fd88::2"), SrcPort: 51234, DstPort: 4789})
	gre := rec(flow.Key{SrcAddr: addr("2001:db8:1::1"), DstAddr: addr("2001:db8:2::1"), IfIndex: 12, EtherType: flow.EtherTypeIPv6,
		SrcPort: 443, DstPort: 50443, VlanID: 12, Proto: flow.ProtoTCP, Direction: flow.Ingress}, "eth2", 12)
	gre.TCPFlags = flow.TCPAck
	gre.SetTunnel(&tunnel.Info{Type: tunnel.GRE, ID: 7, HasID: true, SrcAddr: netip.MustParseAddr("198.51.100.1"),
		DstAddr: netip.MustParseAddr("198.51.100.2")})
	gnv := rec(flow.Key{SrcAddr: addr("10.98.0.1"), DstAddr: addr("10.98.0.2"), IfIndex: 13, EtherType: flow.EtherTypeIPv4,
		SrcPort: 41000, DstPort: 8080, VlanID: 13, Proto: flow.ProtoUDP, Direction: flow.Ingress}, "eth3", 13)
	gnv.SetTunnel(&tunnel.Info{Type: tunnel.Geneve, ID: 0xabcde, HasID: true, SrcAddr: netip.MustParseAddr("203.0.113.1"),
		DstAddr: netip.MustParseAddr("203.0.113.2"), SrcPort: 61000, DstPort: 6081})
	bases := []Base{{"ipv4-tcp", tcp}, {"ipv6-udp", udp}, {"ipv4-icmp", icmp}, {"ipv6-icmpv6", icmp6}, {"arp", arp}, {"ipv4-aggregate", agg},
		{"ipv4-udp-decoded", dec}, {"ipv6-tcp-estimated", est}, {"ipv4-tcp-signals", sig}, {"ipv6-udp-dns", dns},
		{"ipv4-udp-vxlan-over-ipv6", vx}, {"ipv6-tcp-gre-over-ipv4", gre}, {"ipv4-udp-geneve", gnv}}
	// Flows between pods with their Kubernetes names, one for each kind
	// of workload an encoder names differently (OTLP's attribute of the
	// kind), on a pod's host-side veth.
	for i, kind := range WorkloadKinds {
		r := rec(flow.Key{SrcAddr: addr("10.244.1.5"), DstAddr: addr("10.244.1.9"), IfIndex: 20 + uint32(i), EtherType: flow.EtherTypeIPv4,
			SrcPort: 40100, DstPort: 8080, VlanID: 30 + uint16(i), Proto: flow.ProtoTCP, Direction: flow.Ingress}, "lxc1234", 14+uint64(i))
		r.TCPFlags = flow.TCPAck
		other := WorkloadKinds[(i+1)%len(WorkloadKinds)]
		r.K8s = &flow.K8s{
			Src: flow.K8sEnd{Kind: flow.K8sPod, Namespace: "shop", Pod: "web-7d9f-abcde", Workload: "web", WorkloadKind: kind,
				Service: "web", Node: "node-1"},
			Dst: flow.K8sEnd{Kind: flow.K8sPod, Namespace: "db", Pod: "pg-0", Workload: "pg", WorkloadKind: other,
				Service: "pg", Node: "node-2"},
			IfacePod: "web-7d9f-abcde", IfaceNamespace: "shop",
		}
		bases = append(bases, Base{"k8s-" + strings.ToLower(kind), r})
	}
	return bases
}

// WorkloadKinds are the workload kinds of the Kubernetes bases: the six
// OpenTelemetry names an attribute after, and one it does not.
var WorkloadKinds = []string{"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet", "Rollout"}

// Vary changes field f of r, and nothing else, to another value valid for
// r: integers by one (within their width), the direction to the other
// one, the accuracy to the next (exact, decoded, estimated, exact), a
// name to the next valid one, the last byte of a MAC or an address (which
// stays in its family), times by a millisecond (the coarsest resolution
// an encoder has), a string by a letter, a probability halfway to 1, a
// count by name by one. A field present only where measured is present
// afterwards (its bit in r.Has, which is the one other thing it changes
// when it was absent).
func Vary(f *flow.Field, r *flow.Record) {
	defer f.MarkPresent(r)
	switch f.Type {
	case flow.TypeUint:
		mask := ^uint64(0)
		if f.Bits < 64 {
			mask = 1<<f.Bits - 1
		}
		v := (f.Uint(r) + 1) & mask
		if v == 0 {
			v = 1
		}
		f.SetUint(r, v)
	case flow.TypeDirection:
		f.SetUint(r, f.Uint(r)^1)
	case flow.TypeString:
		f.SetString(r, *f.Str(r)+"x")
	case flow.TypeMAC:
		f.MAC(r)[5]++
	case flow.TypeAddr:
		f.Addr(r)[15]++
	case flow.TypeTime:
		*f.Time(r) = f.Time(r).Add(time.Millisecond)
	case flow.TypeAccuracy:
		f.SetUint(r, (f.Uint(r)+1)%3)
	case flow.TypeFloat:
		v := f.Float(r)
		if *v == 1 {
			*v = 0.5
		} else {
			*v = 1 - (1-*v)/2
		}
	case flow.TypeEnum:
		v := f.Uint(r)
		for range 1 << min(f.Bits, 16) {
			if v = (v + 1) & (1<<f.Bits - 1); f.Enum.Valid(v) {
				break
			}
		}
		f.SetUint(r, v)
	case flow.TypeIP:
		a := f.IP(r)
		if !a.IsValid() {
			*a = netip.MustParseAddr("192.0.2.1")
			break
		}
		if a.Is4() {
			b := a.As4()
			b[3]++
			*a = netip.AddrFrom4(b)
		} else {
			b := a.As16()
			b[15]++
			*a = netip.AddrFrom16(b)
		}
	case flow.TypeCounts:
		// A new map: a record's map is shared by its copies.
		c := maps.Clone(*f.Counts(r))
		if len(c) == 0 {
			c = flow.DropReasons{"NO_SOCKET": 1}
		} else {
			c[c.Names()[0]]++
		}
		*f.Counts(r) = c
	default:
		panic(fmt.Sprintf("flowtest: field %s has type %v, which Vary does not know", f.Name, f.Type))
	}
}

// Consistent reports whether every field that does not apply to r (see
// flow.Field.Applies) is zero, as in every record the datapath produces.
func Consistent(r *flow.Record) bool {
	for _, f := range flow.Fields() {
		if !f.AppliesTo(r) && !isZero(&f, r) {
			return false
		}
	}
	return true
}

func isZero(f *flow.Field, r *flow.Record) bool {
	var zero flow.Record
	return Value(f, r) == Value(f, &zero)
}

// Value formats field f of r exactly: every bit of the field shows, and
// for a field present only where measured, whether it is ("0" is a
// measured zero, "0 absent" no measurement).
func Value(f *flow.Field, r *flow.Record) string {
	v := value(f, r)
	if f.Presence != 0 && !r.Has.Any(f.Presence) {
		v += " absent"
	}
	return v
}

func value(f *flow.Field, r *flow.Record) string {
	switch f.Type {
	case flow.TypeUint, flow.TypeDirection, flow.TypeAccuracy, flow.TypeEnum:
		return strconv.FormatUint(f.Uint(r), 10)
	case flow.TypeFloat:
		return strconv.FormatFloat(*f.Float(r), 'g', -1, 64)
	case flow.TypeString:
		return strconv.Quote(*f.Str(r))
	case flow.TypeMAC:
		return hex.EncodeToString(f.MAC(r)[:])
	case flow.TypeAddr:
		return hex.EncodeToString(f.Addr(r)[:])
	case flow.TypeTime:
		t := *f.Time(r)
		return t.Format(time.RFC3339Nano) + " " + t.Location().String()
	case flow.TypeIP:
		a := *f.IP(r)
		if !a.IsValid() {
			return "invalid"
		}
		return a.String()
	case flow.TypeCounts:
		return "{" + f.Counts(r).String() + "}"
	}
	panic(fmt.Sprintf("flowtest: field %s has type %v, which Value does not know", f.Name, f.Type))
}

// Values is a record as its fields' exact values, by field name: the
// Parts of an encoder that decodes records back.
func Values(r *flow.Record) Parts {
	p := Parts{}
	for _, f := range flow.Fields() {
		p[f.Name] = Value(&f, r)
	}
	return p
}

// Parts is an encoder's output for one record, split into named parts:
// IPFIX elements, protobuf field numbers, attributes, JSON keys, metric
// series... An encoder whose output has no such parts returns one part.
type Parts map[string]string

// Coverage is an encoder's field-coverage test.
type Coverage struct {
	// Encode encodes one record (alone) and splits the output into parts.
	Encode func(t testing.TB, r *flow.Record) Parts
	// Excluded lists the fields the encoder deliberately does not carry,
	// each with the reason: "field" for every record, "field@base" for
	// records of one shape of Bases (an IPFIX template, say).
	Excluded map[string]string
	// IDs, if set, returns the parts that carry field f according to the
	// registry (f.Wire): each of them must change when f does, for some
	// base, and every part of the output must be one of them (for some
	// field) or listed in Other.
	IDs func(f *flow.Field) []string
	// Other lists parts that carry no field, with what they are.
	Other map[string]string
}

// Check runs the coverage test: for every field and every base record the
// field applies to, a record differing from the base only in that field
// must encode differently, unless Excluded says why not.
func (c Coverage) Check(t testing.TB) {
	t.Helper()
	fields := flow.Fields()
	bases := Bases()
	c.checkExclusions(t, fields, bases)
	registered := map[string]bool{}
	seen := map[string]bool{}
	outs := make([]Parts, len(bases))
	for i := range bases {
		outs[i] = c.Encode(t, &bases[i].Rec)
		for k := range outs[i] {
			seen[k] = true
		}
	}
	for _, f := range fields {
		var want []string
		if c.IDs != nil {
			want = c.IDs(&f)
			for _, id := range want {
				registered[id] = true
			}
		}
		if _, ok := c.Excluded[f.Name]; ok {
			continue
		}
		changed := map[string]bool{}
		for i, b := range bases {
			base, out0 := b.Rec, outs[i]
			if !f.AppliesTo(&base) {
				continue
			}
			if _, ok := c.Excluded[f.Name+"@"+b.Name]; ok {
				continue
			}
			v := base
			Vary(&f, &v)
			out1 := c.Encode(t, &v)
			for k := range out1 {
				seen[k] = true
			}
			diff := Diff(out0, out1)
			if len(diff) == 0 {
				t.Errorf("field %s is not encoded in the %s record (a record differing only in %s, %s instead of %s, encodes the same); encode it or list it in the exclusions with the reason",
					f.Name, b.Name, f.Name, Value(&f, &v), Value(&f, &base))
			}
			for _, k := range diff {
				changed[k] = true
			}
		}
		for _, id := range want {
			if !changed[id] {
				t.Errorf("field %s: the registry says %q carries it, but %q never changes with it (changed: %v)", f.Name, id, id, slices.Sorted(maps.Keys(changed)))
			}
		}
	}
	if c.IDs == nil {
		return
	}
	for k := range seen {
		if !registered[k] {
			if _, ok := c.Other[k]; !ok {
				t.Errorf("the encoder writes %q, which the registry gives no field (register it, or list it in Other)", k)
			}
		}
	}
}

func (c Coverage) checkExclusions(t testing.TB, fields []flow.Field, bases []Base) {
	t.Helper()
	for k, why := range c.Excluded {
		name, base, scoped := strings.Cut(k, "@")
		if !slices.ContainsFunc(fields, func(f flow.Field) bool { return f.Name == name }) {
			t.Errorf("exclusion %q names no field of flow.Fields", k)
		}
		if scoped && !slices.ContainsFunc(bases, func(b Base) bool { return b.Name == base }) {
			t.Errorf("exclusion %q names no base record (have %v)", k, baseNames(bases))
		}
		if strings.TrimSpace(why) == "" {
			t.Errorf("exclusion %q gives no reason", k)
		}
	}
}

func baseNames(bases []Base) []string {
	out := make([]string, len(bases))
	for i, b := range bases {
		out[i] = b.Name
	}
	return out
}

// Diff returns the parts whose values differ between a and b, or that
// only one has, sorted.
func Diff(a, b Parts) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
