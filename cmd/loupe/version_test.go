package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name string
		st   buildStamp
		bi   *debug.BuildInfo
		want string
	}{
		{"nothing", buildStamp{}, &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "loupe devel "},
		{"no build info", buildStamp{}, nil, "loupe devel "},
		{"toolchain VCS stamp", buildStamp{}, vcs, "loupe devel (0123456789ab-dirty) "},
		{"stamped tag", buildStamp{version: "v1.2.0", commit: "fedcba9876543210"}, vcs, "loupe v1.2.0 (fedcba987654) "},
		{"stamped pseudo-version", buildStamp{version: "v0.0.0-20260101000000-fedcba987654", commit: "fedcba9876543210", modified: true}, nil,
			"loupe v0.0.0-20260101000000-fedcba987654-dirty "},
		{"module version", buildStamp{}, &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}}, "loupe v1.3.0 "},
	} {
		if got := describe(tc.st, tc.bi); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want prefix %q", tc.name, got, tc.want)
		}
	}
}

// TestBuildScriptStampsVersion builds the binary as the Makefile and the
// scripts do, without the toolchain's VCS stamp, and expects it to name
// its commit rather than "devel".
func TestBuildScriptStampsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "loupe")
	build := exec.Command(filepath.Join("..", "..", "scripts", "build.sh"), bin)
	build.Env = append(build.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if commit := strings.TrimSpace(string(head))[:12]; !strings.Contains(string(out), commit) || strings.Contains(string(out), "devel") {
			t.Errorf("loupe %v = %q: want commit %s, not devel", args, out, commit)
		}
	}
}
