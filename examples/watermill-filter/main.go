// Command watermill-filter runs an existing Watermill handler under nandi
// leases: two routers, each with its own GoChannel subscription (every
// router sees every message) and its own lease, and the Filter middleware
// in front of the handler, so each message is handled by the one router
// whose lease owns its id. It runs on an embedded Redis (miniredis) by
// default; -redis uses a real one.
//
//	cd examples && go run ./watermill-filter
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nandi-go/nandi/examples/internal/demoredis"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/watermillfilter"
	"github.com/redis/go-redis/v9"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL for the leases (default: an embedded Redis)")
	n := flag.Int("messages", 300, "messages to publish once the routers hold their shares")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *redisURL, *n); err != nil {
		fmt.Fprintln(os.Stderr, "watermill-filter:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, redisURL string, n int) error {
	ropts, stopRedis, err := demoredis.Options(redisURL)
	if err != nil {
		return err
	}
	defer stopRedis()
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer pubSub.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	handledBy := map[string][]int{}
	var leases []*partition.Lease
	var filters []*watermillfilter.Filter
	for w := 1; w <= 2; w++ {
		client := redis.NewClient(ropts)
		defer client.Close()
		lease, err := partition.New(client, partition.Options{Name: "watermill-filter", Interval: 200 * time.Millisecond})
		if err != nil {
			return err
		}
		wg.Go(func() { _ = lease.Run(ctx) })
		filter := watermillfilter.New(lease, watermillfilter.Options{})
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		router.AddMiddleware(filter.Middleware)
		// The existing handler, unchanged.
		router.AddConsumerHandler("send-invoice", "orders", pubSub, func(m *message.Message) error {
			mu.Lock()
			handledBy[m.Metadata.Get("id")] = append(handledBy[m.Metadata.Get("id")], w)
			mu.Unlock()
			return nil
		})
		wg.Go(func() { _ = router.Run(ctx) })
		<-router.Running()
		leases, filters = append(leases, lease), append(filters, filter)
	}
	deadline := time.Now().Add(30 * time.Second)
	for formed := false; !formed; {
		if time.Now().After(deadline) {
			return fmt.Errorf("the routers' group did not form in 30s")
		}
		time.Sleep(20 * time.Millisecond)
		formed = true
		for _, l := range leases {
			if a, ok := l.Current(); !ok || a.Replicas != len(leases) {
				formed = false
			}
		}
	}
	for i := range n {
		m := message.NewMessage(watermill.NewUUID(), []byte("invoice"))
		m.Metadata.Set("id", strconv.Itoa(i))
		if err := pubSub.Publish("orders", m); err != nil {
			return err
		}
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		done := len(handledBy) == n
		mu.Unlock()
		if done {
			break
		}
	}
	cancel()
	wg.Wait()
	per := map[int]int{}
	for id, ws := range handledBy {
		if len(ws) != 1 {
			return fmt.Errorf("message %s handled by routers %v", id, ws)
		}
		per[ws[0]]++
	}
	for w := 1; w <= 2; w++ {
		fmt.Fprintf(out, "router %d handled %d, acknowledged %d as the other's\n", w, per[w], filters[w-1].Stats().NotOwned)
	}
	if len(handledBy) != n {
		return fmt.Errorf("%d of %d messages handled", len(handledBy), n)
	}
	fmt.Fprintf(out, "all %d messages handled once by an unchanged Watermill handler, split by two leases\n", n)
	return nil
}
