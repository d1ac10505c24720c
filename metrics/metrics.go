package metrics

import (
	"errors"
	"strconv"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/hist"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure the collectors. The zero value is usable. The
// histograms' buckets are those their figures are kept in: the handler
// durations' are consumer.Options.HandlerBuckets (default hist.Bounds,
// 250µs to 30s), the registrations' hist.Bounds.
type Options struct {
	// Namespace prefixes every name; default "nandi".
	Namespace string
	// ConstLabels are added to every metric. Under Kubernetes leave out the
	// pod's name: service discovery adds pod and namespace as target labels,
	// and a const label named pod would collide (becoming exported_pod).
	ConstLabels prometheus.Labels
	// InfoTimeout is no longer used: a scrape does no I/O, the lag gauges
	// serve what the consumer computed last (Consumer.LastLag, each lease
	// interval).
	InfoTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = "nandi"
	}
	return o
}

// RegisterLease registers a collector of the lease's figures on reg.
func RegisterLease(reg prometheus.Registerer, l *partition.Lease, opts Options) error {
	if reg == nil || l == nil {
		return errors.New("metrics: registerer and lease are required")
	}
	return reg.Register(newLeaseCollector(l.Name(), l.Stats, opts.withDefaults()))
}

// Register registers collectors of the consumer's figures and of its
// lease's on reg (do not also call RegisterLease for that lease).
func Register(reg prometheus.Registerer, c *consumer.Consumer, opts Options) error {
	if reg == nil || c == nil {
		return errors.New("metrics: registerer and consumer are required")
	}
	opts = opts.withDefaults()
	lc := newLeaseCollector(c.Lease().Name(), c.Lease().Stats, opts)
	if err := reg.Register(lc); err != nil {
		return err
	}
	if err := reg.Register(newConsumerCollector(c, opts)); err != nil {
		reg.Unregister(lc) // all or nothing
		return err
	}
	return nil
}

// NewDesc returns the description of a metric of group under o (its
// namespace and constant labels, and the group label): for packages that
// export figures of their own beside nandi's, as metrics/watermillmetrics
// does.
func (o Options) NewDesc(group, subsystem, name, help string, variableLabels ...string) *prometheus.Desc {
	o = o.withDefaults()
	return prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, subsystem, name), help, variableLabels, labels(o, group))
}

func labels(o Options, group string) prometheus.Labels {
	l := prometheus.Labels{"group": group}
	for k, v := range o.ConstLabels {
		l[k] = v
	}
	return l
}

type leaseCollector struct {
	stats                                                       func() partition.Stats
	held, index, replicas, token, handingOver                   *prometheus.Desc
	calls, regs, failures, refusals, latency, terms, standDowns *prometheus.Desc
	heldTime, unheldTime                                        *prometheus.Desc
}

func newLeaseCollector(group string, stats func() partition.Stats, o Options) *leaseCollector {
	cl := labels(o, group)
	d := func(name, help string, vars ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, "lease", name), help, vars, cl)
	}
	return &leaseCollector{
		stats:       stats,
		held:        d("held", "1 while a term is held, else 0."),
		index:       d("index", "The index held; -1 when none."),
		replicas:    d("replicas", "The replicas of the term held; 0 when none."),
		token:       d("token", "The fencing token of the term held; 0 when none."),
		handingOver: d("handing_over", "1 while the term held is handed over: the mapping changed, and it is kept to its cap, where the new mapping's holders take over."),
		calls:       d("calls_total", "Registration calls the store answered."),
		regs:        d("registrations_total", "Registration calls the group counted."),
		failures:    d("registration_failures_total", "Registration calls that failed (network, timeout, WAIT not acknowledged)."),
		refusals:    d("registration_refusals_total", "Registration calls refused because the group runs with other settings."),
		latency:     d("registration_duration_seconds", "Round trip of every answered registration call."),
		terms:       d("terms_total", "Terms acquired."),
		standDowns:  d("stand_downs_total", "Terms ended, by reason.", "reason"),
		heldTime:    d("held_seconds_total", "Time spent holding a term."),
		unheldTime:  d("unheld_seconds_total", "Time spent running without a term (joining, between terms)."),
	}
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
	}
	if s.Held {
		gauge(c.held, 1)
		gauge(c.index, float64(s.Current.Index))
		gauge(c.replicas, float64(s.Current.Replicas))
		gauge(c.token, float64(s.Current.Token))
	} else {
		gauge(c.held, 0)
		gauge(c.index, -1)
		gauge(c.replicas, 0)
		gauge(c.token, 0)
	}
	handingOver := 0.0 // Stats.HandingOver is false when nothing is held
	if s.HandingOver {
		handingOver = 1
	}
	gauge(c.handingOver, handingOver)
	counter(c.calls, float64(s.Calls))
	counter(c.regs, float64(s.Registrations))
	counter(c.failures, float64(s.Failures))
	counter(c.refusals, float64(s.Refusals))
	ch <- histogram(c.latency, s.Latency)
	counter(c.terms, float64(s.Acquired))
	for _, r := range partition.LostReasons() {
		counter(c.standDowns, float64(s.Lost[r]), r)
	}
	counter(c.heldTime, s.HeldTime.Seconds())
	counter(c.unheldTime, s.UnheldTime.Seconds())
}

