package hop

import (
	"testing"
	"time"
)

// The matcher's clock is CLOCK_MONOTONIC: against the system call, within
// a millisecond, and it does not go back.
func TestMonoClock(t *testing.T) {
	c := newMonoClock()
	prev := c.now()
	for range 1000 {
		a, sys, b := c.now(), MonotonicNow(), c.now()
		if a < prev || b < a {
			t.Fatalf("went back: %d, %d, %d", prev, a, b)
		}
		if sys+uint64(time.Millisecond) < a || b+uint64(time.Millisecond) < sys {
			t.Fatalf("clock %d..%d, CLOCK_MONOTONIC %d", a, b, sys)
		}
		prev = b
	}
}
