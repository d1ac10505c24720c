// Command nats-filter puts core NATS subscribers under nandi leases: three
// workers subscribe to the same subject (no queue group), and each handles
// only the task ids its lease owns. It runs on an embedded nats-server and
// an embedded Redis (miniredis) by default; -nats and -redis use real ones.
//
// Core NATS keeps nothing: what arrives while nobody owns its index is lost,
// and each worker counts what it read while holding nothing. The report
// shows it; use JetStream (transport/natsjs) when that must not happen.
//
//	cd examples && go run ./nats-filter
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/examples/internal/demoredis"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

func main() {
	natsURL := flag.String("nats", "", "NATS URL (default: an embedded nats-server)")
	redisURL := flag.String("redis", "", "Redis URL for the leases (default: an embedded Redis)")
	n := flag.Int("messages", 2000, "messages to publish once the workers hold their shares")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *natsURL, *redisURL, 3, *n); err != nil {
		fmt.Fprintln(os.Stderr, "nats-filter:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, natsURL, redisURL string, workers, n int) error {
	if natsURL == "" {
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
		if err != nil {
			return err
		}
		go ns.Start()
		defer ns.Shutdown()
		if !ns.ReadyForConnections(10 * time.Second) {
			return fmt.Errorf("the embedded nats-server did not start")
		}
		natsURL = ns.ClientURL()
	}
	ropts, stopRedis, err := demoredis.Options(redisURL)
	if err != nil {
		return err
	}
	defer stopRedis()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	handled := make([]atomic.Int64, workers)
	var leases []*partition.Lease
	var consumers []*consumer.Consumer
	for i := range workers {
		nc, err := nats.Connect(natsURL)
		if err != nil {
			return err
		}
		defer nc.Close()
		client := redis.NewClient(ropts)
		defer client.Close()
		lease, err := partition.New(client, partition.Options{Name: "nats-filter", Interval: 200 * time.Millisecond})
		if err != nil {
			return err
		}
		src, err := natscore.New(nc, "orders", natscore.Options{})
		if err != nil {
			return err
		}
		c, err := consumer.New(lease, src, func(ctx context.Context, m *transport.Message) error {
			handled[i].Add(1)
			return nil
		}, consumer.Options{})
		if err != nil {
			return err
		}
		leases, consumers = append(leases, lease), append(consumers, c)
		wg.Go(func() { _ = c.Run(ctx) })
	}
	// Wait for the group to form: each worker holding its share of 3.
	deadline := time.Now().Add(30 * time.Second)
	for formed := false; !formed; {
		if time.Now().After(deadline) {
			return fmt.Errorf("the group did not form in 30s")
		}
		time.Sleep(20 * time.Millisecond)
		formed = true
		for _, l := range leases {
			if a, ok := l.Current(); !ok || a.Replicas != workers {
				formed = false
			}
		}
	}
	pub, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer pub.Close()
	for i := range n {
		m := nats.NewMsg("orders")
		m.Header.Set("id", strconv.Itoa(i))
		if err := pub.PublishMsg(m); err != nil {
			return err
		}
	}
	_ = pub.Flush()
	total := func() int64 {
		var t int64
		for i := range handled {
			t += handled[i].Load()
		}
		return t
	}
	for end := time.Now().Add(10 * time.Second); total() < int64(n) && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for i, c := range consumers {
		fmt.Fprintf(out, "worker %d handled %d, skipped %d as another's, read %d while holding nothing (lost)\n", i+1, handled[i].Load(), c.Stats().NotOwned, c.Stats().Unheld)
	}
	if t := total(); t != int64(n) {
		return fmt.Errorf("%d of %d messages handled", t, n)
	}
	fmt.Fprintf(out, "all %d messages handled once, split by id %% %d\n", n, workers)
	return nil
}
