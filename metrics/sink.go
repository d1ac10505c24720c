package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// SinkStats are an exactly-once sink's counts (sink/pgsink.Stats), for
// RegisterSink: package metrics depends on no sink, so that importing it
// fetches no database driver.
type SinkStats struct {
	Applied     int64 // tasks whose effect was committed
	AlreadyDone int64 // tasks found done before: nothing applied
	Fenced      int64 // tasks refused because a newer term claimed their key
	Failed      int64 // tasks whose effect returned an error (rolled back)
	BatchErrors int64 // batches whose transaction failed as a whole
	Commits     int64 // transactions committed (one per batch)
	Forgotten   int64 // done records pruned once below every checkpoint
}

// RegisterSink registers a collector of an exactly-once sink's counts on
// reg, read from stats at each scrape:
//
//	_ = metrics.RegisterSink(reg, "payments", func() metrics.SinkStats {
//		s := sink.Stats()
//		return metrics.SinkStats{Applied: s.Applied, AlreadyDone: s.AlreadyDone, Fenced: s.Fenced,
//			Failed: s.Failed, BatchErrors: s.BatchErrors, Commits: s.Commits, Forgotten: s.Forgotten}
//	}, metrics.Options{})
//
// Series:
//
//	nandi_sink_tasks_total{outcome}     counter  applied, already_done, fenced, failed
//	nandi_sink_batch_errors_total       counter  transactions that failed as a whole (each task retried)
//	nandi_sink_commits_total            counter  transactions committed
//	nandi_sink_forgotten_total          counter  done records forgotten below the watermark
func RegisterSink(reg prometheus.Registerer, group string, stats func() SinkStats, opts Options) error {
	if reg == nil || stats == nil || group == "" {
		return errors.New("metrics: registerer, group and stats are required")
	}
	d := func(name, help string, vars ...string) *prometheus.Desc {
		return opts.NewDesc(group, "sink", name, help, vars...)
	}
	return reg.Register(&sinkCollector{stats: stats,
		tasks:     d("tasks_total", "Tasks by outcome: applied, already_done, fenced, failed.", "outcome"),
		batchErrs: d("batch_errors_total", "Transactions that failed as a whole (each task retried)."),
		commits:   d("commits_total", "Transactions committed."),
		forgotten: d("forgotten_total", "Done records forgotten below the watermark."),
	})
}

type sinkCollector struct {
	stats                                func() SinkStats
	tasks, batchErrs, commits, forgotten *prometheus.Desc
}

func (c *sinkCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *sinkCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter := func(d *prometheus.Desc, v int64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	counter(c.tasks, s.Applied, "applied")
	counter(c.tasks, s.AlreadyDone, "already_done")
	counter(c.tasks, s.Fenced, "fenced")
	counter(c.tasks, s.Failed, "failed")
	counter(c.batchErrs, s.BatchErrors)
	counter(c.commits, s.Commits)
	counter(c.forgotten, s.Forgotten)
}
