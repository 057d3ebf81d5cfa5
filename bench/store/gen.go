package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"loupe/internal/flow"
	"loupe/internal/hop"
	"loupe/internal/store"
)

// generator makes a deterministic stream of flow records shaped like a busy
// network's: Zipf-distributed sources and destinations over 65,536 hosts
// (10% of flows IPv6), a port mix dominated by HTTPS, HTTP and DNS, a few
// percent ICMP, heavy-tailed packet counts, and times laid out like
// successive evictions spread evenly over one hour ending at ref.
type generator struct {
	rng      *rand.Rand
	srcZipf  *rand.Zipf
	dstZipf  *rand.Zipf
	dstPerm  []uint32 // so that the busiest sources are not the busiest destinations
	ref      time.Time
	batches  int
	batchNum int
	macs     [4][6]byte
}

const hosts = 1 << 16

func newGenerator(seed uint64, ref time.Time, batches int) *generator {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g := &generator{
		rng:     rng,
		srcZipf: rand.NewZipf(rng, 1.1, 4, hosts-1),
		dstZipf: rand.NewZipf(rng, 1.3, 2, hosts-1),
		dstPerm: make([]uint32, hosts),
		ref:     ref,
		batches: batches,
		macs:    [4][6]byte{{0x02, 0, 0, 0, 0, 1}, {0x02, 0, 0, 0, 0, 2}, {0x52, 0x54, 0, 0x12, 0x34, 0x56}, {0x52, 0x54, 0, 0xab, 0xcd, 0xef}},
	}
	for i := range g.dstPerm {
		g.dstPerm[i] = uint32(i)
	}
	rng.Shuffle(hosts, func(i, j int) { g.dstPerm[i], g.dstPerm[j] = g.dstPerm[j], g.dstPerm[i] })
	return g
}

func hostAddr(h uint32, v6 bool) [16]byte {
	if v6 {
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(h >> 8), 15: byte(h)}).As16()
	}
	return netip.AddrFrom4([4]byte{10, byte(h >> 16), byte(h >> 8), byte(h)}).As16()
}

// service picks a destination port and protocol.
func (g *generator) service() (port uint16, proto uint8) {
	switch x := g.rng.IntN(100); {
	case x < 40:
		return 443, 6
	case x < 55:
		return 80, 6
	case x < 70:
		return 53, 17
	case x < 73:
		return 22, 6
	case x < 76:
		return 123, 17
	case x < 80:
		return 8080, 6
	case x < 83:
		return 3306, 6
	case x < 86:
		return 5432, 6
	case x < 88:
		return 443, 17 // QUIC
	case x < 98:
		return uint16(1024 + g.rng.IntN(64000)), 6
	}
	return 0, 1 // ICMP echo reply: type 0 code 0
}

// batch fills recs with the next eviction's records.
func (g *generator) batch(recs []flow.Record) {
	// Evictions every hour/batches; this one happens at evict.
	step := time.Hour / time.Duration(g.batches)
	evict := g.ref.Add(-time.Hour + time.Duration(g.batchNum+1)*step)
	g.batchNum++
	for i := range recs {
		r := &recs[i]
		v6 := g.rng.IntN(10) == 0
		src := uint32(g.srcZipf.Uint64())
		dst := g.dstPerm[g.dstZipf.Uint64()]
		port, proto := g.service()
		*r = flow.Record{}
		r.EtherType = flow.EtherTypeIPv4
		if v6 {
			r.EtherType = flow.EtherTypeIPv6
		}
		if proto == 1 && v6 {
			proto = 58
		}
		r.SrcAddr, r.DstAddr = hostAddr(src, v6), hostAddr(dst, v6)
		r.Proto, r.DstPort = proto, port
		if proto != 1 && proto != 58 {
			r.SrcPort = uint16(32768 + g.rng.IntN(28232))
		}
		r.Direction = flow.Direction(g.rng.IntN(2))
		r.IfIndex = uint32(2 + g.rng.IntN(2))
		r.Iface = [2]string{"eth0", "eth1"}[r.IfIndex-2]
		r.SrcMAC, r.DstMAC = g.macs[g.rng.IntN(4)], g.macs[g.rng.IntN(4)]
		// Heavy tail: most flows are a handful of packets, a few are bulk.
		r.Packets = 1 + uint64(g.rng.ExpFloat64()*8)
		if g.rng.IntN(100) == 0 {
			r.Packets *= 1000
		}
		r.Bytes = r.Packets * uint64(60+g.rng.IntN(1440))
		if proto == 6 {
			r.TCPFlags = flow.TCPAck | flow.TCPPsh
			if g.rng.IntN(5) == 0 {
				r.TCPFlags |= flow.TCPSyn | flow.TCPFin
			}
		}
		r.DSCP = [4]uint8{0, 0, 0, 46}[g.rng.IntN(4)]
		r.Sampling = 1
		r.LastSeen = evict.Add(-time.Duration(g.rng.Int64N(int64(5 * time.Second))))
		r.FirstSeen = r.LastSeen.Add(-time.Duration(g.rng.Int64N(int64(step))))
		if start := g.ref.Add(-time.Hour); r.FirstSeen.Before(start) {
			r.FirstSeen = start
		}
	}
}

// writeHops appends n per-hop latency records (the Latency page's) to the
// store in dir, spread evenly over the hour ending at ref: requests
// between the generator's hosts, each with three hops of a few to a few
// hundred microseconds, as two pods on two nodes would see them.
func writeHops(dir string, seed uint64, ref time.Time, n int) error {
	if n <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed^0x5bd1e995, seed))
	h, err := store.OpenHopLog(dir, store.HopOptions{})
	if err != nil {
		return err
	}
	ifaces := [...]string{"veth-web", "eth0", "vxlan0", "veth-db"}
	dirs := [...]string{hop.Out, hop.Out, hop.In}
	batch := make([]*hop.Request, 0, 1000)
	for i := range n {
		at := ref.Add(-time.Hour + time.Duration(i+1)*time.Hour/time.Duration(n))
		r := &hop.Request{
			TraceID: fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()), SpanID: fmt.Sprintf("%016x", rng.Uint64()),
			Kind: "request", Proto: 6, Seq: rng.Uint32(),
			SrcAddr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), DstAddr: netip.AddrFrom4([4]byte{10, 1, 0, byte(rng.IntN(16))}),
			SrcPort: uint16(32768 + rng.IntN(28232)), DstPort: 8080, Time: at, Node: "node-a",
		}
		for j := range 3 {
			lat := int64(2000 + rng.ExpFloat64()*float64([3]int{10_000, 60_000, 20_000}[j]))
			r.Hops = append(r.Hops, hop.Hop{FromIface: ifaces[j], ToIface: ifaces[j+1], Direction: dirs[j], LatencyNs: lat})
		}
		if batch = append(batch, r); len(batch) == cap(batch) || i == n-1 {
			if err := h.Append(batch...); err != nil {
				h.Close()
				return fmt.Errorf("per-hop latency records: %w", err)
			}
			batch = batch[:0]
		}
	}
	return h.Close()
}
