package sketch

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// cacheRun runs the datapath's flow cache in Go (its policy, sketch.h: the
// set's entry that holds the flow, else the one with fewer packets) over
// packets of keys drawn by pick, and returns the sketch it leaves with the
// cache, the sketch of every packet inserted as it came, and the truth.
func cacheRun(t *testing.T, p Params, keys []Key, packets int, pick func(r *rand.Rand) int) (cached *Encoder, cache []byte, direct *Encoder, tr truth, evictions int) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	direct, cached = newEncoder(t, p), newEncoder(t, p)
	cache = make([]byte, p.CacheBytes())
	tr = truth{}
	for range packets {
		k := &keys[pick(r)]
		length := uint64(60 + r.IntN(1400))
		direct.Add(k, length)
		tr.add(*k, 1, length)

		set := int(hashKey(k).a%uint64(p.Cache/CacheWays)) * CacheWays
		var e []byte
		for w := range CacheWays {
			c := cache[(set+w)*CellSize:][:CellSize]
			if byteOrder.Uint64(c[offPackets:]) > 0 && bytes.Equal(c[:cacheKeySize], k[:cacheKeySize]) {
				e = c
				break
			}
			if e == nil || byteOrder.Uint64(c[offPackets:]) < byteOrder.Uint64(e[offPackets:]) {
				e = c
			}
		}
		held := byteOrder.Uint64(e[offPackets:])
		switch {
		case held > 0 && bytes.Equal(e[:cacheKeySize], k[:cacheKeySize]):
			byteOrder.PutUint64(e[offPackets:], held+1)
			byteOrder.PutUint64(e[offBytes:], byteOrder.Uint64(e[offBytes:])+length)
			continue
		case held > 0:
			var old Key
			copy(old[:cacheKeySize], e)
			cached.AddN(&old, held, byteOrder.Uint64(e[offBytes:]))
			evictions++
		}
		clear(e)
		copy(e, k[:cacheKeySize])
		byteOrder.PutUint32(e[cacheKeySize:], 0xdeadbeef) // a tag: not part of the key
		byteOrder.PutUint64(e[offPackets:], 1)
		byteOrder.PutUint64(e[offBytes:], length)
	}
	return cached, cache, direct, tr, evictions
}

// zipfish draws mostly the first of n keys.
func zipfish(n int) func(r *rand.Rand) int {
	return func(r *rand.Rand) int { return int(float64(n) * r.Float64() * r.Float64() * r.Float64()) }
}

// TestFoldCache: with few entries, so that flows push one another out, the
// sketch the cache leaves decodes, with its entries taken as they are
// (TakeCache, DecodeCached), to every flow's exact counts; and once
// FoldCache has inserted what the entries hold, it is byte for byte the
// sketch of every packet inserted as it came. The filter is far from full,
// so that no false positive falls on a flow in one order and not in the
// other.
func TestFoldCache(t *testing.T) {
	p := params(t, 1024, nextPrime(1<<20), 10)
	p.Cache = 8
	keys := distinctKeys(rand.New(rand.NewPCG(3, 4)), 300)
	cached, cache, direct, tr, evictions := cacheRun(t, p, keys, 20000, zipfish(len(keys)))
	if evictions == 0 {
		t.Fatal("no flow pushed another out of the cache: the test does not test the eviction")
	}

	// Decoding takes the entries as they are and adds them to what the
	// flow set gives for their flows, which are in both: exact.
	cm := bytes.Clone(cached.CountMin)
	taken, err := TakeCache(p, cm, cache)
	if err != nil {
		t.Fatal(err)
	}
	decodesExactly(t, p, cached, taken, tr)
	if !bytes.Equal(cm, direct.CountMin) {
		t.Error("count-min with the cache taken: differs from every packet inserted as it came")
	}
	n, err := FoldCache(p, cached.FlowSet, cached.Filter, cached.CountMin, cache)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || n > p.Cache {
		t.Errorf("FoldCache inserted %d flows, want 1..%d", n, p.Cache)
	}
	for _, c := range []struct {
		name        string
		got, direct []byte
	}{{"flow set", cached.FlowSet, direct.FlowSet}, {"filter", cached.Filter, direct.Filter}, {"count-min", cached.CountMin, direct.CountMin}} {
		if !bytes.Equal(c.got, c.direct) {
			t.Errorf("%s: differs from every packet inserted as it came", c.name)
		}
	}
	if _, err := FoldCache(p, cached.FlowSet, cached.Filter, cached.CountMin, cache[:CellSize]); err == nil {
		t.Error("a cache of the wrong size accepted")
	}
}

