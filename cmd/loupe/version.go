package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"loupe/internal/cli"
)

// The build scripts (scripts/build.sh) stamp these at link time:
//
//	-ldflags "-X main.stampVersion=v1.2.3 -X main.stampCommit=<sha> -X main.stampModified=true"
//
// so that a build names its version and commit even where the toolchain's
// own VCS stamp is missing (GOFLAGS=-buildvcs=false, a source tarball).
// They are never written at run time.
var stampVersion, stampCommit, stampModified string

// buildStamp is what identifies a build.
type buildStamp struct {
	version, commit string
	modified        bool
}

// version describes the build: the link-time stamp first, then the module
// and VCS information the Go toolchain embeds, then "devel".
func version() string {
	bi, _ := debug.ReadBuildInfo()
	return describe(buildStamp{stampVersion, stampCommit, stampModified == "true"}, bi)
}

func describe(st buildStamp, bi *debug.BuildInfo) string {
	v, rev, modified := st.version, st.commit, st.modified
	if bi != nil {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		if rev == "" {
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	rev = rev[:min(len(rev), 12)]
	dirty := ""
	if modified {
		dirty = "-dirty"
	}
	switch {
	case rev == "":
	case strings.Contains(v, rev): // a pseudo-version names its commit
		v += dirty
	default:
		v += " (" + rev + dirty + ")"
	}
	return fmt.Sprintf("loupe %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("version", "", stdout, stderr)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, version())
	return nil
}
