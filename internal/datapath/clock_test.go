package datapath

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// TestLastSeenFollowsTheClock checks the coarse clock the flow program
// keeps per CPU (coarse_now, bpf/flows/flows.h): a flow's last_seen is the
// time of its last packet, to a tick, however long the CPU kept the clock
// it read before. A clock read once and never again, or kept past the tick
// it was read in, leaves last_seen at an earlier packet's time, before the
// coarse clock Go reads just ahead of the last packet.
func TestLastSeenFollowsTheClock(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp := loadForTest(t, Options{FlowBudget: 64, RingBufSize: 1 << 16})
	f := udpFrame(t, 1000, 100)
	monotonic := func(clock int32) uint64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(clock, &ts); err != nil {
			t.Fatal(err)
		}
		return uint64(ts.Nano())
	}
	var before, after uint64
	const runs = 5
	for i := range runs {
		if i > 0 {
			time.Sleep(25 * time.Millisecond) // several ticks at any CONFIG_HZ
		}
		before = monotonic(unix.CLOCK_MONOTONIC_COARSE)
		runProg(t, dp, flow.Ingress, f)
		after = monotonic(unix.CLOCK_MONOTONIC)
	}
	got := drainAll(t, dp)
	if len(got) != 1 || got[0].stats.Packets != runs {
		t.Fatalf("drained %+v, want one flow of %d packets", got, runs)
	}
	s := got[0].stats
	if s.LastSeen < before || s.LastSeen > after {
		t.Fatalf("last_seen %d, want within [%d, %d]: the coarse clock before the last packet and the clock after it (%v before that)",
			s.LastSeen, before, after, time.Duration(before-s.LastSeen))
	}
	if s.FirstSeen > s.LastSeen || s.LastSeen-s.FirstSeen < uint64(runs-1)*uint64(25*time.Millisecond)-uint64(20*time.Millisecond) {
		t.Fatalf("first_seen %d, last_seen %d: %v apart, want about %v", s.FirstSeen, s.LastSeen,
			time.Duration(s.LastSeen-s.FirstSeen), time.Duration(runs-1)*25*time.Millisecond)
	}
}
