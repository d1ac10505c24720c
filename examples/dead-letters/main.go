// Command dead-letters is a worker with dead letters on, to drill what on
// call does with them: 20 orders on the stream orders, three of which its
// handler declines every time; after 3 attempts each (MaxAttempts) they
// go to the group's dead-letter stream ({dead-letters}:dead), each with
// its error, attempts, worker, term and the stream it came from.
//
// On a Redis of yours it leaves them there and prints the commands to
// look at them and put them back; then run it again with -fixed (a
// handler that accepts them) while nandi dead replay sends them back:
//
//	cd examples && go run ./dead-letters -redis redis://localhost:6379
//	nandi dead list -redis redis://localhost:6379 -group dead-letters
//	nandi dead show -redis redis://localhost:6379 -group dead-letters ID
//	cd examples && go run ./dead-letters -redis redis://localhost:6379 -fixed -orders 0 &
//	nandi dead replay -redis redis://localhost:6379 -group dead-letters -all
//
// With no flags it runs on an embedded Redis (miniredis) and does the
// drill itself: it lists the letters, shows one, fixes the handler and
// replays them with the deadletter package (what nandi dead replay runs).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/examples/internal/demoredis"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

const group = "dead-letters"

func main() {
	url := flag.String("redis", "", "Redis URL (default: an embedded Redis, and the drill done here)")
	fixed := flag.Bool("fixed", false, "the handler accepts every order (run it while nandi dead replay sends the letters back)")
	orders := flag.Int("orders", 20, "orders to publish first (every seventh is declined)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *url, *fixed, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "dead-letters:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, url string, fixed bool, orders int) error {
	embedded := url == ""
	opts, stopRedis, err := demoredis.Options(url)
	if err != nil {
		return err
	}
	defer stopRedis()
	c := redis.NewClient(opts)
	defer c.Close()
	src, err := redisstream.New(c, "orders", redisstream.Options{})
	if err != nil {
		return err
	}
	p, err := src.Producer(redisstream.ProducerOptions{})
	if err != nil {
		return err
	}
	declined := 0
	for i := range orders {
		payload := fmt.Sprintf(`{"order": %d, "card": "4111"}`, i)
		if i%7 == 3 {
			payload = fmt.Sprintf(`{"order": %d, "card": "0000"}`, i)
			declined++
		}
		if err := p.Publish(ctx, fmt.Sprint(1000+i), []byte(payload), map[string]string{"tenant": "acme"}); err != nil {
			return err
		}
	}

	var accept atomic.Bool
	accept.Store(fixed)
	var handled atomic.Int64
	handle := func(_ context.Context, m *transport.Message) error {
		if strings.Contains(string(m.Payload), `"0000"`) && !accept.Load() {
			return errors.New("card declined by the processor (0000)")
		}
		// The effect: the order is charged. Once it is, return nil.
		handled.Add(1)
		return nil
	}
	dead := deadletter.Stream(group)
	lease, err := partition.New(c, partition.Options{Name: group, Interval: time.Second})
	if err != nil {
		return err
	}
	cons, err := consumer.New(lease, src, handle, consumer.Options{
		MaxAttempts: 3, RetryMin: 50 * time.Millisecond, RetryMax: time.Second,
		DeadLetter: deadletter.RedisStream(c, dead, deadletter.Options{Limit: 100_000}),
	})
	if err != nil {
		return err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(runCtx) }()
	defer func() { stopRun(); <-ran }()

	if fixed && !embedded {
		fmt.Fprintf(out, "a worker that accepts every order, serving %s until interrupted: run nandi dead replay now\n", group)
		<-ctx.Done()
		fmt.Fprintf(out, "handled %d orders\n", handled.Load())
		return nil
	}
	want := int64(orders - declined)
	fmt.Fprintf(out, "waiting for the lease (two to four intervals), then %d orders, %d of them declined...\n", orders, declined)
	for handled.Load() < want || c.XLen(ctx, dead).Val() < int64(declined) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "handled %d orders; %d dead letters in %s (3 attempts each)\n", handled.Load(), c.XLen(ctx, dead).Val(), dead)
	if !embedded {
		fmt.Fprintf(out, "drill them:\n  nandi dead list -redis %[1]s -group %[2]s\n  nandi dead show -redis %[1]s -group %[2]s ID\n"+
			"  cd examples && go run ./dead-letters -redis %[1]s -fixed -orders 0 &   # a worker that accepts them\n"+
			"  nandi dead replay -redis %[1]s -group %[2]s -all                      # back to orders, where they came from\n", url, group)
		return nil
	}

	// The drill, as the CLI would do it.
	ls, err := deadletter.List(ctx, c, dead, "-", "+", 100)
	if err != nil {
		return err
	}
	for _, l := range ls {
		fmt.Fprintf(out, "  %s  key %s  %d attempts  from %s at %s: %s\n", l.ID, l.Key, l.Attempts, l.Source, l.Position, l.Error)
	}
	fmt.Fprintf(out, "one whole: key %s, payload %s, header tenant=%s, worker %s, term %d of %d (token %d)\n",
		ls[0].Key, ls[0].Payload, ls[0].Headers["tenant"], ls[0].Worker, ls[0].Index, ls[0].Replicas, ls[0].Token)
	accept.Store(true) // the processor is fixed
	n, err := deadletter.ReplayEach(ctx, c, dead, ls, func(l deadletter.Letter) (transport.Publisher, error) {
		back, err := redisstream.New(c, l.Source, redisstream.Options{})
		if err != nil {
			return nil, err
		}
		return back.Producer(redisstream.ProducerOptions{})
	})
	if err != nil {
		return err
	}
	for handled.Load() < int64(orders) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "replayed %d letters to where they came from; every order handled (%d), %d letters left\n", n, handled.Load(), c.XLen(ctx, dead).Val())
	return nil
}
