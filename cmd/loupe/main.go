// Command loupe is an eBPF network observability agent: exact per-flow
// telemetry from the TC/TCX hooks, an embedded flow store, and the CLI that
// queries it.
//
// main parses the subcommand and its flags and wires packages together;
// everything else lives under internal/.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "run the agent: attach, account flows, write them to the store and sinks", runCmd},
		{"flows", "print stored flows", flowsCmd},
		{"top", "print the top talkers from the store", topCmd},
		{"version", "print the version", versionCmd},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: loupe <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'loupe <command> --help' for a command's flags.\n")
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		}
		fmt.Fprintf(stderr, "loupe %s: %v\n", c.name, err)
		return 1
	}
	fmt.Fprintf(stderr, "loupe: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// errUsage reports a flag error the flag package already printed.
var errUsage = errors.New("usage")

// newFlagSet makes a subcommand's flag set that prints its usage to stderr
// on error and to stdout for --help.
func newFlagSet(name, synopsis string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("loupe "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: loupe %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, sending --help output to stdout.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return flag.ErrHelp
		}
		if a == "--" {
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}
