package redisstream_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// A worker of the group "mail-sender" sends the mails of the stream
// "outbox" it owns; run more with the same group name and they split it,
// each id's mails in order. The lease, the checkpoints and the stream can
// share one Redis, as here, or not.
func Example() {
	mr := miniredis.NewMiniRedis() // here miniredis; any Redis: a server, Sentinel or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	for i := range 3 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "outbox", Values: map[string]any{
			"id": "42", "payload": fmt.Sprintf("mail %d to customer 42", i)}})
	}

	lease, err := partition.New(rdb, partition.Options{Name: "mail-sender", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	src, err := redisstream.New(rdb, "outbox", redisstream.Options{Trim: true})
	if err != nil {
		panic(err)
	}
	sent := make(chan string)
	send := func(ctx context.Context, m *transport.Message) error {
		sent <- string(m.Payload) // ctx ends with the lease: honour it
		return nil
	}
	c, err := consumer.New(lease, src, send, consumer.Options{Concurrency: 8})
	if err != nil {
		panic(err)
	}
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	for range 3 {
		fmt.Println(<-sent)
	}
	stop() // as on SIGTERM: stop taking, finish, write checkpoints, leave
	fmt.Println("stopped:", <-done)
	// Output:
	// mail 0 to customer 42
	// mail 1 to customer 42
	// mail 2 to customer 42
	// stopped: <nil>
}

// A producer writes each task where the group's workers read it: over 12
// aligned streams, task 42 goes to the stream of shard 42 % 12.
func ExampleSource_Producer() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	src, err := redisstream.NewSharded(rdb, redisstream.Names("outbox", 12), redisstream.Options{})
	if err != nil {
		panic(err)
	}
	p, err := src.Producer(redisstream.ProducerOptions{})
	if err != nil {
		panic(err)
	}
	if err := p.Publish(ctx, "42", []byte("mail to customer 42"), map[string]string{"tenant": "acme"}); err != nil {
		panic(err)
	}
	fmt.Println(src.StreamFor("42"), rdb.XLen(ctx, src.StreamFor("42")).Val())
	// Output: outbox:{6} 1
}
