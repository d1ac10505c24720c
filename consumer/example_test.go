package consumer_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
)

// A worker handles its share of a log; run more of them with the same
// group name and they split it. Cancelling the context is a graceful
// shutdown: stop taking, finish in flight, write checkpoints, leave.
func Example() {
	mr := miniredis.NewMiniRedis() // any Redis: a server, Sentinel or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	outbox := memory.NewLog(4)
	for i := range 3 {
		outbox.Append("42", fmt.Appendf(nil, "mail %d to customer 42", i))
	}

	lease, err := partition.New(client, partition.Options{Name: "mail-sender", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	sent := make(chan string)
	send := func(ctx context.Context, m *transport.Message) error {
		sent <- string(m.Payload) // one id's tasks run in order
		return nil
	}
	c, err := consumer.New(lease, outbox.Source(), send, consumer.Options{Concurrency: 8})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for range 3 {
		fmt.Println(<-sent)
	}
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// mail 0 to customer 42
	// mail 1 to customer 42
	// mail 2 to customer 42
	// stopped: <nil>
}
