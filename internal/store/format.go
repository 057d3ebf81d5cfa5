package store

// Segment file format, version 1. Every integer is little endian.
//
//	offset  size   field
//	0       8      magic "LOUPESEG"
//	8       2      format version (1)
//	10      2      flags (0)
//	12      4      number B of blocks in the block directory
//	16      8      total file length in bytes (a truncated file fails this before the CRC)
//	24      8      segment id (the file is named seg-<id as %016x>.lseg)
//	32      8      record count N
//	40      8      min first_seen, unix ns (int64)
//	48      8      max last_seen, unix ns (int64)
//	56      8      max first_seen, unix ns (int64)
//	64      8      min last_seen, unix ns (int64)
//	72      4      number R of replaced segment ids
//	76      4      reserved (0)
//	80      8*R    ids of the segments this one replaces (compaction), transitively
//	...     32*B   block directory: kind u32, element width u32, offset u64,
//	               length u64, CRC32C of the block's bytes u32, reserved u32
//	...     4      CRC32C of the header and directory (bytes [0, here))
//	...            zero padding to a multiple of 8
//	               blocks, each at an offset that is a multiple of 8, zero padded
//	len-8   4      CRC32C (Castagnoli) of bytes [0, len-8): the whole file
//	len-4   4      trailer magic "LEND"
//
// Three levels of checksums so that every reader verifies every byte it
// uses, and no more: Scan and compaction read everything and check the
// whole-file CRC; Top and Select check the header CRC and the CRCs of just
// the blocks they touch (Top reads the flow key's columns, to count
// distinct flows, and the counters it sums), and never fault in the pages
// of the others.
//
// Block kinds. Kinds 1..26 and 28..61 are columns of N fixed-width
// elements, one per field of flow.Record (the kind is the field's
// Wire.Store in flow's registry; TestColumnKindsAreTheRegistrys checks it);
// kind 27 holds each record's presence bits (flow.Presence):
//
//	1 first_seen i64   2 last_seen i64   3 packets u64   4 bytes u64
//	5 ifindex u32      6 sampling u32    7 eth_type u16  8 src_port u16
//	9 dst_port u16    10 tcp_flags u16  11 direction u8 12 proto u8
//	13 dscp u8        14 src_addr u32   15 dst_addr u32 16 src_mac u32
//	17 dst_mac u32    18 iface u32      19 segments u64 20 wire_bytes u64
//	21 vlan_id u16    22 aggregate_prefix u8    23 accuracy u8
//	24 max_error_packets u64    25 max_error_bytes u64
//	26 error_confidence f64 (IEEE 754 binary64, as little-endian bits)
//	27 presence u32 (flow.Record.Has)
//	28 rtt_min_ns u64  29 rtt_max_ns u64  30 rtt_last_ns u64
//	31 handshake_rtt_ns u64  32 retransmits u64  33 drop_packets u64
//	34 drop_bytes u64  35 drop_reasons u32  36 dns_id u16  37 dns_qname u32
//	38 dns_rcode u16  39 dns_latency_ns u64  40 tunnel_type u8
//	41 tunnel_id u32  42 outer_src_addr u32  43 outer_dst_addr u32
//	44 outer_src_port u16  45 outer_dst_port u16
//	46 src_kind u8  47 src_namespace u32  48 src_pod u32  49 src_workload u32
//	50 src_workload_kind u32  51 src_service u32  52 src_node u32
//	53 dst_kind u8  54-59 dst_namespace ... dst_node u32, as 47-52
//	60 iface_pod u32  61 iface_namespace u32
//
// Kinds 19..26 came later: a segment written without them reads as if
// segments were packets, wire_bytes bytes, vlan_id and aggregate_prefix
// 0, which is what the datapath counted before it measured them (every
// buffer one segment of its own length, tags not recorded, no aggregates),
// and every record exact, as every record was before the sketch;
// compaction writes the first four out. Kinds 23..61 are sparse
// (sparseCols): each is written only by a segment where it is not all
// zeros, so that the common segment, all exact and without kernel
// signals, DNS, tunnels or Kubernetes names, carries nothing for them
// (kinds 46..61 came with the names: a segment before them reads as
// records without names); a reader takes a
// missing one as zeros (no record present, for kind 27). A field present
// only where measured is present where its bit of kind 27 is set, and its
// column holds 0 elsewhere.
//
// Times are unix nanoseconds; math.MinInt64 stands for the zero time.Time,
// which has no unix-nanosecond form. Kinds 14..18 are indices into the
// segment's dictionaries, and kinds 35, 37, 42, 43, 47..52 and 54..61 are
// indices plus one (0: none): drop_reasons, dns_qname and the Kubernetes
// names into the strings dictionary
// (103; drop reasons as "NAME=packets,...", sorted by name), the outer
// addresses into the address dictionary, with their own family:
//
//	100 address dictionary: 16-byte addresses, as flow.Key stores them
//	101 address family, one byte per address entry (0 non-IP, 4, 6)
//	102 MAC dictionary: 6 bytes per entry
//	103 strings (width 0): interface names, DNS names and drop reasons:
//	    u32 count K, K+1 u32 offsets, the bytes
//
// An address entry is the pair (16 bytes, family): the family comes from the
// record's eth_type, so an index alone says which netip.Addr the flow's
// SrcIP/DstIP is. That is what lets Top group and filter per dictionary
// entry instead of per record. Readers ignore kinds they do not know, so a
// later version can add blocks without breaking old readers; it bumps the
// version only for incompatible changes.
//
// The four time bounds let a query skip a segment that cannot match
// (max last_seen < since or min first_seen > until) and skip the per-record
// time test for one that matches entirely (max first_seen <= until and
// min last_seen >= since), exactly, even for records with last < first.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/netip"
	"time"

	"loupe/internal/flow"
)

