package store

import "testing"

// TestFlowIDsReplaced: a Reader's flow ids are replaced, as its address
// interners are, once they hold over twice the flows its cached segments'
// records can be, and whenever the addresses as stored, whose ids their
// keys hold, are replaced; never otherwise.
func TestFlowIDsReplaced(t *testing.T) {
	var c segCache
	_, fl := c.interners()
	if _, again := c.interners(); again != fl || fl.raw != c.raw {
		t.Fatal("flow ids replaced without cause, or not over the Reader's addresses")
	}
	c.records = 1 << 20
	fl.next.Store(2 << 20)
	if _, again := c.interners(); again != fl {
		t.Fatal("flow ids replaced at twice the records")
	}
	fl.next.Store(2<<20 + 1)
	_, fresh := c.interners()
	if fresh == fl || fresh.size() != 0 || fresh.raw != c.raw {
		t.Fatal("flow ids over twice the records not replaced")
	}
	raw := c.raw
	raw.keys = make([]addrKey, 2*max(c.addrs, 1<<16)+1)
	_, again := c.interners()
	if c.raw == raw || again == fresh || again.raw != c.raw {
		t.Fatal("flow ids kept over replaced addresses")
	}
}
