package export

import (
	"maps"
	"sync"

	"loupe/internal/flow"
)

// Ledger keeps the accounts of a sink that holds records back while its
// destination fails (the store, the JSON file): every record handed to the
// sink is held, stored, or dropped by reason, in records and in packets.
// It remembers the reason of the last failed attempt, so that what is
// dropped while the destination fails is dropped for that reason.
//
// The sink's own goroutine (the evictor's) moves records between the
// accounts; Accounting may be called from any goroutine (a scrape).
type Ledger struct {
	mu      sync.Mutex
	held    Count
	stored  Count
	dropped map[string]Count
	failure string // reason of the last failed attempt; "" after a success
}

// NewLedger returns a ledger whose Accounting lists the reasons given,
// zero or not, so that their series exist before the first loss.
func NewLedger(reasons ...string) *Ledger {
	l := &Ledger{dropped: make(map[string]Count, len(reasons))}
	for _, r := range reasons {
		l.dropped[r] = Count{}
	}
	return l
}

// Hold counts records the sink took and holds until they are stored.
func (l *Ledger) Hold(recs []flow.Record) {
	n := CountOf(recs)
	l.mu.Lock()
	l.held.Add(n)
	l.mu.Unlock()
}

// Stored moves n of the held records to the stored ones, and records that
// the attempt succeeded.
func (l *Ledger) Stored(n Count) {
	l.mu.Lock()
	l.stored.Add(n)
	l.held.Sub(n)
	l.failure = ""
	l.mu.Unlock()
}

// StoredAll moves every held record to the stored ones, records that the
// attempt succeeded, and returns how many there were.
func (l *Ledger) StoredAll() Count {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.held
	l.stored.Add(n)
	l.held = Count{}
	l.failure = ""
	return n
}

// Failed records that an attempt failed with err.
func (l *Ledger) Failed(err error) {
	l.mu.Lock()
	l.failure = ReasonOf(err)
	l.mu.Unlock()
}

// Failure returns the reason of the last failed attempt, "" if the last
// attempt succeeded.
func (l *Ledger) Failure() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failure
}

// Drop counts records the sink gave up without holding them, for the reason
// of the last failure (write_error if none), and returns the count and the
// reason.
func (l *Ledger) Drop(recs []flow.Record) (Count, string) {
	n := CountOf(recs)
	l.mu.Lock()
	defer l.mu.Unlock()
	reason := l.failure
	if reason == "" {
		reason = ReasonWriteError
	}
	l.addDropped(reason, n)
	return n, reason
}

// DropHeld counts every held record as dropped for reason and returns how
// many there were.
func (l *Ledger) DropHeld(reason string) Count {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.held
	l.addDropped(reason, n)
	l.held = Count{}
	return n
}

func (l *Ledger) addDropped(reason string, n Count) {
	d := l.dropped[reason]
	d.Add(n)
	l.dropped[reason] = d
}

// Held returns the records held now.
func (l *Ledger) Held() Count {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// TotalDropped sums the drops of every reason.
func (l *Ledger) TotalDropped() Count {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t Count
	for _, c := range l.dropped {
		t.Add(c)
	}
	return t
}

// Accounting returns the accounts, for export.Accounter.
func (l *Ledger) Accounting() Accounting {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Accounting{Stored: l.stored, Pending: l.held, Dropped: maps.Clone(l.dropped)}
}
