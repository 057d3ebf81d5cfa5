package export

import (
	"errors"
	"syscall"
	"testing"

	"loupe/internal/flow"
)

// TestLedgerBalances: whatever the sequence, stored + held + dropped equals
// what was handed over, and drops take the reason of the last failure.
func TestLedgerBalances(t *testing.T) {
	recs := func(n int, packets uint64) []flow.Record {
		r := make([]flow.Record, n)
		for i := range r {
			r[i].Packets = packets
		}
		return r
	}
	l := NewLedger(ReasonNoSpace, ReasonWriteError)
	var given Count
	give := func(r []flow.Record) { given.Add(CountOf(r)); l.Hold(r) }
	balanced := func(step string) Accounting {
		t.Helper()
		a := l.Accounting()
		sum := a.Stored
		sum.Add(a.Pending)
		for _, d := range a.Dropped {
			sum.Add(d)
		}
		if sum != given {
			t.Fatalf("%s: stored %+v + held %+v + dropped %+v != given %+v", step, a.Stored, a.Pending, a.Dropped, given)
		}
		return a
	}

	give(recs(10, 2))
	l.Stored(Count{Records: 4, Packets: 8})
	balanced("partial store")
	if l.Failure() != "" {
		t.Fatalf("failure %q after a success", l.Failure())
	}
	l.Failed(syscall.ENOSPC)
	r := recs(3, 5)
	given.Add(CountOf(r))
	if n, reason := l.Drop(r); n != (Count{Records: 3, Packets: 15}) || reason != ReasonNoSpace {
		t.Fatalf("drop: %+v %q", n, reason)
	}
	balanced("drop while full")
	l.Failed(errors.New("EIO"))
	if lost := l.DropHeld(l.Failure()); lost != (Count{Records: 6, Packets: 12}) {
		t.Fatalf("drop held: %+v", lost)
	}
	a := balanced("drop held")
	if a.Dropped[ReasonNoSpace] != (Count{Records: 3, Packets: 15}) || a.Dropped[ReasonWriteError] != (Count{Records: 6, Packets: 12}) {
		t.Fatalf("dropped by reason: %+v", a.Dropped)
	}
	give(recs(2, 1))
	if n := l.StoredAll(); n != (Count{Records: 2, Packets: 2}) || l.Failure() != "" || l.Held() != (Count{}) {
		t.Fatalf("stored all: %+v, failure %q, held %+v", n, l.Failure(), l.Held())
	}
	a = balanced("stored all")
	if a.Stored != (Count{Records: 6, Packets: 10}) || l.TotalDropped() != (Count{Records: 9, Packets: 27}) {
		t.Fatalf("stored %+v, dropped %+v", a.Stored, l.TotalDropped())
	}
	// Without a failure on record, a drop is a write error.
	given.Add(CountOf(recs(1, 1)))
	if _, reason := l.Drop(recs(1, 1)); reason != ReasonWriteError {
		t.Fatalf("reason %q without a failure", reason)
	}
	balanced("drop without failure")
}
