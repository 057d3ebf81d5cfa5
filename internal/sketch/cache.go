package sketch

import "fmt"

// FoldCache inserts everything a CPU's flow cache holds into that CPU's
// sketch, as the datapath would have had each entry's flow been pushed out
// of its entry (package documentation, "The flow cache"): the sketch is then
// what it would have been had every packet been inserted as it came. cache
// holds p.Cache entries of CellSize bytes; flowSet, filter and countMin are
// the CPU's structures, laid out as Encoder's, and are updated in place. It
// returns the number of flows it inserted.
func FoldCache(p Params, flowSet, filter, countMin, cache []byte) (int, error) {
	flows, err := CacheFlows(p, cache)
	if err != nil {
		return 0, err
	}
	if err := checkLen("flow set", flowSet, p.FlowSet.Cells, CellSize); err != nil {
		return 0, err
	}
	if len(filter) != p.FlowSet.FilterBytes() {
		return 0, fmt.Errorf("flow filter: %d bytes, want %d", len(filter), p.FlowSet.FilterBytes())
	}
	if err := checkCountMin(p, countMin); err != nil {
		return 0, err
	}
	e := &Encoder{p: p, FlowSet: flowSet, Filter: filter, CountMin: countMin}
	for i := range flows {
		e.AddN(&flows[i].Key, flows[i].Packets, flows[i].Bytes)
	}
	return len(flows), nil
}

// TakeCache is what decoding does with a CPU's flow cache instead of
// FoldCache: each entry holds, exactly, the packets its flow spilled on that
// CPU since it took the entry, and whatever the flow spilled before is in
// the flow set already (inserted when the flow lost an entry). So the
// entries are returned as they are, as flows of that CPU with exact counts
// (DecodeCached adds them to what the flow set decodes); they take none of
// the flow set's capacity and none of the filter's false positives. They
// are counted in countMin, updated in place, so that its estimates stay
// upper bounds of all the traffic; the flow set and the filter are not
// touched.
func TakeCache(p Params, countMin, cache []byte) ([]Flow, error) {
	flows, err := CacheFlows(p, cache)
	if err != nil {
		return nil, err
	}
	if err := checkCountMin(p, countMin); err != nil {
		return nil, err
	}
	e := &Encoder{p: p, CountMin: countMin}
	for i := range flows {
		e.addCountMin(hashKey(&flows[i].Key), flows[i].Packets, flows[i].Bytes)
	}
	return flows, nil
}

// CacheFlows returns the flows a CPU's flow cache holds (p.Cache entries
// of CellSize bytes), in entry order; a free entry holds none.
func CacheFlows(p Params, cache []byte) ([]Flow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := checkLen("flow cache", cache, p.Cache, CellSize); err != nil {
		return nil, err
	}
	var flows []Flow
	for i := range p.Cache {
		// The entry's key is the flow key's 60 bytes, then its tag
		// where a Key has 4 zero bytes.
		c := cache[i*CellSize : (i+1)*CellSize]
		fl := Flow{Packets: byteOrder.Uint64(c[offPackets:]), Bytes: byteOrder.Uint64(c[offBytes:])}
		if fl.Packets == 0 {
			continue // free
		}
		copy(fl.Key[:cacheKeySize], c[offKeyXor:])
		flows = append(flows, fl)
	}
	return flows, nil
}

func checkCountMin(p Params, countMin []byte) error {
	if len(countMin) != p.CountMin.Bytes() {
		return fmt.Errorf("count-min sketch: %d bytes, want %d", len(countMin), p.CountMin.Bytes())
	}
	return nil
}

// cacheKeySize is the part of a cache entry's key_xor that holds the key.
const cacheKeySize = KeySize - 4
