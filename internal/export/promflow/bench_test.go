package promflow

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"testing"

	"loupe/internal/flow"
)

// benchBatch is one eviction of 65 536 flows over 8 interfaces: TCP and
// UDP over IPv4 and IPv6, random addresses in and out of 10.0.0.0/8,
// service ports drawn from 1 024, ephemeral ports at random. Records arrive
// in hash-table order, i.e. shuffled.
func benchBatch() []flow.Record {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]flow.Record, 65536)
	for i := range out {
		var src, dst netip.Addr
		if i%4 == 0 {
			src = netip.AddrFrom16([16]byte{0: 0xfd, 14: byte(rng.IntN(256)), 15: byte(rng.IntN(256))})
			dst = netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 2: 0x0d, 3: 0xb8, 15: byte(rng.IntN(256))})
		} else {
			src = netip.AddrFrom4([4]byte{10, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
			dst = netip.AddrFrom4([4]byte{byte(rng.IntN(224)), byte(rng.IntN(256)), byte(rng.IntN(256)), 1})
		}
		proto := uint8(6)
		if i%3 == 0 {
			proto = 17
		}
		out[i] = ipRec(fmt.Sprintf("veth%d", rng.IntN(8)), flow.Direction(rng.IntN(2)), proto,
			src.String(), dst.String(), uint16(32768+rng.IntN(28000)), uint16(rng.IntN(1024)),
			uint64(1+rng.IntN(100)), uint64(64+rng.IntN(100000)))
	}
	return out
}

func BenchmarkWrite(b *testing.B) {
	groups, err := ParseGroups([]string{"internal=10.0.0.0/8,fd00::/8", "office=10.20.0.0/16", "docs=2001:db8::/32"})
	if err != nil {
		b.Fatal(err)
	}
	batch := benchBatch()
	quiet := slog.New(slog.DiscardHandler)
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"default", Options{}},
		{"dst_port", Options{Keys: []Key{KeyDstPort}}},
		{"dst_port+groups", Options{Keys: []Key{KeyDstPort, KeySrcGroup, KeyDstGroup}, Groups: groups}},
		// Random source ports: the cap fills at once and most records fold.
		{"ports+groups_folding", Options{Keys: []Key{KeySrcPort, KeyDstPort, KeySrcGroup, KeyDstGroup}, Groups: groups}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bc.opts.Logger = quiet
			s := New(bc.opts)
			ctx := context.Background()
			if err := s.Write(ctx, batch); err != nil { // series created once, as in steady state
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := s.Write(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/record")
		})
	}
}
