package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
)

// tableDrain is one of this set's tables, swapped out (or left swapped out
// by a previous agent): read without deleting, then cleared once its
// records are committed. Reading and clearing are two passes over the
// table, so that a crash in between leaves the table whole for the next
// agent, and so that the keys need not be held between them (a second
// batch read costs less than the memory of a full table's keys).
type tableDrain struct {
	d      *Datapath
	idx    uint32
	mark   flow.Mark
	cutoff uint64
	// used are the slots Read found taken (per-CPU tables), which Clear
	// frees; read says Read went through the whole table.
	used []uint32
	read bool
}

func (t *tableDrain) Mark() flow.Mark { return t.mark }
func (t *tableDrain) Cutoff() uint64  { return t.cutoff }

// Events: this set's diverted packets come through the live ring reader.
func (t *tableDrain) Events(from uint64, _ func(*flow.Event)) (uint64, error) { return from, nil }

// Read calls fn for every entry of the table, without deleting anything.
func (t *tableDrain) Read(fn func(k *flow.Key, perCPU []flow.Stats)) (int, error) {
	if h := t.d.slots[t.idx]; h != nil {
		t.read = false
		n, err := h.read(t.d.slotBuf, &t.used, fn)
		t.read = err == nil
		return n, err
	}
	d, m := t.d, t.d.tables[t.idx]
	per := len(d.stats)
	total := 0
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, d.keys, d.vals, nil)
		for i := range n {
			var k flow.Key
			keyFromBPF(&k, &d.keys[i])
			for c := range per {
				statsFromBPF(&d.stats[c], &d.vals[i*per+c])
			}
			fn(&k, d.stats)
		}
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total, nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return t.readByIteration(fn)
		}
		if err != nil {
			return total, fmt.Errorf("read flow table: %w", err)
		}
	}
}

// readByIteration is the fallback for kernels without batch operations.
func (t *tableDrain) readByIteration(fn func(k *flow.Key, perCPU []flow.Stats)) (int, error) {
	d := t.d
	var (
		bk    loupeFlowKey
		bv    = make([]loupeFlowStats, len(d.stats))
		iter  = d.tables[t.idx].Iterate()
		total int
	)
	var value any = &bv[0]
	if d.opts.Tables == PerCPU {
		value = &bv
	}
	for iter.Next(&bk, value) {
		var k flow.Key
		keyFromBPF(&k, &bk)
		for c := range bv {
			statsFromBPF(&d.stats[c], &bv[c])
		}
		fn(&k, d.stats)
		total++
	}
	if err := iter.Err(); err != nil {
		return total, fmt.Errorf("iterate flow table: %w", err)
	}
	return total, nil
}

// Clear deletes every entry, every entry of the tunnel table beside it,
// and zeroes the sketch half that goes with the table. The table is
// swapped out, so nothing adds to any of them meanwhile; once cleared it
// may become the active table again.
func (t *tableDrain) Clear() error {
	d, m := t.d, t.d.tables[t.idx]
	if h := d.slots[t.idx]; h != nil {
		// The slots Read found, or, if it did not go through, all.
		if err := h.clear(t.d.slotBuf, t.used, !t.read); err != nil {
			return err
		}
		t.used, t.read = t.used[:0], false
		return t.clearBeside()
	}
	var cursor ebpf.MapBatchCursor
	for {
		_, err := m.BatchLookupAndDelete(&cursor, d.keys, d.vals, nil)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			if err := clearByIteration(m); err != nil {
				return err
			}
			break
		}
		if err != nil {
			return fmt.Errorf("clear flow table: %w", err)
		}
	}
	return t.clearBeside()
}

// clearBeside clears what goes with the table, once the table is empty:
// its tunnel table and its sketch half.
func (t *tableDrain) clearBeside() error {
	d := t.d
	if err := d.clearTunnels(t.idx); err != nil {
		return err
	}
	// The sketch half and its full flags go with the table: cleared
	// after it, so that a crash in between leaves the half to be read
	// again with an empty table rather than lose it.
	if s := d.sketchMaps(); s != nil {
		if err := s.clear(t.idx); err != nil {
			return err
		}
	}
	d.cleared[t.idx] = true
	return nil
}

func clearByIteration(m *ebpf.Map) error {
	var keys []loupeFlowKey
	var prev any
	for {
		var k loupeFlowKey
		err := m.NextKey(prev, &k)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("iterate flow table: %w", err)
		}
		keys = append(keys, k)
		prev = &keys[len(keys)-1]
	}
	for i := range keys {
		if err := m.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear flow table: %w", err)
		}
	}
	return nil
}
