package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/hist"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sample is one gathered series: its value (a histogram's count), by name
// and label set ("name{k=v,...}").
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				if l.GetName() != "group" && l.GetName() != "worker" {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
			}
			sort.Strings(ls)
			key := f.GetName()
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			out[key] = value(f.GetType(), m)
		}
	}
	return out
}

func value(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return math.NaN()
}

// Every field of the stats lands in its own metric, with its own value.
func TestEveryFigureHasItsMetric(t *testing.T) {
	var h hist.H
	for range 7 {
		h.Observe(3 * time.Millisecond)
	}
	ls := partition.Stats{Held: true, Current: partition.Assignment{Index: 2, Replicas: 5, Token: 77}, HandingOver: true,
		Calls: 11, Registrations: 12, Failures: 13, Refusals: 14, Acquired: 15,
		Lost:     map[string]int64{"mapping_changed": 16, "expired": 17, "generation_changed": 18, "stopped": 19},
		HeldTime: 20 * time.Second, UnheldTime: 21 * time.Second, Latency: h.Snapshot()}
	var d, hd hist.H
	d.Observe(time.Second)
	for range 3 {
		hd.Observe(time.Millisecond)
	}
	cs := consumer.Stats{Handled: 31, NotOwned: 32, DoneBefore: 33, Failed: 34, DeadLetters: 35, Abandoned: 36,
		Unheld: 37, Checkpoints: 38, Terms: 39, InFlight: 40, Drains: d.Snapshot(),
		Skipped: 50, Panics: 51, FetchFailures: 52, OpenFailures: 53, CheckpointFailures: 54, BadShard: 55,
		OverdueTotal: 56, LedgerLosses: 57, Rewinds: 62, FencedHandoffs: 70, DeadLetterFailures: 71, Redone: 72, CorruptLedger: 63, Waiting: 64, Reread: 65, Read: 66, Owned: 67, RateWaits: 68, Paused: true, PausedSince: time.UnixMilli(69000), Handling: hd.Snapshot(), Overdue: 58, Unserved: true, Pending: 59, Oldest: []time.Duration{60 * time.Second, 61 * time.Second}}
	pos := func() (partition.Assignment, []transport.Position, bool) {
		return ls.Current, []transport.Position{transport.Offset(100), {Hi: 5000, Lo: 1}}, true
	}
	info := func(context.Context) (transport.Info, error) {
		return transport.Info{Log: true, Shards: 2, Ends: []transport.Position{transport.Offset(141), {Hi: 9500, Lo: 0}}}, nil
	}
	reg := prometheus.NewRegistry()
	o := Options{}.withDefaults()
	reg.MustRegister(newLeaseCollector("g", func() partition.Stats { return ls }, o))
	lag := func() (consumer.Lag, time.Time, error) {
		e := &checkpoint.Epoch{N: 1, R: 2, Start: []transport.Position{transport.Offset(90), {Hi: 4000}},
			Marks: map[checkpoint.Slot]checkpoint.Mark{{Shard: 0, Index: 1}: {Low: transport.Offset(95)}}}
		_, held, _ := pos()
		in, _ := info(context.Background())
		return lagOf(held, e, in.Ends), time.Now(), nil
	}
	reg.MustRegister(consumerCollectorOf("g", func() consumer.Stats { return cs }, lag, func() int64 { return 42 }, o))
	want := map[string]float64{
		"nandi_lease_held": 1, "nandi_lease_index": 2, "nandi_lease_replicas": 5, "nandi_lease_token": 77, "nandi_lease_handing_over": 1,
		"nandi_lease_calls_total": 11, "nandi_lease_registrations_total": 12, "nandi_lease_registration_failures_total": 13,
		"nandi_lease_registration_refusals_total": 14, "nandi_lease_terms_total": 15,
		"nandi_lease_stand_downs_total{reason=mapping_changed}": 16, "nandi_lease_stand_downs_total{reason=expired}": 17,
		"nandi_lease_stand_downs_total{reason=generation_changed}": 18, "nandi_lease_stand_downs_total{reason=stopped}": 19,
		"nandi_lease_held_seconds_total": 20, "nandi_lease_unheld_seconds_total": 21,
		"nandi_lease_registration_duration_seconds":      7,
		"nandi_consumer_messages_total{outcome=handled}": 31, "nandi_consumer_messages_total{outcome=not_owned}": 32,
		"nandi_consumer_messages_total{outcome=done_before}": 33, "nandi_consumer_handler_failures_total": 34,
		"nandi_consumer_messages_total{outcome=dead_lettered}": 35, "nandi_consumer_messages_total{outcome=abandoned}": 36,
		"nandi_consumer_messages_total{outcome=lost_unowned}": 37, "nandi_consumer_checkpoint_writes_total": 38,
		"nandi_consumer_terms_total": 39, "nandi_consumer_in_flight": 40, "nandi_consumer_drain_duration_seconds": 1,
		"nandi_consumer_lag_messages{shard=0}": 41, "nandi_consumer_lag_seconds{shard=1}": 4.5,
		"nandi_consumer_dropped_total":                   42,
		"nandi_consumer_messages_total{outcome=skipped}": 50, "nandi_consumer_panics_total": 51,
		"nandi_consumer_fetch_failures_total": 52, "nandi_consumer_open_failures_total": 53,
		"nandi_consumer_checkpoint_failures_total": 54, "nandi_consumer_messages_total{outcome=bad_shard}": 55,
		"nandi_consumer_overdue_handlers_total": 56, "nandi_consumer_ledger_losses_total": 57, "nandi_consumer_rewinds_total": 62, "nandi_consumer_fenced_handoffs_total": 70, "nandi_consumer_dead_letter_failures_total": 71, "nandi_consumer_redone_total": 72, "nandi_consumer_handler_duration_seconds": 3,
		"nandi_consumer_ledger_corrupt_total": 63, "nandi_consumer_waiting": 64, "nandi_consumer_reread_total": 65,
		"nandi_consumer_read_total": 66, "nandi_consumer_owned_total": 67, "nandi_consumer_rate_waits_total": 68, "nandi_consumer_paused_since_seconds": 69,
		"nandi_group_lag_messages{shard=0}": 51, "nandi_group_lag_seconds{shard=1}": 5.5,
		"nandi_consumer_overdue_handlers": 58, "nandi_consumer_unserved": 1, "nandi_consumer_pending": 59,
		"nandi_consumer_oldest_unfinished_seconds{shard=0}": 60, "nandi_consumer_oldest_unfinished_seconds{shard=1}": 61,
	}
	got := gather(t, reg)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s", k)
		}
	}
	ls.Held = false
	got = gather(t, reg)
	if got["nandi_lease_held"] != 0 || got["nandi_lease_index"] != -1 || got["nandi_lease_replicas"] != 0 {
		t.Errorf("not held: held %v index %v replicas %v; want 0, -1, 0", got["nandi_lease_held"], got["nandi_lease_index"], got["nandi_lease_replicas"])
	}
}

