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

	"loupe/internal/api/agentcmd"
	"loupe/internal/capability/capture"
	"loupe/internal/capability/flows/query"
	latencyquery "loupe/internal/capability/latency/query"
	rulesunit "loupe/internal/capability/rules"
	"loupe/internal/cli"
)

// commands are the agent's own, then each capability's.
func commands() []cli.Command {
	cmds := []cli.Command{
		{Name: "run", Summary: "run the agent: attach, account flows, write them to the store and sinks", Run: runCmd},
	}
	cmds = append(cmds, agentcmd.Commands()...)
	cmds = append(cmds, query.Commands()...)
	cmds = append(cmds, capture.Commands()...)
	cmds = append(cmds, rulesunit.Commands()...)
	cmds = append(cmds, latencyquery.Commands()...)
	return append(cmds,
		cli.Command{Name: "mount-bpffs", Summary: "mount a bpf file system for pin_dir where the host has none (needs CAP_SYS_ADMIN: an init step)", Run: mountBpffsCmd},
		cli.Command{Name: "version", Summary: "print the version", Run: versionCmd})
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: loupe <command> [flags]\n\nCommands:\n")
	width := 0
	for _, c := range commands() {
		width = max(width, len(c.Name))
	}
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-*s %s\n", width, c.Name, c.Summary)
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
		if c.Name != args[0] {
			continue
		}
		err := c.Run(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, cli.ErrUsage):
			return 2
		}
		fmt.Fprintf(stderr, "loupe %s: %v\n", c.Name, err)
		return 1
	}
	fmt.Fprintf(stderr, "loupe: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}
