package sketch

// Encoder is one CPU's sketch memory, laid out as the datapath's maps hold it,
// with the datapath's insert in Go: tests and simulations build sketches
// through it exactly as the BPF program will, and hand its bytes to Decode and
// NewCountMin.
type Encoder struct {
	p        Params
	FlowSet  []byte // Cells × CellSize: the flow set's cells in index order
	Filter   []byte // FilterBytes: bit b is bit b%64 of 64-bit word b/64
	CountMin []byte // Rows × Width × CounterSize: row-major (packets, bytes) pairs
}

// NewEncoder returns an empty sketch sized by p.
func NewEncoder(p Params) (*Encoder, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Encoder{
		p:        p,
		FlowSet:  make([]byte, p.FlowSet.TableBytes()),
		Filter:   make([]byte, p.FlowSet.FilterBytes()),
		CountMin: make([]byte, p.CountMin.Bytes()),
	}, nil
}

// Reset empties the sketch, as the agent does between two reads.
func (e *Encoder) Reset() {
	clear(e.FlowSet)
	clear(e.Filter)
	clear(e.CountMin)
}

// Add records one packet of length bytes of flow k and reports whether it
// inserted the flow's key: false when the flow filter already held the flow,
// or wrongly believed it did (a false positive: then the packet is counted in
// the flow's cells under no key).
func (e *Encoder) Add(k *Key, length uint64) (inserted bool) {
	return e.AddN(k, 1, length)
}

// AddN records packets packets of flow k totalling bytes bytes, as that many
// calls of Add would (only the first can insert the key). It lets simulations
// add a flow in one step.
func (e *Encoder) AddN(k *Key, packets, bytes uint64) (inserted bool) {
	if packets == 0 {
		return false
	}
	h := hashKey(k)
	inserted = !e.testAndSet(h)
	fs := e.p.FlowSet
	chk := uint32(packets) * h.check()
	for _, c := range h.cells(fs.Cells / K) {
		b := e.FlowSet[c*CellSize : (c+1)*CellSize]
		if inserted {
			for i := range KeySize {
				b[offKeyXor+i] ^= k[i]
			}
			byteOrder.PutUint32(b[offFlowCount:], byteOrder.Uint32(b[offFlowCount:])+1)
		}
		byteOrder.PutUint32(b[offCheck:], byteOrder.Uint32(b[offCheck:])+chk)
		byteOrder.PutUint64(b[offPackets:], byteOrder.Uint64(b[offPackets:])+packets)
		byteOrder.PutUint64(b[offBytes:], byteOrder.Uint64(b[offBytes:])+bytes)
	}
	e.addCountMin(h, packets, bytes)
	return inserted
}

// addCountMin adds packets and bytes to the count-min pairs of the flow of
// hash h.
func (e *Encoder) addCountMin(h keyHash, packets, bytes uint64) {
	cm := e.p.CountMin
	for r := range cm.Rows {
		off := (r*cm.Width + h.column(r, cm.Width)) * CounterSize
		byteOrder.PutUint64(e.CountMin[off:], byteOrder.Uint64(e.CountMin[off:])+packets)
		byteOrder.PutUint64(e.CountMin[off+8:], byteOrder.Uint64(e.CountMin[off+8:])+bytes)
	}
}

// testAndSet sets the flow's bits in the flow filter and reports whether they
// were all set already. The probes are pos+i·step mod m for i < kf, step in
// 1..m-1: with m prime they are kf distinct bits (double hashing, as
// Kirsch and Mitzenmacher showed, keeps the false-positive rate of kf
// independent hashes while the datapath computes two).
func (e *Encoder) testAndSet(h keyHash) (seen bool) {
	fs := e.p.FlowSet
	m := fs.FilterBits
	pos, step := h.probes(m)
	seen = true
	for range fs.FilterHashes {
		off := pos / 64 * 8
		w := byteOrder.Uint64(e.Filter[off:])
		bit := uint64(1) << (pos % 64)
		seen = seen && w&bit != 0
		byteOrder.PutUint64(e.Filter[off:], w|bit)
		pos += step
		if pos >= m {
			pos -= m
		}
	}
	return seen
}