func histogram(d *prometheus.Desc, s hist.Snapshot) prometheus.Metric {
	b := make(map[float64]uint64, len(s.Bounds))
	for i, le := range s.Bounds {
		b[le.Seconds()] = s.Buckets[i]
	}
	return prometheus.MustNewConstHistogram(d, s.Count, s.Sum.Seconds(), b)
}

type consumerCollector struct {
	stats                                        func() consumer.Stats
	lagOf                                        func() (consumer.Lag, time.Time, error)
	dropped                                      func() int64 // nil: the source drops nothing
	messages, failures, inFlight, drains, writes *prometheus.Desc
	terms, lagMessages, lagSeconds, droppedDesc  *prometheus.Desc
	panics, overdue, overdueTotal, pending       *prometheus.Desc
	oldest, unserved, openFailures               *prometheus.Desc
	fetchFailures, writeFailures, ledgerLosses   *prometheus.Desc
	rewinds, handling, groupLagMessages          *prometheus.Desc
	fencedHandoffs, deadLetterFailures, redone   *prometheus.Desc
	groupLagSeconds, corruptLedger, waiting      *prometheus.Desc
	reread, read, owned, rateWaits, paused       *prometheus.Desc
}

func newConsumerCollector(c *consumer.Consumer, o Options) *consumerCollector {
	var dropped func() int64
	if d, ok := c.Source().(transport.Dropper); ok {
		dropped = d.Dropped
	}
	c.WantLag() // computed each interval from now on, even with NoPresence
	return consumerCollectorOf(c.Lease().Name(), c.Stats, c.LastLag, dropped, o)
}

func consumerCollectorOf(group string, stats func() consumer.Stats, lag func() (consumer.Lag, time.Time, error), dropped func() int64, o Options) *consumerCollector {
	cl := labels(o, group)
	d := func(name, help string, vars ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, "consumer", name), help, vars, cl)
	}
	return &consumerCollector{
		stats:              stats,
		lagOf:              lag,
		dropped:            dropped,
		droppedDesc:        d("dropped_total", "Messages the transport dropped before the consumer read them (NATS core: slow consumer)."),
		messages:           d("messages_total", "Messages by outcome: handled, not_owned, done_before, dead_lettered, skipped, abandoned, lost_unowned, bad_shard.", "outcome"),
		failures:           d("handler_failures_total", "Failed handler attempts."),
		inFlight:           d("in_flight", "Calls into user code running now."),
		panics:             d("panics_total", "Calls into user code that panicked (handler, DeadLetter, OnError, ID)."),
		overdue:            d("overdue_handlers", "Handlers still running after their term ended, their context cancelled."),
		overdueTotal:       d("overdue_handlers_total", "Handlers that outlived their term."),
		pending:            d("pending", "Tasks taken and not finished: queued, running, waiting to retry."),
		oldest:             d("oldest_unfinished_seconds", "Age of the oldest unfinished task of the share served, per shard, since this worker first took it (kept across its terms).", "shard"),
		unserved:           d("unserved", "1 while a term is held but its checkpoints or source cannot be opened."),
		openFailures:       d("open_failures_total", "Failed opens of the checkpoints or the source (retried while the term lasts)."),
		fetchFailures:      d("fetch_failures_total", "Failed fetches (retried with backoff)."),
		writeFailures:      d("checkpoint_failures_total", "Failed checkpoint writes."),
		ledgerLosses:       d("ledger_losses_total", "Opens that found the checkpoint ledger gone or behind what the worker had seen."),
		corruptLedger:      d("ledger_corrupt_total", "Opens that found the checkpoint ledger unreadable: nothing of it served, retried while the term lasts."),
		waiting:            d("waiting", "Tasks waiting behind an id whose first task has failed, held as their place in the log only."),
		reread:             d("reread_total", "Messages read again from the log: tasks that had waited behind a failing id."),
		read:               d("read_total", "Messages read from the source (over a group, read_total / owned_total is its read amplification)."),
		owned:              d("owned_total", "Messages read that the lease owned."),
		paused:             d("paused_since_seconds", "While this worker sees its group paused (nandi pause), the unix time the pause began; absent otherwise."),
		rateWaits:          d("rate_waits_total", "Handler calls that waited for the group's rate limit (consumer.Options.GroupRate)."),
		handling:           d("handler_duration_seconds", "Every handler call."),
		groupLagMessages:   prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, "group", "lag_messages"), "Offsets between the group's lowest checkpoint and the log's end.", []string{"shard"}, cl),
		groupLagSeconds:    prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, "group", "lag_seconds"), "Entry time between the group's lowest checkpoint and the stream's end (Redis Streams).", []string{"shard"}, cl),
		rewinds:            d("rewinds_total", "Shards found to end below their checkpoint (a log recreated): read again from their start."),
		redone:             d("redone_total", "Tasks taken that a former holder may have done already (it did not release its index: crashed or stalled; or the ledger was lost): each may have run twice, and the term logs their positions."),
		deadLetterFailures: d("dead_letter_failures_total", "DeadLetter calls that failed (Redis unreachable, the dead-letter stream full): each retried with backoff, its task kept."),
		fencedHandoffs:     d("fenced_handoffs_total", "Terms served from a provisional lease: taken at a change of the group once every former holder released its share (the fenced handoff)."),
		drains:             d("drain_duration_seconds", "Time from stopping intake to the last handler's return, per drain."),
		writes:             d("checkpoint_writes_total", "Checkpoint writes."),
		terms:              d("terms_total", "Terms served."),
		lagMessages:        d("lag_messages", "Offsets between the held index's checkpoint and the log's end.", "shard"),
		lagSeconds:         d("lag_seconds", "Entry time between the held index's checkpoint and the stream's end (Redis Streams).", "shard"),
	}
}

