package datapath

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// The table state (struct table_state in bpf/lib/flow.h) is the one value
// of the flow_state map: which table the programs write, and, for
// userspace, the identity of the set of tables and the epoch and install
// time of each table. Userspace is its only writer, and writes all of it at
// once; it lives in a map rather than in the agent so that it is pinned
// with the tables and the next agent continues from it.

func (s *loupeTableState) epoch(i uint32) uint64 {
	if i&1 == 0 {
		return s.EpochA
	}
	return s.EpochB
}

func (s *loupeTableState) installed(i uint32) uint64 {
	if i&1 == 0 {
		return s.InstalledA
	}
	return s.InstalledB
}

// activate makes table i the one the programs write, with a new epoch.
func (s *loupeTableState) activate(i uint32, now uint64) {
	next := max(s.EpochA, s.EpochB) + 1
	if i&1 == 0 {
		s.EpochA, s.InstalledA = next, now
	} else {
		s.EpochB, s.InstalledB = next, now
	}
	s.Active = i & 1
}

// newTableState is the state of a new set: flows_a active in epoch 1,
// flows_b never written.
func newTableState() (loupeTableState, error) {
	id, err := newSetID()
	if err != nil {
		return loupeTableState{}, err
	}
	s := loupeTableState{PinSet: id}
	s.activate(0, monoNow())
	return s, nil
}

// newSetID returns a random, non-zero pin-set identity.
func newSetID() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("pin set id: %w", err)
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id, nil
		}
	}
}

func (d *Datapath) readState() (loupeTableState, error) {
	var s loupeTableState
	if err := d.objs.FlowState.Lookup(uint32(0), &s); err != nil {
		return s, fmt.Errorf("read table state: %w", err)
	}
	return s, nil
}

func (d *Datapath) writeState(s loupeTableState) error {
	if err := d.objs.FlowState.Update(uint32(0), &s, 0); err != nil {
		return fmt.Errorf("write table state: %w", err)
	}
	return nil
}

// monoNow is CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func monoNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return uint64(ts.Nano())
}
