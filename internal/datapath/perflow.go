package datapath

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
)

// Capabilities that keep a result per flow and interval (DNS, the TCP
// handshake) keep it in a pair of tables that swap with the flow tables
// (flows_interval in bpf/flows/flows.h): the programs write the one of the
// active flow table's index. After Rotate, the other one holds exactly the
// interval the drained flow table holds, and no program writes it: it is
// read and emptied whole (drainStandby).

// sizeTCSignals sizes the tables of the dns and handshake capabilities,
// which need flows: their results swap with the flow tables.
func sizeTCSignals(spec *ebpf.CollectionSpec, opts *Options) error {
	dns := slices.Contains(opts.Capabilities, "dns")
	hs := slices.Contains(opts.Capabilities, "handshake")
	if (dns || hs) && !slices.Contains(opts.Capabilities, "flows") {
		return errors.New("the dns and handshake capabilities keep their results per flow and interval: they need flows")
	}
	if opts.DNS == (DNSSizes{}) {
		opts.DNS = DefaultDNSSizes()
	}
	if opts.Handshake == (HandshakeSizes{}) {
		opts.Handshake = DefaultHandshakeSizes()
	}
	if err := sizeDNS(spec, opts.DNS, dns); err != nil {
		return err
	}
	return sizeHandshake(spec, opts.Handshake, hs)
}

// LatencyBuckets is the number of buckets of the kernel's latency
// histograms (bpf/lib/latency.h): 0 holds under 1 us, i holds [2^(i-1),
// 2^i) us, the last everything from 2^22 us on.
const LatencyBuckets = 24

// LatencyHist is a latency histogram the kernel keeps, summed over the
// CPUs.
type LatencyHist struct {
	Count   uint64 // every observation: the buckets' sum
	SumNs   uint64
	Buckets [LatencyBuckets]uint64
}

// Cumulative returns the histogram as Prometheus wants it: for each
// bucket's upper bound in seconds (1 us, then powers of two; the last
// bucket, unbounded, is Count), the observations at or below it.
func (h LatencyHist) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, LatencyBuckets-1)
	var cum uint64
	for i := range LatencyBuckets - 1 {
		cum += h.Buckets[i]
		out[float64(uint64(1)<<i)/1e6] = cum
	}
	return out
}

func (h *LatencyHist) add(sum uint64, buckets []uint64) {
	h.SumNs += sum
	for i, n := range buckets {
		if i < LatencyBuckets {
			h.Buckets[i] += n
			h.Count += n
		}
	}
}

// standby returns the table of the pair (a, b) that the programs do not
// write now. The switch is read from the kernel, not from the Datapath's
// copy, which only Rotate's goroutine may touch: if a swap happens between
// this read and the drain, the table drained is the active one, whose
// entries are then read early but never lost (each is read and deleted
// under its bucket's lock).
func (d *Datapath) standby(a, b *ebpf.Map) (*ebpf.Map, error) {
	st, err := d.readState()
	if err != nil {
		return nil, err
	}
	if st.Active&1 == 0 {
		return b, nil
	}
	return a, nil
}

// perFlowBatch is the entries read per batch syscall from a per-flow
// result table.
const perFlowBatch = 1024

// drainStandby reads and deletes every entry of the standby table of the
// pair (a, b), calling fn for each.
func drainStandby[V any](d *Datapath, a, b *ebpf.Map, fn func(k *flow.Key, v *V)) error {
	m, err := d.standby(a, b)
	if err != nil {
		return err
	}
	keys := make([]loupeFlowKey, perFlowBatch)
	vals := make([]V, perFlowBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookupAndDelete(&cursor, keys, vals, nil)
		for i := range n {
			var k flow.Key
			keyFromBPF(&k, &keys[i])
			fn(&k, &vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return drainByIteration(m, fn)
		}
		if err != nil {
			return fmt.Errorf("drain %s: %w", m, err)
		}
	}
}

// drainByIteration is drainStandby for kernels without batch operations:
// every entry read, then deleted; one that a program rewrote in between is
// deleted with its new value unread, which only a table that is not
// standby (a swap during the drain) can see.
func drainByIteration[V any](m *ebpf.Map, fn func(k *flow.Key, v *V)) error {
	var (
		bk   loupeFlowKey
		v    V
		keys []loupeFlowKey
	)
	it := m.Iterate()
	for it.Next(&bk, &v) {
		var k flow.Key
		keyFromBPF(&k, &bk)
		fn(&k, &v)
		keys = append(keys, bk)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate %s: %w", m, err)
	}
	for i := range keys {
		if err := m.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete from %s: %w", m, err)
		}
	}
	return nil
}

// perCPUValue reads entry 0 of a per-CPU array, one value per CPU.
func perCPUValue[V any](d *Datapath, m *ebpf.Map) ([]V, error) {
	per := make([]V, d.ncpu)
	if err := m.Lookup(uint32(0), &per); err != nil {
		return nil, fmt.Errorf("read %s: %w", m, err)
	}
	return per, nil
}
