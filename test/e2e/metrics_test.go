package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuscaler/gpuscaler/test/chartenv"
)

// chartDir is the Helm chart whose dashboard and alerts the tests check.
const chartDir = "../../deploy/charts/gpuscaler"

// synthetic are series Prometheus makes itself rather than scrapes.
var synthetic = map[string]bool{"up": true}

// controllerOnly are the metrics only `gpuscaler controller` serves (its
// NodeProvisioners'): TestControllerCommand looks for them.
var controllerOnly = []string{"gpuscaler_forecast_actual_pods", "gpuscaler_forecast_expected_pods", "gpuscaler_forecast_ahead_pods", "gpuscaler_forecast_ordering"}

// standbyForecastOnly are the metrics only a process with a group whose
// standby pool a forecast sizes serves: TestStandbyPoolFollowsItsForecast
// looks for them.
var standbyForecastOnly = []string{"gpuscaler_standby_forecast_size", "gpuscaler_standby_forecast_expected_nodes"}

// afterABinding are the metrics served once a GPU pod was bound: the
// wait histogram's series are by the node's group and how it came, which
// a wait gives. TestProviderScalesUpAndDown looks for it then.
var afterABinding = []string{"gpuscaler_gpu_pod_wait_seconds_bucket"}

// scrape reads a gpuscaler's /metrics.
func scrape(t *testing.T, metricsAddr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// value sums the series of a counter, gauge or histogram (its count) whose
// labels include labels; -1 when the family is absent.
func value(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	mf, ok := mfs[name]
	if !ok {
		return -1
	}
	sum := 0.0
next:
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// chartQueries returns every PromQL expression of the chart's Grafana
// dashboard and PrometheusRule alerts, as the chart renders them, by where
// they are.
func chartQueries(t *testing.T) map[string]string {
	t.Helper()
	objs, err := chartenv.Render(chartDir, "gs", "gpuscaler", map[string]any{
		"mode": "provider", "dashboard": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ConfigMap":
			data, _, _ := unstructured.NestedString(o.Object, "data", "gpuscaler.json")
			if data == "" {
				continue
			}
			var dash struct {
				Panels []struct {
					Title   string `json:"title"`
					Targets []struct {
						Expr string `json:"expr"`
					} `json:"targets"`
				} `json:"panels"`
			}
			if err := json.Unmarshal([]byte(data), &dash); err != nil {
				t.Fatalf("the dashboard: %v", err)
			}
			for _, p := range dash.Panels {
				for i, tg := range p.Targets {
					out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
				}
			}
		case "PrometheusRule":
			groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
			for _, g := range groups {
				rules, _ := g.(map[string]any)["rules"].([]any)
				for _, r := range rules {
					rule := r.(map[string]any)
					out[fmt.Sprintf("alert %v", rule["alert"])] = fmt.Sprint(rule["expr"])
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the chart rendered no dashboard query and no alert")
	}
	return out
}

// referencedMetrics parses the chart's queries with Prometheus's own PromQL
// parser and returns the metric names they select, each with where.
func referencedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	out := map[string][]string{}
	for where, q := range chartQueries(t) {
		// Grafana's own interval variable is not PromQL.
		expr, err := p.ParseExpr(strings.ReplaceAll(q, "$__rate_interval", "5m"))
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, q, err)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				out[vs.Name] = append(out[vs.Name], where)
			}
			return nil
		})
	}
	return out
}

// missingMetrics returns the metrics the chart's dashboard and alerts
// select that a scrape lacks (a histogram's _bucket, _sum and _count are
// its family).
func missingMetrics(t *testing.T, mfs map[string]*dto.MetricFamily) []string {
	t.Helper()
	var missing []string
	for name, where := range referencedMetrics(t) {
		if synthetic[name] || slices.Contains(controllerOnly, name) || slices.Contains(standbyForecastOnly, name) || slices.Contains(afterABinding, name) {
			continue
		}
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && mfs[base].GetType() == dto.MetricType_HISTOGRAM {
				family = base
			}
		}
		if _, ok := mfs[family]; !ok {
			sort.Strings(where)
			missing = append(missing, fmt.Sprintf("%s (in %s)", name, strings.Join(where, ", ")))
		}
	}
	sort.Strings(missing)
	return missing
}
