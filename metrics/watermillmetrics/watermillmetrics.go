package watermillmetrics

import (
	"errors"

	"github.com/nandi-go/nandi/metrics"
	"github.com/nandi-go/nandi/watermillfilter"
	"github.com/prometheus/client_golang/prometheus"
)

// Register registers a collector of f's figures on reg; register its lease
// with metrics.RegisterLease.
func Register(reg prometheus.Registerer, f *watermillfilter.Filter, opts metrics.Options) error {
	if reg == nil || f == nil {
		return errors.New("watermillmetrics: registerer and filter are required")
	}
	return reg.Register(newCollector(f.Lease().Name(), f.Stats, opts))
}

type collector struct {
	stats                               func() watermillfilter.Stats
	messages, panics, overdue, inFlight *prometheus.Desc
}

func newCollector(group string, stats func() watermillfilter.Stats, o metrics.Options) *collector {
	d := func(name, help string, vars ...string) *prometheus.Desc {
		return o.NewDesc(group, "filter", name, help, vars...)
	}
	return &collector{
		stats:    stats,
		messages: d("messages_total", "Messages by outcome: handled, failed, not_owned, lost_unowned.", "outcome"),
		panics:   d("panics_total", "Handler panics recovered (each is also a failed message)."),
		overdue:  d("overdue_handlers_total", "Handlers still running when their term's deadline passed."),
		inFlight: d("in_flight", "Handlers running now."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter := func(d *prometheus.Desc, v int64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	counter(c.messages, s.Handled, "handled")
	counter(c.messages, s.Failed, "failed")
	counter(c.messages, s.NotOwned, "not_owned")
	counter(c.messages, s.Unheld, "lost_unowned")
	counter(c.panics, s.Panics)
	counter(c.overdue, s.Overdue)
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight))
}
