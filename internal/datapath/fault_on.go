//go:build loupe_faults

package datapath

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// faultRefuse fails a load that switches on a capability named in
// TEST_DATAPATH_REFUSE (comma-separated), as a kernel whose verifier
// refuses that capability's code would, so that an end-to-end test sees
// the agent degrade. Test builds only: this file is compiled with the
// loupe_faults build tag. The variable has no LOUPE_ prefix: the
// configuration refuses unknown LOUPE_* variables.
func faultRefuse(capabilities []string) error {
	for _, name := range strings.Split(os.Getenv("TEST_DATAPATH_REFUSE"), ",") {
		if name != "" && slices.Contains(capabilities, name) {
			return fmt.Errorf("load flow program: program loupe_ingress: load program: permission denied (injected: TEST_DATAPATH_REFUSE=%s)", name)
		}
	}
	return nil
}