// TestTakeCache: a flow the cache held all along takes none of the flow
// set's capacity. About 3 000 flows in a flow set whose capacity is 2 304:
// folded in, they do not decode; taken (TakeCache, DecodeCached), the
// flows the cache held come back as they are, the rest decode, and every
// count is exact.
func TestTakeCache(t *testing.T) {
	p := params(t, 1024, nextPrime(1<<16), 10)
	p.Cache = 8192
	keys := distinctKeys(rand.New(rand.NewPCG(5, 6)), 3000)
	// 1 000 keys for the cache, one a set, so that none pushes another
	// out: the first key of each of 1 000 sets; the others go straight
	// into the sketch.
	var whole []Key
	sets := map[int]bool{}
	for i, k := range keys {
		s := int(hashKey(&k).a % uint64(p.Cache/CacheWays))
		if !sets[s] {
			sets[s] = true
			whole = append(whole, k)
			keys[i], keys[len(whole)-1] = keys[len(whole)-1], keys[i]
		}
		if len(whole) == 1000 {
			break
		}
	}
	var rest []Key
	for _, k := range keys[len(whole):] {
		rest = append(rest, k)
	}
	if len(whole) != 1000 || len(rest) < 2000 {
		t.Fatalf("%d keys for the cache, %d for the flow set", len(whole), len(rest))
	}
	rest = rest[:2000]
	// The cache's flows, then the others straight into the sketch: what the
	// datapath does when the others' sets are full of heavier flows.
	cached, cache, _, tr, _ := cacheRun(t, p, whole, 5000, func(r *rand.Rand) int { return r.IntN(len(whole)) })
	inCache := len(tr) // the keys drawn at least once
	for i := range rest {
		length := uint64(100 + i)
		cached.Add(&rest[i], length)
		tr.add(rest[i], 1, length)
	}
	if capacity := p.FlowSet.Capacity(); len(tr) <= capacity || len(rest) > capacity {
		t.Fatalf("capacity %d: the test needs it between %d and %d flows", capacity, len(rest), len(tr))
	}

	folded := &Encoder{p: p, FlowSet: bytes.Clone(cached.FlowSet), Filter: bytes.Clone(cached.Filter), CountMin: bytes.Clone(cached.CountMin)}
	if _, err := FoldCache(p, folded.FlowSet, folded.Filter, folded.CountMin, cache); err != nil {
		t.Fatal(err)
	}
	if res, err := Decode(p.FlowSet, [][]byte{folded.FlowSet}); err != nil || res.Complete() {
		t.Fatalf("folded in, %d flows decoded completely (%v): the test does not test the capacity taken", len(res.Flows), err)
	}

	taken, err := TakeCache(p, cached.CountMin, cache)
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) != inCache {
		t.Errorf("took %d flows, want %d", len(taken), inCache)
	}
	decodesExactly(t, p, cached, taken, tr)
	// The count-min sketch counts every packet, the taken flows' too.
	cm, err := NewCountMin(p.CountMin, [][]byte{cached.CountMin})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Total() != tr.total() {
		t.Errorf("count-min total %+v, want %+v", cm.Total(), tr.total())
	}
}

// decodesExactly decodes one CPU's sketch with the flows taken from its
// cache and checks that every flow of tr comes back with its exact counts.
func decodesExactly(t *testing.T, p Params, e *Encoder, taken []Flow, tr truth) {
	t.Helper()
	res, err := DecodeCached(p.FlowSet, [][]byte{e.FlowSet}, [][]byte{e.Filter}, [][]Flow{taken})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete() || len(res.Flows) != len(tr) {
		t.Fatalf("decoded %d flows (%d unverified, %d undecoded), want %d", len(res.Flows), len(res.Unverified), res.Undecoded, len(tr))
	}
	for _, f := range res.Flows {
		if want := tr[f.Key]; f.Packets != want.Packets || f.Bytes != want.Bytes {
			t.Errorf("flow %x: %d packets %d bytes, want %+v", f.Key[:12], f.Packets, f.Bytes, want)
		}
	}
}
