package agentcmd

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"loupe/internal/api"
)

// metricsCmd is `loupe metrics`: the agent's own metrics as the UI's
// health panel reads them (GET /api/v1/metrics), for a host whose metrics
// listener is off or out of reach.
func metricsCmd(args []string, stdout, stderr io.Writer) error {
	return api.ReadCmd("metrics", api.MetricsPath, requestTimeout, args, stdout, stderr, printMetrics)
}

// printMetrics prints one line per sample, as Prometheus's text format
// writes them: name{label="value",...} value (a histogram's count, and
// its sum on a _sum line), in decimal, never an exponent.
func printMetrics(w io.Writer, m *api.Metrics) error {
	var b strings.Builder
	for _, f := range m.Metrics {
		for _, s := range f.Samples {
			labels := ""
			if len(s.Labels) > 0 {
				var parts []string
				for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
					parts = append(parts, k+"="+strconv.Quote(s.Labels[k]))
				}
				labels = "{" + strings.Join(parts, ",") + "}"
			}
			name := f.Name
			if s.Sum != nil {
				name += "_count"
				fmt.Fprintf(&b, "%s_sum%s %s\n", f.Name, labels, strconv.FormatFloat(*s.Sum, 'f', -1, 64))
			}
			fmt.Fprintf(&b, "%s%s %s\n", name, labels, strconv.FormatFloat(s.Value, 'f', -1, 64))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
