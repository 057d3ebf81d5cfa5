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
	"strconv"
	"strings"
	"time"

	"loupe/internal/config/check"
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
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
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

// errUsage reports a flag error already printed.
var errUsage = errors.New("usage")

// newFlagSet makes a subcommand's flag set whose full usage goes to stdout
// for --help; a flag error prints one line and where to find the usage.
func newFlagSet(name, synopsis string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("loupe "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: loupe %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, sending --help output to stdout. A flag error is one
// line, then "see 'loupe CMD --help'", on the flag set's output.
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
	stderr, usage := fs.Output(), fs.Usage
	// The flag package prints its error and the whole usage: silence it
	// and print one line of our own.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case err != nil:
		fmt.Fprintf(stderr, "%s: %s\nsee '%s --help'\n", fs.Name(), flagError(fs, err), fs.Name())
		return errUsage
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %s\nsee '%s --help'\n", fs.Name(), check.Quote(fs.Arg(0)), fs.Name())
		return errUsage
	}
	return nil
}

// flagError rewrites the flag package's message for an invalid value: the
// value is cut (it can be megabytes long) and its bare "parse error" says
// what a valid value looks like.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	for _, prefix := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, prefix)
		if !ok {
			continue
		}
		quoted, qerr := strconv.QuotedPrefix(rest)
		value, uerr := strconv.Unquote(quoted)
		if qerr != nil || uerr != nil {
			break
		}
		// rest: " for flag -NAME: DETAIL" (" for -NAME: DETAIL" for a bool)
		rest = rest[len(quoted):]
		where, detail, ok := strings.Cut(rest, ": ")
		if !ok {
			break
		}
		name := strings.TrimPrefix(strings.TrimPrefix(where, " for flag -"), " for -")
		if detail == "parse error" {
			detail = syntaxHint(fs.Lookup(name))
		}
		return prefix + check.Quote(value) + where + ": " + detail
	}
	return msg
}

// syntaxHint says what a value of a standard flag type looks like.
func syntaxHint(f *flag.Flag) string {
	if f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case time.Duration:
				return "invalid duration (" + check.DurationSyntax + ")"
			case int, int64:
				return "want an integer"
			case uint, uint64:
				return "want a non-negative integer"
			case bool:
				return "want true or false"
			case float64:
				return "want a number"
			}
		}
	}
	return "parse error"
}
