// Package ifnames names interface indexes for the records and packets the
// capabilities emit: the interfaces of the agent's network namespace as the
// attach manager's netlink watcher last saw them, and those removed a
// moment ago, whose late records (a final eviction, a packet still in a
// buffer) must still carry a name.
//
// It lives apart from internal/attach so that naming is not attaching: the
// watcher feeds it, every unit reads it through capability.Host.IfaceName,
// and neither depends on the other's internals.
package ifnames

import (
	"sync"
	"time"
)

// GoneTTL is how long a removed interface's name is remembered.
const GoneTTL = time.Minute

// Table maps interface indexes to names. Safe for concurrent use.
type Table struct {
	mu   sync.RWMutex
	live map[uint32]string
	gone map[uint32]gone
	now  func() time.Time
}

type gone struct {
	name string
	at   time.Time
}

// New returns an empty table; now is its clock (nil: time.Now).
func New(now func() time.Time) *Table {
	if now == nil {
		now = time.Now
	}
	return &Table{live: map[uint32]string{}, gone: map[uint32]gone{}, now: now}
}

// Set records that ifindex is named name now.
func (t *Table) Set(ifindex uint32, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live[ifindex] = name
	delete(t.gone, ifindex)
}

// Remove records that ifindex disappeared: its name is still given for
// GoneTTL, for late records.
func (t *Table) Remove(ifindex uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name, ok := t.live[ifindex]
	if !ok {
		return
	}
	delete(t.live, ifindex)
	now := t.now()
	t.gone[ifindex] = gone{name: name, at: now}
	for k, g := range t.gone {
		if now.Sub(g.at) > GoneTTL {
			delete(t.gone, k)
		}
	}
}

// Name returns the name of ifindex, of an interface removed in the last
// GoneTTL included, or "" if unknown.
func (t *Table) Name(ifindex uint32) string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if n, ok := t.live[ifindex]; ok {
		return n
	}
	if g, ok := t.gone[ifindex]; ok && t.now().Sub(g.at) <= GoneTTL {
		return g.name
	}
	return ""
}
