// Package cli holds what every loupe subcommand shares: the Command type
// the dispatcher in cmd/loupe runs, and flag sets whose errors are one line
// naming the flag, with where to find the usage. Each capability provides
// its own commands (internal/capability/<name>/...); cmd/loupe lists them.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"loupe/internal/config/check"
)

// Command is one `loupe <name>` subcommand.
type Command struct {
	Name, Summary string
	Run           func(args []string, stdout, stderr io.Writer) error
}

// ErrUsage reports a flag error already printed: the dispatcher exits 2
// without printing it again.
var ErrUsage = errors.New("usage")

// NewFlagSet makes a subcommand's flag set whose full usage goes to stdout
// for --help; a flag error prints one line and where to find the usage.
func NewFlagSet(name, synopsis string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("loupe "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: loupe %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args, sending --help output to stdout. A flag error is one
// line, then "see 'loupe CMD --help'", on the flag set's output.
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
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
		fmt.Fprintf(stderr, "%s: %s\nsee '%s --help'\n", fs.Name(), FlagError(fs, err), fs.Name())
		return ErrUsage
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %s\nsee '%s --help'\n", fs.Name(), check.Quote(fs.Arg(0)), fs.Name())
		return ErrUsage
	}
	return nil
}

// FlagError rewrites the flag package's message for an invalid value: the
// value is cut (it can be megabytes long) and its bare "parse error" says
// what a valid value looks like.
func FlagError(fs *flag.FlagSet, err error) string {
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
			detail = SyntaxHint(fs.Lookup(name))
		}
		return prefix + check.Quote(value) + where + ": " + detail
	}
	return msg
}

// SyntaxHint says what a value of a standard flag type looks like.
func SyntaxHint(f *flag.Flag) string {
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

// SplitVerb splits the arguments of a `loupe CMD [VERB [OPERAND]] [FLAGS]`
// command: the verb (def when the arguments start with a flag), its
// operand when one comes before the flags (at most one), and the rest.
func SplitVerb(args []string, def string) (verb string, operand, rest []string) {
	isWord := func(s string) bool { return s != "" && s[0] != '-' }
	verb = def
	if len(args) > 0 && isWord(args[0]) {
		verb, args = args[0], args[1:]
	}
	if len(args) > 0 && isWord(args[0]) {
		operand, args = args[:1], args[1:]
	}
	return verb, operand, args
}

// Usage prints a usage error of `loupe name` and where to find its usage,
// and returns ErrUsage.
func Usage(stderr io.Writer, name, msg string) error {
	fmt.Fprintf(stderr, "loupe %s: %s\nsee 'loupe %s --help'\n", name, msg, name)
	return ErrUsage
}
