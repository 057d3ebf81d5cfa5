package flow

// Mark says what one eviction drained, so that a drain repeated after a
// crash of the agent is recognised: the records of a table are handed to
// the sinks with the table's mark, the store commits the mark with them
// (in the same manifest publish), and only then is the table cleared. An
// agent that finds a table whose mark the store already holds clears it
// without emitting it again.
type Mark struct {
	// Set identifies the set of kernel tables (random per pin set), so
	// that epochs of different sets never compare.
	Set uint64
	// Epoch numbers the contents of one table between two swaps within
	// the set; it grows by one at every swap. 0: nothing to record.
	Epoch uint64
	// RingPos is the ring-buffer position up to which the set's diverted
	// packets are in the records.
	RingPos uint64
}

// Covers reports whether m (what a sink holds) includes the contents of
// the table epoch e of its set.
func (m Mark) Covers(e uint64) bool { return e != 0 && e <= m.Epoch }

// Merge returns the later of m and o, field by field: both epochs and ring
// positions only grow within a set.
func (m Mark) Merge(o Mark) Mark {
	m.Epoch = max(m.Epoch, o.Epoch)
	m.RingPos = max(m.RingPos, o.RingPos)
	return m
}

// Drain is one table to empty into records: a table just swapped out, or
// one a previous agent left (its standby table, or the tables of a pin set
// of another layout).
type Drain interface {
	// Mark is the table's set and epoch (RingPos unused).
	Mark() Mark
	// Cutoff is CLOCK_MONOTONIC when the table was made active: per-CPU
	// copies last updated before it are leftovers (MergePerCPU).
	Cutoff() uint64
	// Read calls fn for every flow without removing anything; the
	// per-CPU values are valid only during the call.
	Read(fn func(k *Key, perCPU []Stats)) (int, error)
	// Events calls fn for the diverted packets that belong with this
	// table, from ring position from on, and returns the position after
	// the last: the ring buffer of a retired pin set, read with its last
	// table. Tables of the running set return (from, nil) at once: their
	// events come through EvictorConfig.Events.
	Events(from uint64, fn func(*Event)) (uint64, error)
	// Clear empties the table once its records are committed (for the
	// last table of a retired set: removes the set).
	Clear() error
}
