package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// TestOrphanNamespacesRemoved: a namespace left by a test process that is
// gone (killed before its cleanup ran) is deleted when the next one is
// made; one whose owner still runs is left alone.
func TestOrphanNamespacesRemoved(t *testing.T) {
	RequirePrivileged(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := ownedName("ltorph", gone.Process.Pid)
	live := ownedName("ltorph", os.Getpid())
	// The same shape without the mark: not a test's, never deleted.
	unmarked := UniqueName(fmt.Sprintf("ltorph%d.", gone.Process.Pid))
	for _, n := range []string{orphan, live, unmarked} {
		IP(t, "netns", "add", n)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n).Run() })
	}
	NewNS(t)
	if _, err := os.Stat("/run/netns/" + orphan); !os.IsNotExist(err) {
		t.Errorf("the namespace of gone process %d is still there (%v)", gone.Process.Pid, err)
	}
	if _, err := os.Stat("/run/netns/" + live); err != nil {
		t.Errorf("the namespace of this running process was deleted: %v", err)
	}
	if _, err := os.Stat("/run/netns/" + unmarked); err != nil {
		t.Errorf("a namespace without the test mark was deleted: %v", err)
	}
}
