package agent

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"loupe/internal/api"
)

// MetricsPath is GET /api/v1/metrics: the agent's own metrics (loupe_*)
// as JSON, for the UI's health panel, which cannot read the metrics
// listener (another origin, and perhaps not reachable from the browser).
const MetricsPath = api.Prefix + "metrics"

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

func metricsRoute(g prometheus.Gatherer) api.Route {
	return api.Route{Method: http.MethodGet, Path: MetricsPath, Access: api.Read, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fams, err := g.Gather()
		if err != nil && len(fams) == 0 {
			api.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		out := struct {
			Metrics []MetricFamily `json:"metrics"`
		}{Metrics: []MetricFamily{}}
		for _, f := range fams {
			if !strings.HasPrefix(f.GetName(), "loupe_") {
				continue
			}
			mf := MetricFamily{Name: f.GetName(), Help: f.GetHelp(), Type: strings.ToLower(f.GetType().String()), Samples: []Sample{}}
			for _, m := range f.GetMetric() {
				s := Sample{}
				if len(m.GetLabel()) > 0 {
					s.Labels = map[string]string{}
					for _, l := range m.GetLabel() {
						s.Labels[l.GetName()] = l.GetValue()
					}
				}
				switch f.GetType() {
				case dto.MetricType_COUNTER:
					s.Value = m.GetCounter().GetValue()
				case dto.MetricType_GAUGE:
					s.Value = m.GetGauge().GetValue()
				case dto.MetricType_HISTOGRAM:
					s.Value = float64(m.GetHistogram().GetSampleCount())
					sum := m.GetHistogram().GetSampleSum()
					s.Sum = &sum
				default:
					s.Value = m.GetUntyped().GetValue()
				}
				mf.Samples = append(mf.Samples, s)
			}
			out.Metrics = append(out.Metrics, mf)
		}
		api.WriteJSON(w, http.StatusOK, out)
	})}
}
