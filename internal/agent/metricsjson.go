package agent

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"loupe/internal/api"
)

// metricsRoute answers GET /api/v1/metrics from g, the loupe_* families
// only.
func metricsRoute(g prometheus.Gatherer) api.Route {
	return api.Route{Method: http.MethodGet, Path: api.MetricsPath, Access: api.Read, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fams, err := g.Gather()
		if err != nil && len(fams) == 0 {
			api.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		out := api.Metrics{Metrics: []api.MetricFamily{}}
		for _, f := range fams {
			if !strings.HasPrefix(f.GetName(), "loupe_") {
				continue
			}
			mf := api.MetricFamily{Name: f.GetName(), Help: f.GetHelp(), Type: strings.ToLower(f.GetType().String()), Samples: []api.Sample{}}
			for _, m := range f.GetMetric() {
				s := api.Sample{}
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
