package pcapfilter

import (
	"testing"

	"loupe/internal/testutil"
)

// BenchmarkProgram measures a filter in the kernel with
// BPF_PROG_TEST_RUN's repeat loop, reported as ns/pkt. The empty filter
// is the floor (program entry, the test-run loop, the return); the
// difference is the filter's own cost.
// Run: go test ./internal/pcapfilter -run '^$' -bench Program -benchtime 2000000x
func BenchmarkProgram(b *testing.B) {
	testutil.RequirePrivileged(b)
	frames, names := buildFrames(b)
	for _, c := range []struct {
		name, expr string
		frame      int
	}{
		{"empty", "", 0},
		{"typical/match-v4-syn", "tcp port 80 and host 10.0.0.2", 0},
		{"typical/miss-v4-udp", "tcp port 80 and host 10.0.0.2", 11},
		{"typical/miss-v6-tcp", "tcp port 80 and host 10.0.0.2", 33},
		{"typical/miss-arp", "tcp port 80 and host 10.0.0.2", 34},
		{"port-any-proto/miss-v4-udp", "port 22", 11},
		{"tcpflags/match", "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0", 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			f := mustCompile(b, c.expr)
			prog := loadVerdictProg(b, f)
			ret, d, err := prog.Benchmark(frames[c.frame], b.N, b.ResetTimer)
			if err != nil {
				b.Fatal(err)
			}
			want := int32(actUnspec)
			if vmMatches(b, f, frames[c.frame]) {
				want = 1
			}
			if int32(ret) != want {
				b.Fatalf("%q on %s: returned %d, want %d", c.expr, names[c.frame], int32(ret), want)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/pkt")
		})
	}
}