// In a real group (two workers on a real redis-server, a memory log), the
// metrics move as the work does.
func TestMetricsMoveInARealGroup(t *testing.T) {
	s := redistest.Start(t)
	log := memory.NewLog(2)
	name := strings.ReplaceAll(t.Name(), "/", "-")
	var mu sync.Mutex
	seen := map[string]bool{}
	h := func(ctx context.Context, m *transport.Message) error {
		if m.Key == "13" {
			return errors.New("always fails")
		}
		mu.Lock()
		seen[m.Key] = true
		mu.Unlock()
		return nil
	}
	type worker struct {
		c    *consumer.Consumer
		reg  *prometheus.Registry
		stop context.CancelFunc
		done chan error
	}
	start := func() *worker {
		l, err := partition.New(s.Client(), partition.Options{Name: name, Interval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c, err := consumer.New(l, log.Source(), h, consumer.Options{Concurrency: 2, MaxAttempts: 1,
			DeadLetter:         func(context.Context, *transport.Message, error) error { return nil },
			CheckpointInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		w := &worker{c: c, reg: prometheus.NewRegistry(), done: make(chan error, 1)}
		if err := Register(w.reg, c, Options{ConstLabels: prometheus.Labels{"worker": "p"}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		w.stop = cancel
		go func() { w.done <- c.Run(ctx) }()
		return w
	}
	a, b := start(), start()
	defer b.stop()
	redistest.WaitFor(t, 10*time.Second, "both workers to hold", func() bool {
		return gather(t, a.reg)["nandi_lease_held"] == 1 && gather(t, b.reg)["nandi_lease_held"] == 1
	})
	for i := range 200 {
		log.Append(strconv.Itoa(i), nil)
	}
	redistest.WaitFor(t, 10*time.Second, "every task handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 199
	})
	time.Sleep(100 * time.Millisecond) // a checkpoint write
	g := gather(t, a.reg)
	for _, k := range []string{"nandi_lease_calls_total", "nandi_lease_registrations_total", "nandi_lease_registration_duration_seconds",
		"nandi_lease_terms_total", "nandi_lease_held_seconds_total", "nandi_lease_unheld_seconds_total",
		"nandi_consumer_messages_total{outcome=handled}", "nandi_consumer_messages_total{outcome=not_owned}",
		"nandi_consumer_checkpoint_writes_total", "nandi_consumer_terms_total"} {
		if g[k] <= 0 {
			t.Errorf("%s = %v after 200 tasks; want it moved", k, g[k])
		}
	}
	if r := g["nandi_lease_replicas"]; r != 2 {
		t.Errorf("replicas = %v, want 2", r)
	}
	// The lag gauges serve what the consumer computed last, each lease
	// interval: a scrape does no I/O.
	redistest.WaitFor(t, 10*time.Second, "lag for shard 0 while holding a log, and the group's", func() bool {
		g := gather(t, a.reg)
		_, held := g["nandi_consumer_lag_messages{shard=0}"]
		_, group := g["nandi_group_lag_messages{shard=0}"]
		return held && group
	})
	dead := gather(t, a.reg)["nandi_consumer_messages_total{outcome=dead_lettered}"] + gather(t, b.reg)["nandi_consumer_messages_total{outcome=dead_lettered}"]
	failed := gather(t, a.reg)["nandi_consumer_handler_failures_total"] + gather(t, b.reg)["nandi_consumer_handler_failures_total"]
	if dead != 1 || failed != 1 {
		t.Errorf("task 13 failed %v times and was dead-lettered %v times; want 1 and 1", failed, dead)
	}
	a.stop()
	if err := <-a.done; err != nil {
		t.Fatal(err)
	}
	g = gather(t, a.reg)
	if _, ok := g["nandi_group_lag_messages{shard=0}"]; !ok {
		t.Errorf("no group lag from a worker that holds nothing (its last reading): %v", g)
	}
	if h := g["nandi_consumer_messages_total{outcome=handled}"]; h == 0 || g["nandi_consumer_handler_duration_seconds"] < h {
		t.Errorf("handler durations observed %v for %v handled; want one per call", g["nandi_consumer_handler_duration_seconds"], h)
	}
	if g["nandi_lease_stand_downs_total{reason=stopped}"] != 1 || g["nandi_consumer_drain_duration_seconds"] < 1 || g["nandi_lease_held"] != 0 {
		t.Errorf("after stopping: stand-downs(stopped) %v, drains %v, held %v; want 1, at least 1, 0",
			g["nandi_lease_stand_downs_total{reason=stopped}"], g["nandi_consumer_drain_duration_seconds"], g["nandi_lease_held"])
	}
	redistest.WaitFor(t, 10*time.Second, "the other worker to take the whole group", func() bool {
		g := gather(t, b.reg)
		return g["nandi_lease_replicas"] == 1 && g["nandi_lease_stand_downs_total{reason=mapping_changed}"]+g["nandi_lease_stand_downs_total{reason=expired}"] >= 1
	})
	b.stop()
	<-b.done
}

// NATS core drops are counted while the reader is open: a slow subscriber
// overflows, and the metric shows the loss before Run ends.
func TestNATSDropsCountedWhileReading(t *testing.T) {
	s := redistest.Start(t)
	ns := natstest.Start(t)
	src, err := natscore.New(ns.Conn(), "slow", natscore.Options{Buffer: 64})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := partition.New(s.Client(), partition.Options{Name: "drops", Interval: 200 * time.Millisecond})
	release := make(chan struct{})
	c, _ := consumer.New(l, src, func(ctx context.Context, m *transport.Message) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, consumer.Options{})
	reg := prometheus.NewRegistry()
	if err := Register(reg, c, Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { close(release); cancel(); <-done }()
	if _, err := l.Next(ctx); err != nil {
		t.Fatal(err)
	}
	pub := ns.Conn()
	for i := range 5000 {
		m := nats.NewMsg("slow")
		m.Header.Set("id", strconv.Itoa(i))
		_ = pub.PublishMsg(m)
	}
	_ = pub.Flush()
	redistest.WaitFor(t, 10*time.Second, "the drops in the metric while Run runs", func() bool {
		return gather(t, reg)["nandi_consumer_dropped_total"] > 0
	})
}

// exported is every metric name the collectors export (histograms by
// their base name, as Prometheus's _bucket, _sum and _count series).
func exported(t *testing.T) map[string]bool {
	var h hist.H
	h.Observe(time.Millisecond)
	ls := partition.Stats{Held: true, Lost: map[string]int64{}, Latency: h.Snapshot()}
	cs := consumer.Stats{Drains: h.Snapshot(), Handling: h.Snapshot(), Oldest: []time.Duration{time.Second}, Paused: true, PausedSince: time.Now()}
	o := Options{}.withDefaults()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newLeaseCollector("g", func() partition.Stats { return ls }, o))
	reg.MustRegister(consumerCollectorOf("g", func() consumer.Stats { return cs }, func() (consumer.Lag, time.Time, error) {
		e := &checkpoint.Epoch{N: 1, R: 1, Start: []transport.Position{transport.Offset(1), {Hi: 5}}}
		return lagOf([]transport.Position{transport.Offset(1), {Hi: 5}}, e, []transport.Position{transport.Offset(9), {Hi: 9}}), time.Now(), nil
	}, func() int64 { return 1 }, o))
	reg.MustRegister(NewBacklogCollector(func(context.Context) []Backlog {
		return []Backlog{{Group: "g", Shards: []ShardBacklog{{Shard: 0, Source: "s", Entries: 3}}}}
	}, o))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range fams {
		out[f.GetName()] = true
	}
	return out
}

var metricName = regexp.MustCompile(`\bnandi_[a-z_]+`)

// checkQueries fails for every metric a query names that nothing exports.
func checkQueries(t *testing.T, where string, queries []string) {
	t.Helper()
	have := exported(t)
	if len(queries) == 0 {
		t.Fatalf("%s: no queries found", where)
	}
	for _, q := range queries {
		for _, name := range metricName.FindAllString(q, -1) {
			if strings.HasPrefix(name, "nandi_filter_") {
				continue // the Watermill middleware's: metrics/watermillmetrics checks them
			}
			base := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suf)
			}
			if !have[base] {
				t.Errorf("%s: query %q names %s, which no collector exports", where, q, name)
			}
		}
	}
}

// The Grafana dashboard's queries name metrics the code exports.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/nandi.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var qs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 && p.Type != "row" {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, tg.Expr)
		}
	}
	checkQueries(t, "deploy/grafana/nandi.json", qs)
}