const (
	segMagic     = "LOUPESEG"
	trailerMagic = "LEND"
	segVersion   = 1
	headerFixed  = 80
	dirEntrySize = 32
	trailerSize  = 8
)

// Column positions in batch.cols and segment.cols; the on-disk kind is the
// position plus one.
const (
	cFirst = iota
	cLast
	cPackets
	cBytes
	cIfIndex
	cSampling
	cEthType
	cSrcPort
	cDstPort
	cTCPFlags
	cDirection
	cProto
	cDSCP
	cSrcAddr
	cDstAddr
	cSrcMAC
	cDstMAC
	cIface
	cSegments
	cWireBytes
	cVlanID
	cAggPrefix
	cAccuracy
	cMaxErrPackets
	cMaxErrBytes
	cErrConfidence
	cPresence
	cRTTMin
	cRTTMax
	cRTTLast
	cHandshakeRTT
	cRetransmits
	cDropPackets
	cDropBytes
	cDropReasons
	cDNSID
	cDNSQName
	cDNSRcode
	cDNSLatency
	cTunnelType
	cTunnelID
	cOuterSrcAddr
	cOuterDstAddr
	cOuterSrcPort
	cOuterDstPort
	cSrcKind
	cSrcNamespace
	cSrcPod
	cSrcWorkload
	cSrcWorkloadKind
	cSrcService
	cSrcNode
	cDstKind
	cDstNamespace
	cDstPod
	cDstWorkload
	cDstWorkloadKind
	cDstService
	cDstNode
	cIfacePod
	cIfaceNamespace
	numCols
)

// k8sNameCols are the Kubernetes names' columns of strings: each end's
// six names (from its kind's column plus one), then the interface's pod.
var k8sNameCols = [...]int{
	cSrcNamespace, cSrcPod, cSrcWorkload, cSrcWorkloadKind, cSrcService, cSrcNode,
	cDstNamespace, cDstPod, cDstWorkload, cDstWorkloadKind, cDstService, cDstNode,
	cIfacePod, cIfaceNamespace,
}

// kindPresence is the block kind of the presence column: a column of no
// field of its own.
const kindPresence = cPresence + 1

// Dictionary block kinds.
const (
	kindAddrDict = 100
	kindAddrFam  = 101
	kindMACDict  = 102
	kindNames    = 103
)

