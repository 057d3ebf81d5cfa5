package ifnames

import (
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := New(func() time.Time { return now })
	tb.Set(2, "eth0")
	tb.Set(3, "veth1")
	if tb.Name(2) != "eth0" || tb.Name(3) != "veth1" || tb.Name(4) != "" {
		t.Fatalf("names: %q %q %q", tb.Name(2), tb.Name(3), tb.Name(4))
	}
	tb.Set(2, "wan0") // renamed
	tb.Remove(3)
	now = now.Add(GoneTTL)
	if tb.Name(2) != "wan0" || tb.Name(3) != "veth1" {
		t.Fatalf("after rename and removal: %q %q", tb.Name(2), tb.Name(3))
	}
	now = now.Add(time.Second)
	if tb.Name(3) != "" {
		t.Fatalf("a name %v after removal: %q", GoneTTL+time.Second, tb.Name(3))
	}
	tb.Set(3, "veth9") // the index reused
	tb.Remove(7)       // never seen: nothing to remember
	if tb.Name(3) != "veth9" || tb.Name(7) != "" {
		t.Fatalf("reused index: %q, unknown: %q", tb.Name(3), tb.Name(7))
	}
}
