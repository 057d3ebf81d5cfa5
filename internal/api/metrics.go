package api

// MetricsPath is GET /api/v1/metrics: the agent's own metrics (loupe_*)
// as JSON, for the UI's health panel, which cannot read the metrics
// listener (another origin, and perhaps not reachable from the browser),
// and for `loupe metrics`.
const MetricsPath = Prefix + "metrics"

// Metrics is the body of GET /api/v1/metrics.
type Metrics struct {
	Metrics []MetricFamily `json:"metrics"`
}

// MetricFamily is one metric of GET /api/v1/metrics.
type MetricFamily struct {
	Name    string   `json:"name"`
	Help    string   `json:"help"`
	Type    string   `json:"type"`
	Samples []Sample `json:"samples"`
}

// Sample is one labelled value: a counter's or gauge's value; a
// histogram's count and sum.
type Sample struct {
	Labels map[string]string `json:"labels,omitempty"`
	Value  float64           `json:"value"`
	Sum    *float64          `json:"sum,omitempty"`
}
