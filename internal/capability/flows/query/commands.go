// Package query holds the flows capability's CLI verbs: `loupe flows`,
// `loupe top`, `loupe traffic` and `loupe topology`, which read the flow store (internal/store) directly, so they
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
		{Name: "traffic", Summary: "print the traffic over time by interface and direction, and its protocol mix, from the store", Run: trafficCmd},
		{Name: "topology", Summary: "print the endpoints and conversations of the heaviest pairs from the store", Run: topologyCmd},
	}
}

// Flows runs `loupe flows` until it is done or ctx is (--follow runs
// until then).
func Flows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return flows(ctx, args, stdout, stderr)
}
