package metrics

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/prometheus/client_golang/prometheus"
)

// countingSource counts the source's Info calls: the I/O a lag costs.
type countingSource struct {
	transport.Source
	infos atomic.Int64
}

func (s *countingSource) Info(ctx context.Context) (transport.Info, error) {
	s.infos.Add(1)
	return s.Source.Info(ctx)
}

// A scrape does no I/O: the lag gauges serve the consumer's last
// computation (once per lease interval), however often Prometheus (or
// several of them) scrape. Before, each scrape described the source and
// read the ledger. The handler histogram takes the consumer's
// HandlerBuckets.
func TestScrapesDoNoIO(t *testing.T) {
	s := redistest.Start(t)
	log := memory.NewLog(1)
	src := &countingSource{Source: log.Source()}
	l, err := partition.New(s.Client(), partition.Options{Name: "scrapes", Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	buckets := []time.Duration{time.Second, time.Minute, 10 * time.Minute}
	c, err := consumer.New(l, src, func(context.Context, *transport.Message) error { return nil }, consumer.Options{HandlerBuckets: buckets})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := Register(reg, c, Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	log.Append("1", nil)
	redistest.WaitFor(t, 20*time.Second, "a lag served", func() bool {
		_, ok := gather(t, reg)["nandi_consumer_lag_messages{shard=0}"]
		return ok
	})
	before, start := src.infos.Load(), time.Now()
	const scrapes = 200
	for range scrapes {
		gather(t, reg)
	}
	calls, took := src.infos.Load()-before, time.Since(start)
	// The consumer's own schedule: one Info per interval for the lag, and
	// a few at a term's start.
	if limit := 4 + 2*int64(took/time.Second); calls > limit {
		t.Errorf("%d scrapes in %v made %d Info calls; want at most %d (the consumer's schedule, not the scrapes')", scrapes, took, calls, limit)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "nandi_consumer_handler_duration_seconds" {
			continue
		}
		var got []float64
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			got = append(got, b.GetUpperBound())
		}
		if len(got) != 3 || got[0] != 1 || got[1] != 60 || got[2] != 600 {
			t.Errorf("handler histogram bounds %v; want HandlerBuckets 1, 60, 600", got)
		}
	}
}
