// Package query holds the flows capability's CLI verbs: `loupe flows` and
// `loupe top`, which read the flow store (internal/store) directly, so they
// work whether an agent runs or not.
package query

import (
	"context"
	"io"

	"loupe/internal/cli"
)

// Commands are the flows capability's subcommands.
func Commands() []cli.Command {
	return []cli.Command{
		{Name: "flows", Summary: "print stored flows", Run: flowsCmd},
		{Name: "top", Summary: "print the top talkers from the store", Run: topCmd},
	}
}

// Flows runs `loupe flows` until it is done or ctx is (--follow runs
// until then).
func Flows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return flows(ctx, args, stdout, stderr)
}
