package consumer_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// fill appends n messages over ids distinct ids.
func fill(n, ids int) *memory.Log {
	log := memory.NewLog(4)
	for i := range n {
		log.Append(strconv.Itoa(i%ids), nil)
	}
	return log
}

// plainLoop reads n messages from the log and calls h on each: the floor
// the consumer's overhead is measured against.
func plainLoop(log *memory.Log, n int, h consumer.Handler) time.Duration {
	r, _ := log.Source().Open(context.Background(), nil)
	defer r.Close()
	ctx := context.Background()
	start := time.Now()
	for seen := 0; seen < n; {
		ms, _ := r.Fetch(ctx)
		for _, m := range ms {
			_ = h(ctx, m)
		}
		seen += len(ms)
	}
	return time.Since(start)
}

// consume runs one worker (owning everything) over a log of n messages
// and returns the time from its first term to the last task, and the
// consumer's stats.
func consume(b *testing.B, log *memory.Log, n int, h consumer.Handler, opts consumer.Options) (time.Duration, consumer.Stats) {
	s := server(b)
	l, err := partition.New(s.Client(), partition.Options{Name: fmt.Sprintf("bench-%d", time.Now().UnixNano()), Interval: 500 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	var last atomic.Int64
	wrapped := func(ctx context.Context, m *transport.Message) error {
		err := h(ctx, m)
		if done.Add(1) == int64(n) {
			last.Store(time.Now().UnixNano())
		}
		return err
	}
	c, err := consumer.New(l, log.Source(), wrapped, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	end := make(chan error, 1)
	go func() { end <- c.Run(ctx) }()
	t, err := l.Next(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for done.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	took := time.Unix(0, last.Load()).Sub(t.Start())
	st := c.Stats()
	cancel()
	<-end
	return took, st
}

// BenchmarkConsumerFigures prints the consumer's figures on a real
// redis-server and the in-memory log:
//
//	go test -run '^$' -bench ConsumerFigures -benchtime 1x ./consumer/
func BenchmarkConsumerFigures(b *testing.B) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	noop := func(context.Context, *transport.Message) error { return nil }

	const n = 200_000
	plain := plainLoop(fill(n, 10_000), n, noop)
	took, st := consume(b, fill(n, 10_000), n, noop, consumer.Options{})
	fmt.Fprintln(tw, "figure\tvalue")
	fmt.Fprintf(tw, "plain loop over the memory log, no-op handler\t%.0f ns/msg\n", float64(plain.Nanoseconds())/n)
	fmt.Fprintf(tw, "consumer, Concurrency 1, no-op handler\t%.0f ns/msg (%.1fx the plain loop)\n", float64(took.Nanoseconds())/n, float64(took)/float64(plain))
	fmt.Fprintf(tw, "checkpoint writes at the default batching (1s / 1000 tasks)\t%.0f per second (%d in %.2fs)\n", float64(st.Checkpoints)/took.Seconds(), st.Checkpoints, took.Seconds())

	sleepy := func(context.Context, *transport.Message) error { time.Sleep(time.Millisecond); return nil }
	for _, conc := range []int{1, 8, 64} {
		m := 2000 * conc / 4
		m = max(m, 1000)
		took, _ := consume(b, fill(m, 10_000), m, sleepy, consumer.Options{Concurrency: conc})
		fmt.Fprintf(tw, "throughput, 1ms handler, Concurrency %d\t%.0f msg/s (ideal %d)\n", conc, float64(m)/took.Seconds(), 1000*conc)
	}
	for range b.N {
	}
}
