package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version describes the build from the module and VCS information the Go
// toolchain embeds, so releases need no -ldflags.
func version() string {
	v, rev, dirty := "devel", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
				if len(rev) > 12 {
					rev = rev[:12]
				}
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
	}
	if rev != "" {
		v += " (" + rev + dirty + ")"
	}
	return fmt.Sprintf("loupe %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", stdout, stderr)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, version())
	return nil
}
