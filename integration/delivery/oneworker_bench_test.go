package delivery

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// plainestXRead is the plainest loop a user writes: XREAD COUNT 512 from
// the start, and for each entry its id as a number and its payload's
// length (the fields a handler uses, read without copying).
func plainestXRead(c redis.UniversalClient, stream string, n int) float64 {
	w := newWindow(n)
	ctx := context.Background()
	last := "0-0"
	for w.seen.Load() < int64(n) {
		res, err := c.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, last}, Count: 512, Block: 100 * time.Millisecond}).Result()
		if err != nil {
			continue
		}
		for _, m := range res[0].Messages {
			id, _ := strconv.ParseUint(m.Values["id"].(string), 10, 64)
			p, _ := m.Values["payload"].(string)
			sink.Add(id + uint64(len(p)))
			w.add(1)
			last = m.ID
		}
	}
	return w.rate()
}

// oneWorker runs one worker owning everything over stream, with a handler
// that does what plainestXRead does per entry, and returns its rate.
func oneWorker(b *testing.B, srv *redistest.Server, stream string, interval time.Duration, conc, n int) float64 {
	return oneWorkerWith(b, srv, stream, interval, consumer.Options{Concurrency: conc}, redisstream.Options{}, n)
}

func oneWorkerWith(b *testing.B, srv *redistest.Server, stream string, interval time.Duration, copts consumer.Options, ropts redisstream.Options, n int) float64 {
	w := newWindow(n)
	l, err := partition.New(srv.Client(), partition.Options{Name: fmt.Sprintf("one-%d", time.Now().UnixNano()), Interval: interval})
	if err != nil {
		b.Fatal(err)
	}
	src, err := redisstream.New(srv.Client(), stream, ropts)
	if err != nil {
		b.Fatal(err)
	}
	c, err := consumer.New(l, src, func(_ context.Context, m *transport.Message) error {
		id, _ := strconv.ParseUint(m.Key, 10, 64)
		sink.Add(id + uint64(len(m.Payload)))
		w.add(1)
		return nil
	}, copts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	w.wait(b, "one worker")
	cancel()
	<-done
	return w.rate()
}

// BenchmarkOneWorkerFigures: one worker draining 200,000 entries already
// in a stream, against the plainest XREAD loop, at Concurrency 1 and 8 and
// intervals of 300ms and 1s. The machine's speed moves by more than the
// difference measured (the plain loop alone varies by a third within a
// run), so each run of the worker sits between two runs of the plain loop
// and is measured against their mean; the figure is the median of 5 such
// ratios (and of the rates beside them).
//
//	go test -run '^$' -bench OneWorkerFigures -benchtime 1x ./integration/delivery/
func BenchmarkOneWorkerFigures(b *testing.B) {
	const pairs = 5
	srv := redistest.Start(b)
	c := srv.Client()
	fillStream(c, "one", speedN)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "one worker, %s, %d entries\tnandi\tplainest XREAD loop\tratio (median of %d, range)\n", time.Now().UTC().Format("2006-01-02"), speedN, pairs)
	type key struct {
		iv   time.Duration
		conc int
	}
	rate, plain, ratio := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	for range pairs {
		for _, iv := range []time.Duration{300 * time.Millisecond, time.Second} {
			for _, conc := range []int{1, 8} {
				k := key{iv, conc}
				before := plainestXRead(c, "one", speedN)
				r := oneWorker(b, srv, "one", iv, conc, speedN)
				p := (before + plainestXRead(c, "one", speedN)) / 2
				rate[k], plain[k], ratio[k] = append(rate[k], r), append(plain[k], p), append(ratio[k], r/p)
			}
		}
	}
	for _, iv := range []time.Duration{300 * time.Millisecond, time.Second} {
		for _, conc := range []int{1, 8} {
			k := key{iv, conc}
			fmt.Fprintf(tw, "Concurrency %d, interval %v\t%.0f/s\t%.0f/s\t%.2f (%.2f-%.2f)\n", conc, iv, median(rate[k]), median(plain[k]), median(ratio[k]), slices.Min(ratio[k]), slices.Max(ratio[k]))
		}
	}
	for range b.N {
	}
}
