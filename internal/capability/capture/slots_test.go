package capture

import (
	"testing"
	"time"
)

// stepClock is a flow.Clock that moves only when told.
type stepClock struct{ mono uint64 }

func (c *stepClock) Now() time.Time { return time.Unix(0, int64(c.mono)) }
func (c *stepClock) Mono() uint64   { return c.mono }

// A packet names the trigger that held its rule's slot when it crossed the
// hook, whatever happened to the slot before the reader got to it: the
// 5xx trigger is replaced by a 404 one while packets of its traces are
// still on their way, then a third trigger takes its slot.
func TestSlotNameAtThePacketsTime(t *testing.T) {
	u, err := New(Config{}, "test", discard()) // the default trigger, in slot 0
	if err != nil {
		t.Fatal(err)
	}
	clock := &stepClock{mono: u.named[0][0].since + 1000}
	u.clock = clock
	add := func(s string) {
		t.Helper()
		tr, err := ParseTrigger(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.AddTrigger(tr); err != nil {
			t.Fatal(err)
		}
	}
	del := func(name string) {
		t.Helper()
		if err := u.DeleteTrigger(name); err != nil {
			t.Fatal(err)
		}
	}
	start := clock.mono
	add("http.status=404 name=nf") // slot 1
	clock.mono += 1000
	del(DefaultTrigger)
	clock.mono += 1000
	replaced := clock.mono
	add("http.status=503 name=svc") // slot 0 again
	clock.mono += 1000

	for _, tc := range []struct {
		rule uint8
		at   uint64
		want string
	}{
		{0, start - 1, DefaultTrigger},
		{0, replaced - 1, DefaultTrigger}, // deleted, its traces' packets still coming
		{0, replaced, "svc"},
		{0, clock.mono, "svc"},
		{1, start, "nf"},
		{1, start - 1, "nf"}, // a kept packet, before its trigger existed: its only holder
		{2, clock.mono, ""},  // never held
		{9, clock.mono, ""},  // out of range
	} {
		if got := u.slotName(tc.rule, tc.at); got != tc.want {
			t.Errorf("slot %d at %d: %q, want %q", tc.rule, tc.at, got, tc.want)
		}
	}

	// A slot remembers its last slotHistory holders.
	for range 2 * slotHistory {
		del("svc")
		clock.mono += 1000
		add("http.status=503 name=svc")
	}
	if n := len(u.named[0]); n != slotHistory {
		t.Errorf("slot 0 remembers %d holders, want %d", n, slotHistory)
	}
	if got := u.slotName(0, start); got != "svc" {
		t.Errorf("before every remembered holder: %q, want the oldest remembered, svc", got)
	}
}
