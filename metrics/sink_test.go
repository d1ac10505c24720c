package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A sink's counts are exported under their names, with the group label.
func TestSinkSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := SinkStats{Applied: 1, AlreadyDone: 2, Fenced: 3, Failed: 4, BatchErrors: 5, Commits: 6, Forgotten: 7}
	if err := RegisterSink(reg, "payments", func() SinkStats { return s }, Options{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"nandi_sink_tasks_total{outcome=applied}": 1, "nandi_sink_tasks_total{outcome=already_done}": 2,
		"nandi_sink_tasks_total{outcome=fenced}": 3, "nandi_sink_tasks_total{outcome=failed}": 4,
		"nandi_sink_batch_errors_total": 5, "nandi_sink_commits_total": 6, "nandi_sink_forgotten_total": 7}
	got := gather(t, reg)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v; want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v; want %v", got, want)
	}
	if err := RegisterSink(reg, "", func() SinkStats { return s }, Options{}); err == nil {
		t.Error("RegisterSink without a group: no error")
	}
}
