package watermillmetrics

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/metrics"
	"github.com/nandi-go/nandi/watermillfilter"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Every figure of a Filter is exported under its name, with the group and
// the constant labels.
func TestFilterSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	fs := watermillfilter.Stats{Handled: 71, Failed: 72, NotOwned: 73, Unheld: 74, Panics: 75, Overdue: 76, InFlight: 77}
	reg.MustRegister(newCollector("g", func() watermillfilter.Stats { return fs }, metrics.Options{ConstLabels: prometheus.Labels{"worker": "p"}}))
	want := map[string]float64{"nandi_filter_messages_total{outcome=handled}": 71, "nandi_filter_messages_total{outcome=failed}": 72,
		"nandi_filter_messages_total{outcome=not_owned}": 73, "nandi_filter_messages_total{outcome=lost_unowned}": 74,
		"nandi_filter_panics_total": 75, "nandi_filter_overdue_handlers_total": 76, "nandi_filter_in_flight": 77}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			seen := map[string]string{}
			for _, l := range m.GetLabel() {
				seen[l.GetName()] = l.GetValue()
				if l.GetName() != "group" && l.GetName() != "worker" {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
			}
			if seen["group"] != "g" || seen["worker"] != "p" {
				t.Errorf("%s has labels %v; want group g and worker p", f.GetName(), seen)
			}
			sort.Strings(ls)
			key := f.GetName()
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			got[key] = value(f.GetType(), m)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v; want exactly %v", got, want)
	}
}

func value(tp dto.MetricType, m *dto.Metric) float64 {
	if tp == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// The dashboard's and the alerts' queries of the Watermill middleware
// (nandi_filter_*) name series this collector exports; package metrics
// checks the rest.
func TestDashboardFilterQueriesNameExportedMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector("g", func() watermillfilter.Stats { return watermillfilter.Stats{} }, metrics.Options{}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	n := 0
	for _, file := range []string{"../../deploy/grafana/nandi.json", "../../deploy/kubernetes/monitoring/prometheusrule.yaml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range regexp.MustCompile(`\bnandi_filter_[a-z_]+`).FindAllString(string(b), -1) {
			n++
			if !have[name] {
				t.Errorf("%s names %s, which the Watermill middleware's collector does not export", file, name)
			}
		}
	}
	if n == 0 {
		t.Error("no nandi_filter_ series in the dashboard or the alerts: the Watermill middleware has no panel")
	}
}
