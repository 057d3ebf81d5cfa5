//go:build loupe_faults

package signals

import (
	"os"
	"strings"

	"loupe/internal/datapath"
)

// faultTracepoints renames signals' tracepoints, as
// TEST_SIGNALS_TRACEPOINTS=<signal>:<tracepoint>[,...] says, so that an
// end-to-end test sees the kernel refuse one. Test builds only: this file
// is compiled with the loupe_faults build tag. The variable has no LOUPE_
// prefix: the configuration refuses unknown LOUPE_* variables.
func faultTracepoints() map[datapath.Signal]string {
	out := map[datapath.Signal]string{}
	for _, pair := range strings.Split(os.Getenv("TEST_SIGNALS_TRACEPOINTS"), ",") {
		name, tp, ok := strings.Cut(pair, ":")
		if !ok {
			continue
		}
		for _, sig := range datapath.AllSignals() {
			if sig.String() == name {
				out[sig] = tp
			}
		}
	}
	return out
}
