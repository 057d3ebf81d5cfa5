//go:build loupe_faults

package flow

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// faultHits counts the hits of the armed fault point. Test builds only:
// this file is compiled with the loupe_faults build tag.
var faultHits atomic.Int64

// faultPoint kills the process with SIGKILL, as the kernel's OOM killer
// would, at the Nth time the point named by TEST_FAULT_POINT=<point>:<N> is
// reached with records (flows > 0), N counted from 1. The variable has no
// LOUPE_ prefix: the configuration refuses unknown LOUPE_* variables.
func faultPoint(name string, flows int) {
	point, n, ok := strings.Cut(os.Getenv("TEST_FAULT_POINT"), ":")
	if !ok || point != name || flows == 0 {
		return
	}
	want, err := strconv.ParseInt(n, 10, 64)
	if err != nil || faultHits.Add(1) != want {
		return
	}
	fmt.Fprintf(os.Stderr, "fault point %s reached (hit %d, %d flows): killing the agent\n", name, want, flows)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
