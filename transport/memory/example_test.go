package memory_test

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

// A consumer over an in-memory log of 4 shards, as a test of a handler
// uses one: the log keeps each key in one shard, in order; the lease
// (and the checkpoints) on a Redis, here miniredis.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	log := memory.NewLog(4)
	for i := range 3 {
		log.Append("42", fmt.Appendf(nil, "step %d of order 42", i))
	}
	lease, err := partition.New(rdb, partition.Options{Name: "orders", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	done := make(chan string)
	c, err := consumer.New(lease, log.Source(), func(_ context.Context, m *transport.Message) error {
		done <- string(m.Payload) // the effect; nil once it is committed
		return nil
	}, consumer.Options{})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	for range 3 {
		fmt.Println(<-done)
	}
	stop()
	fmt.Println("stopped:", <-ran)
	// Output:
	// step 0 of order 42
	// step 1 of order 42
	// step 2 of order 42
	// stopped: <nil>
}
