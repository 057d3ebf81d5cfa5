//go:build !loupe_faults

package signals

import "loupe/internal/datapath"

// faultTracepoints renames tracepoints in test builds only (fault_on.go).
func faultTracepoints() map[datapath.Signal]string { return nil }
