package sketch

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// flowKey builds a key laid out as the datapath's struct flow_key: IPv4
// addresses IPv4-mapped, so that the key's first and third words are zero and
// most of its entropy sits in a few bytes, as on a real host.
func flowKey(src, dst [4]byte, sport, dport uint16, proto, dir uint8) Key {
	var k Key
	k[10], k[11] = 0xff, 0xff
	copy(k[12:16], src[:])
	k[26], k[27] = 0xff, 0xff
	copy(k[28:32], dst[:])
	copy(k[32:44], []byte{0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02})
	binary.LittleEndian.PutUint32(k[44:], 2) // ifindex
	binary.LittleEndian.PutUint16(k[48:], 0x0800)
	binary.LittleEndian.PutUint16(k[50:], sport)
	binary.LittleEndian.PutUint16(k[52:], dport)
	k[56] = proto
	k[57] = dir
	return k
}

// randomKey draws a client-to-server key: a few thousand clients, a handful
// of servers and ports, ephemeral source ports.
func randomKey(r *rand.Rand) Key {
	return flowKey(
		[4]byte{10, 0, byte(r.IntN(16)), byte(r.IntN(256))},
		[4]byte{10, 1, 0, byte(r.IntN(8))},
		uint16(32768+r.IntN(28232)),
		[]uint16{53, 80, 443, 8080}[r.IntN(4)],
		[]uint8{6, 17}[r.IntN(2)],
		uint8(r.IntN(2)),
	)
}

// distinctKeys draws n distinct keys.
func distinctKeys(r *rand.Rand, n int) []Key {
	seen := make(map[Key]struct{}, n)
	keys := make([]Key, 0, n)
	for len(keys) < n {
		k := randomKey(r)
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		keys = append(keys, k)
	}
	return keys
}

// truth is what the sketch should report: every flow's exact counts.
type truth map[Key]Counts

func (t truth) add(k Key, packets, bytes uint64) {
	c := t[k]
	c.Packets += packets
	c.Bytes += bytes
	t[k] = c
}

func (t truth) total() Counts {
	var s Counts
	for _, c := range t {
		s.Packets += c.Packets
		s.Bytes += c.Bytes
	}
	return s
}

// params builds Params for tests that pick the flow set's shape themselves.
func params(t testing.TB, sub, filterBits, filterHashes int) Params {
	t.Helper()
	p := Params{
		FlowSet:  FlowSetParams{Cells: K * sub, FilterBits: filterBits, FilterHashes: filterHashes},
		CountMin: CountMinParams{Rows: DefaultRows, Width: 64},
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func newEncoder(t testing.TB, p Params) *Encoder {
	t.Helper()
	e, err := NewEncoder(p)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