func (c *consumerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.messages, c.failures, c.inFlight, c.drains, c.writes, c.terms, c.lagMessages, c.lagSeconds, c.droppedDesc,
		c.panics, c.overdue, c.overdueTotal, c.pending, c.oldest, c.unserved, c.openFailures, c.fetchFailures, c.writeFailures, c.ledgerLosses, c.rewinds, c.fencedHandoffs, c.deadLetterFailures, c.redone, c.handling, c.groupLagMessages, c.groupLagSeconds, c.corruptLedger, c.waiting, c.reread, c.read, c.owned, c.rateWaits, c.paused} {
		ch <- d
	}
}

func (c *consumerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter := func(d *prometheus.Desc, v int64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	counter(c.messages, s.Handled, "handled")
	counter(c.messages, s.NotOwned, "not_owned")
	counter(c.messages, s.DoneBefore, "done_before")
	counter(c.messages, s.DeadLetters, "dead_lettered")
	counter(c.messages, s.Skipped, "skipped")
	counter(c.messages, s.Abandoned, "abandoned")
	counter(c.messages, s.Unheld, "lost_unowned")
	counter(c.messages, s.BadShard, "bad_shard")
	counter(c.failures, s.Failed)
	counter(c.panics, s.Panics)
	counter(c.overdueTotal, s.OverdueTotal)
	counter(c.openFailures, s.OpenFailures)
	counter(c.fetchFailures, s.FetchFailures)
	counter(c.writeFailures, s.CheckpointFailures)
	counter(c.ledgerLosses, s.LedgerLosses)
	counter(c.corruptLedger, s.CorruptLedger)
	counter(c.reread, s.Reread)
	counter(c.read, s.Read)
	counter(c.owned, s.Owned)
	counter(c.rateWaits, s.RateWaits)
	counter(c.rewinds, s.Rewinds)
	counter(c.fencedHandoffs, s.FencedHandoffs)
	counter(c.deadLetterFailures, s.DeadLetterFailures)
	counter(c.redone, s.Redone)
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	gauge(c.waiting, float64(s.Waiting))
	gauge(c.inFlight, float64(s.InFlight))
	gauge(c.overdue, float64(s.Overdue))
	gauge(c.pending, float64(s.Pending))
	unserved := 0.0
	if s.Unserved {
		unserved = 1
	}
	gauge(c.unserved, unserved)
	if s.Paused {
		gauge(c.paused, float64(s.PausedSince.UnixMilli())/1000)
	}
	for i, d := range s.Oldest {
		gauge(c.oldest, d.Seconds(), strconv.Itoa(i))
	}
	ch <- histogram(c.drains, s.Drains)
	ch <- histogram(c.handling, s.Handling)
	counter(c.writes, s.Checkpoints)
	counter(c.terms, s.Terms)
	if c.dropped != nil {
		counter(c.droppedDesc, c.dropped())
	}
	c.lag(ch)
}

// lag reports, per shard, how far the held index's checkpoint is behind
// the log's end, and how far the group's lowest checkpoint is, as the
// consumer last computed them (Consumer.LastLag, each lease interval): a
// scrape does no I/O. Nothing is reported before the first computation
// or after one that failed.
func (c *consumerCollector) lag(ch chan<- prometheus.Metric) {
	l, at, err := c.lagOf()
	if err != nil || at.IsZero() {
		return
	}
	c.lags(ch, l.Held, c.lagMessages, c.lagSeconds)
	c.lags(ch, l.Group, c.groupLagMessages, c.groupLagSeconds)
}

// lags reports lags per shard: in messages for offsets, in entry time for
// Redis stream IDs.
func (c *consumerCollector) lags(ch chan<- prometheus.Metric, ls []transport.Lag, messages, seconds *prometheus.Desc) {
	for i, l := range ls {
		shard := strconv.Itoa(i)
		switch {
		case !l.Known:
		case l.Timed:
			ch <- prometheus.MustNewConstMetric(seconds, prometheus.GaugeValue, l.Seconds, shard)
		default:
			ch <- prometheus.MustNewConstMetric(messages, prometheus.GaugeValue, float64(l.Messages), shard)
		}
	}
}