// The PromQL of the README and the guide names metrics the code exports.
func TestReadmeQueriesNameExportedMetrics(t *testing.T) {
	files, _ := filepath.Glob("../docs/*.md")
	var all []byte
	for _, f := range append([]string{"../README.md"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	var qs []string
	in := false
	for _, line := range strings.Split(string(all), "\n") {
		switch {
		case strings.HasPrefix(line, "```promql"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in && !strings.HasPrefix(line, "#"):
			qs = append(qs, line)
		}
	}
	checkQueries(t, "README.md and docs/", qs)
}

// The alerts (deploy/kubernetes/monitoring) name metrics the code
// exports, in their queries and in what they tell the reader.
func TestAlertQueriesNameExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../deploy/kubernetes/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checkQueries(t, "deploy/kubernetes/monitoring/prometheusrule.yaml", []string{string(b)})
}

// lagOf is the lag a consumer reports for positions held and the group's
// low watermarks in epoch e, against the log's ends.
func lagOf(held []transport.Position, e *checkpoint.Epoch, ends []transport.Position) consumer.Lag {
	var l consumer.Lag
	for s, end := range ends {
		l.Held = append(l.Held, transport.LagOf(held[s], end))
		l.Group = append(l.Group, transport.LagOf(e.Low(s), end))
	}
	return l
}