// colWidths is the element width of each column in bytes. Dictionary
// columns hold u32 indices.
var colWidths = [numCols]int{
	cFirst: 8, cLast: 8, cPackets: 8, cBytes: 8, cIfIndex: 4, cSampling: 4,
	cEthType: 2, cSrcPort: 2, cDstPort: 2, cTCPFlags: 2, cDirection: 1, cProto: 1, cDSCP: 1,
	cSrcAddr: 4, cDstAddr: 4, cSrcMAC: 4, cDstMAC: 4, cIface: 4,
	cSegments: 8, cWireBytes: 8, cVlanID: 2, cAggPrefix: 1,
	cAccuracy: 1, cMaxErrPackets: 8, cMaxErrBytes: 8, cErrConfidence: 8,
	cPresence: 4, cRTTMin: 8, cRTTMax: 8, cRTTLast: 8, cHandshakeRTT: 8, cRetransmits: 8,
	cDropPackets: 8, cDropBytes: 8, cDropReasons: 4, cDNSID: 2, cDNSQName: 4, cDNSRcode: 2, cDNSLatency: 8,
	cTunnelType: 1, cTunnelID: 4, cOuterSrcAddr: 4, cOuterDstAddr: 4, cOuterSrcPort: 2, cOuterDstPort: 2,
	cSrcKind: 1, cSrcNamespace: 4, cSrcPod: 4, cSrcWorkload: 4, cSrcWorkloadKind: 4, cSrcService: 4, cSrcNode: 4,
	cDstKind: 1, cDstNamespace: 4, cDstPod: 4, cDstWorkload: 4, cDstWorkloadKind: 4, cDstService: 4, cDstNode: 4,
	cIfacePod: 4, cIfaceNamespace: 4,
}

func colWidth(c int) int { return colWidths[c] }

// isDictCol reports whether column c holds dictionary indices.
func isDictCol(c int) bool { return c >= cSrcAddr && c <= cIface }

// isOptDictCol reports whether column c holds dictionary indices plus one
// (optDictCols).
func isOptDictCol(c int) bool {
	return c == cDropReasons || c == cDNSQName || c == cOuterSrcAddr || c == cOuterDstAddr ||
		c >= cSrcNamespace && c <= cSrcNode || c >= cDstNamespace && c <= cDstNode || c == cIfacePod || c == cIfaceNamespace
}

// optDictCols are the sparse columns of dictionary indices plus one (0:
// none), and the dictionary each indexes.
var optDictCols = func() []struct{ col, dict int } {
	out := []struct{ col, dict int }{
		{cDropReasons, kindNames}, {cDNSQName, kindNames}, {cOuterSrcAddr, kindAddrDict}, {cOuterDstAddr, kindAddrDict},
	}
	for _, c := range k8sNameCols {
		out = append(out, struct{ col, dict int }{c, kindNames})
	}
	return out
}()

// laterCols are the columns added after the first segments were written,
// and what a segment without them reads: the column it copies, or zeros
// (-1).
var laterCols = func() []struct{ col, from int } {
	out := []struct{ col, from int }{{cSegments, cPackets}, {cWireBytes, cBytes}, {cVlanID, -1}, {cAggPrefix, -1}}
	for c := cAccuracy; c < numCols; c++ {
		out = append(out, struct{ col, from int }{c, -1})
	}
	return out
}()

// sparseCols are each left out of a segment where they are all zeros: the
// accuracy columns where every record is exact, the presence column and
// the fields present only where measured where no record has them. A
// reader leaves such a column empty rather than allocating its zeros (25
// bytes a record for the accuracy, over 100 for the rest, on every
// query): code that reads one checks its length, and reads no column as
// zeros.
var sparseCols = func() []int {
	var out []int
	for c := cAccuracy; c < numCols; c++ {
		out = append(out, c)
	}
	return out
}()

func sparseCol(c int) bool { return c >= cAccuracy && c < numCols }

// accuracyCols are the sparse columns of an estimate's accuracy and bounds.
var accuracyCols = [...]int{cAccuracy, cMaxErrPackets, cMaxErrBytes, cErrConfidence}

// Address families as stored in the family block.
const (
	famOther = 0
	famV4    = 4
	famV6    = 6
)

func famOf(etherType uint16) uint8 {
	switch etherType {
	case flow.EtherTypeIPv4:
		return famV4
	case flow.EtherTypeIPv6:
		return famV6
	}
	return famOther
}

// addrKey is one address dictionary entry.
type addrKey struct {
	a   [16]byte
	fam uint8
}

// zeroTimeNS encodes the zero time.Time, which UnixNano cannot represent.
const zeroTimeNS = math.MinInt64

func timeNS(t time.Time) int64 {
	if t.IsZero() {
		return zeroTimeNS
	}
	return t.UnixNano()
}

