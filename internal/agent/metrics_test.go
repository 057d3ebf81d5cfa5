package agent

import (
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"loupe/internal/capability"
)

// reporter is a unit with signals; only SignalsUp matters here.
type reporter struct {
	capability.Unit
	up map[string]bool
}

func (r reporter) SignalsUp() map[string]bool { return r.up }

// TestSignalUpServesEveryUnitsSignals: loupe_signal_up has one series per
// signal of every unit that reports some, 0 as much as 1, and none for a
// unit that reports none.
func TestSignalUpServesEveryUnitsSignals(t *testing.T) {
	units := []capability.Unit{
		reporter{up: map[string]bool{"rtt": true, "drops": false}},
		nil, // a unit without signals
		reporter{up: map[string]bool{"dns": false, "handshake_rtt": true}},
	}
	want := `# HELP loupe_signal_up 1 when the signal runs; 0 when the configuration turned it off or the kernel refused it (the reason is in the log and loupe status).
# TYPE loupe_signal_up gauge
loupe_signal_up{signal="dns"} 0
loupe_signal_up{signal="drops"} 0
loupe_signal_up{signal="handshake_rtt"} 1
loupe_signal_up{signal="rtt"} 1
`
	if err := promtest.CollectAndCompare(newSignalCollector(units), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
