// Package agentcmd holds the agent-wide CLI verbs that talk to a running
// agent through its control API (internal/api): `loupe status` and `loupe
// metrics`. A
// capability's own verbs live with the capability
// (internal/capability/<name>/...) and use the same api.Client and
// api.ControlFlag.
package agentcmd

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"loupe/internal/api"
	"loupe/internal/cli"
)

// Commands are the agent-wide commands that need a running agent.
func Commands() []cli.Command {
	return []cli.Command{
		{Name: "status", Summary: "print the running agent's state, interfaces and capabilities", Run: statusCmd},
		{Name: "metrics", Summary: "print the running agent's own metrics (loupe_*), as the UI's health panel reads them", Run: metricsCmd},
	}
}

// requestTimeout bounds `loupe status`: the agent answers at once.
const requestTimeout = 10 * time.Second

func statusCmd(args []string, stdout, stderr io.Writer) error {
	return api.ReadCmd("status", api.StatusPath, requestTimeout, args, stdout, stderr,
		func(w io.Writer, st *api.Status) error { return printStatus(w, *st) })
}

// maxNames is how many interface names the human output shows; a node
// with hundreds of container veths gets a count for the rest.
const maxNames = 8

// printStatus writes the human form: aligned lines about the agent, then
// one per capability.
func printStatus(w io.Writer, st api.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	uptime := st.Uptime().Round(time.Second)
	fmt.Fprintf(tw, "agent\t%s\n", st.Version)
	fmt.Fprintf(tw, "pid\t%d\n", st.PID)
	fmt.Fprintf(tw, "state\t%s\n", st.State)
	fmt.Fprintf(tw, "uptime\t%s (since %s)\n", uptime, st.Started)
	fmt.Fprintf(tw, "interfaces\t%s\n", interfaces(st.Interfaces))
	d := st.Datapath
	pinned := "not pinned"
	if d.Pinned {
		pinned = "pinned"
	}
	per := ""
	if d.Tables == "percpu" {
		per = " a CPU" // each CPU's table holds the budget
	}
	fmt.Fprintf(tw, "datapath\t%s tables, flow budget %d%s, %d CPUs, %s\n", d.Tables, d.FlowBudget, per, d.CPUs, pinned)
	memory := fmt.Sprintf("%d bytes of maps", d.MemoryBytes)
	if d.MemoryBudget > 0 {
		memory += fmt.Sprintf(" of a budget of %d", d.MemoryBudget)
	}
	if d.SketchBytes > 0 {
		memory += fmt.Sprintf("; sketch %d bytes, %d flows per CPU and interval", d.SketchBytes, d.SketchFlows)
	}
	fmt.Fprintf(tw, "memory\t%s\n", memory)
	if len(st.Capabilities) == 0 {
		fmt.Fprintf(tw, "capabilities\tnone\n")
	}
	for _, c := range st.Capabilities {
		state := c.State
		if !c.Enabled {
			state = "disabled"
		}
		if d := details(c.Detail); d != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, state, d)
		} else {
			fmt.Fprintf(tw, "%s\t%s\n", c.Name, state)
		}
	}
	return tw.Flush()
}

func interfaces(s api.InterfaceStatus) string {
	out := fmt.Sprintf("%d attached (%s)", s.Attached, s.Mode)
	if len(s.Names) == 0 {
		return out
	}
	names := s.Names
	more := ""
	if len(names) > maxNames {
		more = fmt.Sprintf(" and %d more", len(names)-maxNames)
		names = names[:maxNames]
	}
	return out + ": " + strings.Join(names, ", ") + more
}

// details renders a unit's detail as key=value pairs, sorted by key;
// nested maps flatten into dotted keys (evictions.timer=3).
func details(d map[string]any) string {
	var parts []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			switch v := m[k].(type) {
			case map[string]any:
				walk(prefix+k+".", v)
			case []any:
				s := make([]string, len(v))
				for i, e := range v {
					s[i] = fmt.Sprint(e)
				}
				parts = append(parts, prefix+k+"="+strings.Join(s, ","))
			case float64:
				// JSON numbers: counts must not print as 1.2e+06.
				parts = append(parts, prefix+k+"="+strconv.FormatFloat(v, 'f', -1, 64))
			default:
				parts = append(parts, fmt.Sprintf("%s%s=%v", prefix, k, v))
			}
		}
	}
	walk("", d)
	return strings.Join(parts, " ")
}