func nsTime(ns int64) time.Time {
	if ns == zeroTimeNS {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// batch is a segment being built in memory: columns already in their
// on-disk little-endian form, so that encoding is a copy and compaction can
// append an input's fixed-width columns without decoding them.
type batch struct {
	n        int
	cols     [numCols][]byte
	minFirst int64
	maxLast  int64
	maxFirst int64
	minLast  int64
	addrs    []addrKey
	macs     [][6]byte
	names    []string
	addrIdx  map[addrKey]uint32
	macIdx   map[[6]byte]uint32
	nameIdx  map[string]uint32
}

func newBatch(capacity int) *batch {
	b := &batch{
		minFirst: math.MaxInt64,
		maxLast:  math.MinInt64,
		maxFirst: math.MinInt64,
		minLast:  math.MaxInt64,
		addrIdx:  make(map[addrKey]uint32),
		macIdx:   make(map[[6]byte]uint32),
		nameIdx:  make(map[string]uint32),
	}
	for c := range b.cols {
		b.cols[c] = make([]byte, 0, capacity*colWidth(c))
	}
	return b
}

func (b *batch) addr(k addrKey) uint32 {
	if i, ok := b.addrIdx[k]; ok {
		return i
	}
	i := uint32(len(b.addrs))
	b.addrIdx[k] = i
	b.addrs = append(b.addrs, k)
	return i
}

func (b *batch) mac(m [6]byte) uint32 {
	if i, ok := b.macIdx[m]; ok {
		return i
	}
	i := uint32(len(b.macs))
	b.macIdx[m] = i
	b.macs = append(b.macs, m)
	return i
}

func (b *batch) name(s string) uint32 {
	if i, ok := b.nameIdx[s]; ok {
		return i
	}
	i := uint32(len(b.names))
	b.nameIdx[s] = i
	b.names = append(b.names, s)
	return i
}

func (b *batch) widen(minFirst, maxFirst, minLast, maxLast int64) {
	b.minFirst = min(b.minFirst, minFirst)
	b.maxFirst = max(b.maxFirst, maxFirst)
	b.minLast = min(b.minLast, minLast)
	b.maxLast = max(b.maxLast, maxLast)
}

var le = binary.LittleEndian

// add appends one record.
func (b *batch) add(r *flow.Record) {
	first, last := timeNS(r.FirstSeen), timeNS(r.LastSeen)
	b.widen(first, first, last, last)
	fam := famOf(r.EtherType)
	c := &b.cols
	c[cFirst] = le.AppendUint64(c[cFirst], uint64(first))
	c[cLast] = le.AppendUint64(c[cLast], uint64(last))
	c[cPackets] = le.AppendUint64(c[cPackets], r.Packets)
	c[cBytes] = le.AppendUint64(c[cBytes], r.Bytes)
	c[cIfIndex] = le.AppendUint32(c[cIfIndex], r.IfIndex)
	c[cSampling] = le.AppendUint32(c[cSampling], r.Sampling)
	c[cEthType] = le.AppendUint16(c[cEthType], r.EtherType)
	c[cSrcPort] = le.AppendUint16(c[cSrcPort], r.SrcPort)
	c[cDstPort] = le.AppendUint16(c[cDstPort], r.DstPort)
	c[cTCPFlags] = le.AppendUint16(c[cTCPFlags], r.TCPFlags)
	c[cDirection] = append(c[cDirection], uint8(r.Direction))
	c[cProto] = append(c[cProto], r.Proto)
	c[cDSCP] = append(c[cDSCP], r.DSCP)
	c[cSrcAddr] = le.AppendUint32(c[cSrcAddr], b.addr(addrKey{r.SrcAddr, fam}))
	c[cDstAddr] = le.AppendUint32(c[cDstAddr], b.addr(addrKey{r.DstAddr, fam}))
	c[cSrcMAC] = le.AppendUint32(c[cSrcMAC], b.mac(r.SrcMAC))
	c[cDstMAC] = le.AppendUint32(c[cDstMAC], b.mac(r.DstMAC))
	c[cIface] = le.AppendUint32(c[cIface], b.name(r.Iface))
	c[cSegments] = le.AppendUint64(c[cSegments], r.Segments)
	c[cWireBytes] = le.AppendUint64(c[cWireBytes], r.WireBytes)
	c[cVlanID] = le.AppendUint16(c[cVlanID], r.VlanID)
	c[cAggPrefix] = append(c[cAggPrefix], r.AggPrefix)
	c[cAccuracy] = append(c[cAccuracy], uint8(r.Accuracy))
	c[cMaxErrPackets] = le.AppendUint64(c[cMaxErrPackets], r.MaxErrorPackets)
	c[cMaxErrBytes] = le.AppendUint64(c[cMaxErrBytes], r.MaxErrorBytes)
	c[cErrConfidence] = le.AppendUint64(c[cErrConfidence], math.Float64bits(r.ErrorConfidence))
	c[cPresence] = le.AppendUint32(c[cPresence], uint32(r.Has))
	c[cRTTMin] = le.AppendUint64(c[cRTTMin], r.RTTMinNs)
	c[cRTTMax] = le.AppendUint64(c[cRTTMax], r.RTTMaxNs)
	c[cRTTLast] = le.AppendUint64(c[cRTTLast], r.RTTLastNs)
	c[cHandshakeRTT] = le.AppendUint64(c[cHandshakeRTT], r.HandshakeRTTNs)
	c[cRetransmits] = le.AppendUint64(c[cRetransmits], r.Retransmits)
	c[cDropPackets] = le.AppendUint64(c[cDropPackets], r.DropPackets)
	c[cDropBytes] = le.AppendUint64(c[cDropBytes], r.DropBytes)
	var reasons uint32
	if r.DropReasons != nil {
		reasons = b.name(r.DropReasons.String()) + 1
	}
	c[cDropReasons] = le.AppendUint32(c[cDropReasons], reasons)
	c[cDNSID] = le.AppendUint16(c[cDNSID], r.DNSID)
	var qname uint32
	if r.DNSQName != "" || r.Has.Any(flow.HasDNSQName) {
		qname = b.name(r.DNSQName) + 1
	}
	c[cDNSQName] = le.AppendUint32(c[cDNSQName], qname)
	c[cDNSRcode] = le.AppendUint16(c[cDNSRcode], r.DNSRcode)
	c[cDNSLatency] = le.AppendUint64(c[cDNSLatency], r.DNSLatencyNs)
	c[cTunnelType] = append(c[cTunnelType], uint8(r.TunnelType))
	c[cTunnelID] = le.AppendUint32(c[cTunnelID], r.TunnelID)
	c[cOuterSrcAddr] = le.AppendUint32(c[cOuterSrcAddr], b.ipIndex(r.OuterSrcAddr))
	c[cOuterDstAddr] = le.AppendUint32(c[cOuterDstAddr], b.ipIndex(r.OuterDstAddr))
	c[cOuterSrcPort] = le.AppendUint16(c[cOuterSrcPort], r.OuterSrcPort)
	c[cOuterDstPort] = le.AppendUint16(c[cOuterDstPort], r.OuterDstPort)
	b.addK8s(r.K8s)
	b.n++
}

// addK8s appends a record's Kubernetes names: each end's kind, and each
// name's index plus one in the strings dictionary (0: none).
func (b *batch) addK8s(k *flow.K8s) {
	c := &b.cols
	if k == nil {
		c[cSrcKind] = append(c[cSrcKind], 0)
		c[cDstKind] = append(c[cDstKind], 0)
		for _, col := range k8sNameCols {
			c[col] = le.AppendUint32(c[col], 0)
		}
		return
	}
	c[cSrcKind] = append(c[cSrcKind], uint8(k.Src.Kind))
	c[cDstKind] = append(c[cDstKind], uint8(k.Dst.Kind))
	for i, v := range k8sNames(k) {
		var x uint32
		if v != "" {
			x = b.name(v) + 1
		}
		c[k8sNameCols[i]] = le.AppendUint32(c[k8sNameCols[i]], x)
	}
}

// k8sNames are k's names in the order of k8sNameCols.
func k8sNames(k *flow.K8s) [len(k8sNameCols)]string {
	return [...]string{
		k.Src.Namespace, k.Src.Pod, k.Src.Workload, k.Src.WorkloadKind, k.Src.Service, k.Src.Node,
		k.Dst.Namespace, k.Dst.Pod, k.Dst.Workload, k.Dst.WorkloadKind, k.Dst.Service, k.Dst.Node,
		k.IfacePod, k.IfaceNamespace,
	}
}

// k8sNamePtrs are pointers to k's names in the order of k8sNameCols.
func k8sNamePtrs(k *flow.K8s) [len(k8sNameCols)]*string {
	return [...]*string{
		&k.Src.Namespace, &k.Src.Pod, &k.Src.Workload, &k.Src.WorkloadKind, &k.Src.Service, &k.Src.Node,
		&k.Dst.Namespace, &k.Dst.Pod, &k.Dst.Workload, &k.Dst.WorkloadKind, &k.Dst.Service, &k.Dst.Node,
		&k.IfacePod, &k.IfaceNamespace,
	}
}

// ipIndex is the index plus one of an address of its own family in the
// address dictionary; 0 for none.
func (b *batch) ipIndex(a netip.Addr) uint32 {
	if !a.IsValid() {
		return 0
	}
	fam := uint8(famV6)
	if a.Is4() {
		fam = famV4
	}
	return b.addr(addrKey{a.As16(), fam}) + 1
}

// appendSegment appends every record of a verified segment, remapping its
// dictionary indices into b's dictionaries. It is how compaction merges.
func (b *batch) appendSegment(s *segment) error {
	names, err := s.nameDict()
	if err != nil {
		return err
	}
	addrMap := make([]uint32, s.nAddr)
	for i := range addrMap {
		addrMap[i] = b.addr(s.addrKey(uint32(i)))
	}
	macMap := make([]uint32, s.nMAC)
	for i := range macMap {
		macMap[i] = b.mac(s.mac(uint32(i)))
	}
	nameMap := make([]uint32, len(names))
	for i, n := range names {
		nameMap[i] = b.name(n)
	}
	for c := range numCols {
		switch {
		case isDictCol(c) || isOptDictCol(c) && len(s.cols[c]) > 0:
		case len(s.cols[c]) == 0 && sparseCol(c):
			b.cols[c] = append(b.cols[c], make([]byte, s.n*colWidth(c))...)
		default:
			b.cols[c] = append(b.cols[c], s.cols[c]...)
		}
	}
	remaps := [...]struct {
		col int
		m   []uint32
	}{{cSrcAddr, addrMap}, {cDstAddr, addrMap}, {cSrcMAC, macMap}, {cDstMAC, macMap}, {cIface, nameMap}}
	for _, rm := range remaps {
		src, dst := s.cols[rm.col], b.cols[rm.col]
		for i := range s.n {
			x := le.Uint32(src[i*4:])
			if x >= uint32(len(rm.m)) {
				return corruptf(s.path, "column %d: index %d out of dictionary of %d", rm.col+1, x, len(rm.m))
			}
			dst = le.AppendUint32(dst, rm.m[x])
		}
		b.cols[rm.col] = dst
	}
	for _, od := range optDictCols {
		src, dst := s.cols[od.col], b.cols[od.col]
		if len(src) == 0 {
			continue // zeros, appended above
		}
		m := nameMap
		if od.dict == kindAddrDict {
			m = addrMap
		}
		for i := range s.n {
			x := le.Uint32(src[i*4:])
			if x > uint32(len(m)) {
				return corruptf(s.path, "column %d: index %d out of dictionary of %d", od.col+1, x-1, len(m))
			}
			if x > 0 {
				x = m[x-1] + 1
			}
			dst = le.AppendUint32(dst, x)
		}
		b.cols[od.col] = dst
	}
	b.n += s.n
	b.widen(s.minFirst, s.maxFirst, s.minLast, s.maxLast)
	return nil
}

type block struct {
	kind, width uint32
	data        []byte
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

func pad8(n int) int { return (n + 7) &^ 7 }

// blocks lists the batch's blocks in file order.
func (b *batch) blocks() []block {
	bl := make([]block, 0, numCols+4)
	for c := range b.cols {
		if sparseCol(c) && allZero(b.cols[c]) {
			continue
		}
		bl = append(bl, block{uint32(c + 1), uint32(colWidth(c)), b.cols[c]})
	}
	addrs := make([]byte, 0, 16*len(b.addrs))
	fams := make([]byte, 0, len(b.addrs))
	for _, a := range b.addrs {
		addrs = append(addrs, a.a[:]...)
		fams = append(fams, a.fam)
	}
	macs := make([]byte, 0, 6*len(b.macs))
	for _, m := range b.macs {
		macs = append(macs, m[:]...)
	}
	names := le.AppendUint32(nil, uint32(len(b.names)))
	off := uint32(0)
	names = le.AppendUint32(names, off)
	for _, n := range b.names {
		off += uint32(len(n))
		names = le.AppendUint32(names, off)
	}
	for _, n := range b.names {
		names = append(names, n...)
	}
	return append(bl,
		block{kindAddrDict, 16, addrs},
		block{kindAddrFam, 1, fams},
		block{kindMACDict, 6, macs},
		block{kindNames, 0, names})
}

// crcWriter checksums everything written through it.
type crcWriter struct {
	w   io.Writer
	tab *crc32.Table
	crc uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	c.crc = crc32.Update(c.crc, c.tab, p)
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

var zeros [8]byte

// encode writes the batch as a complete segment file and returns its size.
func (b *batch) encode(w io.Writer, id uint64, replaces []uint64) (int64, error) {
	bl := b.blocks()
	hdrLen := pad8(headerFixed + 8*len(replaces) + dirEntrySize*len(bl) + 4)
	offs := make([]uint64, len(bl))
	off := hdrLen
	for i, k := range bl {
		offs[i] = uint64(off)
		off += pad8(len(k.data))
	}
	total := off + trailerSize

	hdr := make([]byte, 0, hdrLen)
	hdr = append(hdr, segMagic...)
	hdr = le.AppendUint16(hdr, segVersion)
	hdr = le.AppendUint16(hdr, 0)
	hdr = le.AppendUint32(hdr, uint32(len(bl)))
	hdr = le.AppendUint64(hdr, uint64(total))
	hdr = le.AppendUint64(hdr, id)
	hdr = le.AppendUint64(hdr, uint64(b.n))
	hdr = le.AppendUint64(hdr, uint64(b.minFirst))
	hdr = le.AppendUint64(hdr, uint64(b.maxLast))
	hdr = le.AppendUint64(hdr, uint64(b.maxFirst))
	hdr = le.AppendUint64(hdr, uint64(b.minLast))
	hdr = le.AppendUint32(hdr, uint32(len(replaces)))
	hdr = le.AppendUint32(hdr, 0)
	for _, r := range replaces {
		hdr = le.AppendUint64(hdr, r)
	}
	for i, k := range bl {
		hdr = le.AppendUint32(hdr, k.kind)
		hdr = le.AppendUint32(hdr, k.width)
		hdr = le.AppendUint64(hdr, offs[i])
		hdr = le.AppendUint64(hdr, uint64(len(k.data)))
		hdr = le.AppendUint32(hdr, crc32c(k.data))
		hdr = le.AppendUint32(hdr, 0)
	}
	hdr = le.AppendUint32(hdr, crc32c(hdr))
	hdr = append(hdr, zeros[:hdrLen-len(hdr)]...)

	cw := &crcWriter{w: w, tab: crc32.MakeTable(crc32.Castagnoli)}
	if _, err := cw.Write(hdr); err != nil {
		return 0, err
	}
	for _, k := range bl {
		if _, err := cw.Write(k.data); err != nil {
			return 0, err
		}
		if _, err := cw.Write(zeros[:pad8(len(k.data))-len(k.data)]); err != nil {
			return 0, err
		}
	}
	tr := le.AppendUint32(nil, cw.crc)
	tr = append(tr, trailerMagic...)
	if _, err := w.Write(tr); err != nil {
		return 0, err
	}
	if cw.n+trailerSize != int64(total) {
		return 0, fmt.Errorf("segment encoder wrote %d bytes, header says %d", cw.n+trailerSize, total)
	}
	return int64(total), nil
}

// writeSegment makes the batch durable as segment id: a temp file readers
// ignore, fsync'd, renamed into place, and the directory fsync'd, so the
// segment either exists complete under its name or not at all.
func writeSegment(d *storeDir, id uint64, replaces []uint64, b *batch) (entry, error) {
	f, tmp, err := d.createTemp(segName(id))
	if err != nil {
		return entry{}, fmt.Errorf("create segment: %w", err)
	}
	fail := func(err error) (entry, error) {
		f.Close()
		d.remove(tmp)
		return entry{}, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	size, err := b.encode(bw, id, replaces)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fail(fmt.Errorf("write segment %s: %w", d.join(tmp), err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("fsync segment %s: %w", d.join(tmp), err))
	}
	if err := f.Close(); err != nil {
		d.remove(tmp)
		return entry{}, fmt.Errorf("close segment %s: %w", d.join(tmp), err)
	}
	if err := d.rename(tmp, segName(id)); err != nil {
		d.remove(tmp)
		return entry{}, fmt.Errorf("rename segment into place: %w", err)
	}
	if err := d.sync(); err != nil {
		return entry{}, err
	}
	return entry{id: id, records: uint64(b.n), minFirst: b.minFirst, maxLast: b.maxLast, size: size}, nil
}
