package datapath

import (
	"fmt"
	"testing"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// BenchmarkDrain is an eviction's read and clear of a half of the per-CPU
// tables (after the swap, whose wait is not timed) at the default budget (65 536 flows a CPU: regions of 16 MiB),
// holding a few flows or many: what it costs should follow the flows, not
// the regions' size.
//
//	go test -run '^$' -bench Drain ./internal/datapath
func BenchmarkDrain(b *testing.B) {
	testutil.RequirePrivileged(b)
	for _, flows := range []int{0, 100, 10000, 65536} {
		b.Run(fmt.Sprintf("flows=%d", flows), func(b *testing.B) {
			dp := loadForTest(b, Options{FlowBudget: 65536, RingBufSize: 1 << 20})
			frames := make([][]byte, flows)
			for i := range frames {
				frames[i] = udpFrame(b, uint16(1+i), 10)
			}
			rotate := func() flow.Drain {
				d, err := dp.Rotate()
				if err != nil {
					b.Fatalf("rotate: %v", err)
				}
				return d
			}
			// Timed: the read and the clear, not the rotation's wait
			// for the programs to leave the half. Two rotations a round
			// bring the half written back.
			for b.Loop() {
				b.StopTimer()
				for _, f := range frames {
					runProg(b, dp, flow.Ingress, f)
				}
				d := rotate()
				b.StartTimer()
				if got := len(readDrain(b, d)); got != flows {
					b.Fatalf("drained %d flows, want %d", got, flows)
				}
				b.StopTimer()
				readDrain(b, rotate())
				b.StartTimer()
			}
		})
	}
}
