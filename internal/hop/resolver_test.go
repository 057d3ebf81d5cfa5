package hop

import (
	"fmt"
	"testing"
	"time"
)

// The resolver trusts a name for resolverTTL from the time it is handed,
// and asks again after.
func TestNetlinkResolverCacheAt(t *testing.T) {
	asked := 0
	n := &NetlinkResolver{Name: func(i uint32) string { asked++; return fmt.Sprintf("if%d-%d", i, asked) },
		Now: func() time.Time { t.Fatal("the clock was read"); return time.Time{} }}
	t0 := time.Unix(1700000000, 0)
	for _, c := range []struct {
		at   time.Duration
		want string
	}{{0, "if1-1"}, {resolverTTL - time.Nanosecond, "if1-1"}, {resolverTTL, "if1-2"}, {resolverTTL + time.Second, "if1-2"}} {
		if got := n.IfaceAt(1, t0.Add(c.at)).Name; got != c.want {
			t.Errorf("at +%v: %q, want %q", c.at, got, c.want)
		}
	}
}
