package flow

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock reads the two clocks eviction needs: wall time for records, and
// CLOCK_MONOTONIC, the clock bpf_ktime_get_ns reads in the datapath.
type Clock interface {
	Now() time.Time
	Mono() uint64
}

// SystemClock is the real Clock.
type SystemClock struct{}

// Now returns the wall-clock time.
func (SystemClock) Now() time.Time { return time.Now() }

// Mono returns CLOCK_MONOTONIC in nanoseconds.
func (SystemClock) Mono() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC cannot fail on Linux; keep time moving anyway.
		return uint64(time.Now().UnixNano())
	}
	return uint64(ts.Nano())
}
