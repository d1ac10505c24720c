package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backlog is a group's lag in entries, shard by shard, as counted from its
// ledger and its log (nandi scaler: no worker needs to run).
type Backlog struct {
	// Group is the group's name (partition.Options.Name).
	Group string
	// Shards is the backlog of each shard of the group's log, in order.
	Shards []ShardBacklog
	// Err is why the group's backlog could not be read (Shards unused).
	Err error
}

// ShardBacklog is one shard's entries at or after the group's low
// watermark.
type ShardBacklog struct {
	// Shard is the shard's number.
	Shard int
	// Source names the shard's stream, topic or subject.
	Source string
	// Entries is how many of its entries are at or after the watermark.
	Entries int64
}

// NewBacklogCollector exports, at each scrape, the backlogs read returns:
// one series set per group, however many workers it has (or none):
//
//   - nandi_group_lag_entries{group, shard, source}: a shard's entries at
//     or after the group's low watermark;
//   - nandi_group_backlog_entries{group}: their sum, what KEDA scales on;
//   - nandi_group_backlog_read_ok{group}: 1 when the group's backlog was
//     read at this scrape, 0 when it could not be.
//
// read is given up to 10 s. nandi scaler serves it; a process of yours can
// too.
func NewBacklogCollector(read func(context.Context) []Backlog, opts Options) prometheus.Collector {
	o := opts.withDefaults()
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, "group", name), help, append([]string{"group"}, labels...), o.ConstLabels)
	}
	return &backlogCollector{read: read,
		entries: desc("lag_entries", "Entries of the shard's log at or after the group's low watermark, counted by the log (once per group).", "shard", "source"),
		total:   desc("backlog_entries", "The group's lag in entries over every shard: what an autoscaler scales on."),
		ok:      desc("backlog_read_ok", "1 when the group's backlog was read at this scrape, 0 when it could not be."),
	}
}

type backlogCollector struct {
	read               func(context.Context) []Backlog
	entries, total, ok *prometheus.Desc
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.total
	ch <- c.ok
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, b := range c.read(ctx) {
		if b.Err != nil {
			ch <- prometheus.MustNewConstMetric(c.ok, prometheus.GaugeValue, 0, b.Group)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.ok, prometheus.GaugeValue, 1, b.Group)
		var sum int64
		for _, s := range b.Shards {
			sum += s.Entries
			ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(s.Entries), b.Group, strconv.Itoa(s.Shard), s.Source)
		}
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(sum), b.Group)
	}
}
