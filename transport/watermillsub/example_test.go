package watermillsub_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/watermillsub"
	"github.com/redis/go-redis/v9"
)

// A worker of the group "webhooks" handles the messages of a Watermill
// topic it owns, the task id in the "id" metadata. The subscriber must fan
// out (every worker's subscription gets every message), as GoChannel here
// does; it keeps nothing, so this example publishes once the worker serves.
// Per-id order is what the subscriber delivers: GoChannel keeps its
// publishing order only with BlockPublishUntilSubscriberAck.
func Example() {
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubsub.Close()

	mr := miniredis.NewMiniRedis() // any Redis: a server, Sentinel or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	lease, err := partition.New(rdb, partition.Options{Name: "webhooks", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	src, err := watermillsub.New(pubsub, "hooks", watermillsub.Options{})
	if err != nil {
		panic(err)
	}
	got := make(chan string)
	handle := func(ctx context.Context, m *transport.Message) error {
		got <- string(m.Payload) // ctx ends with the lease: honour it
		return nil
	}
	c, err := consumer.New(lease, src, handle, consumer.Options{Concurrency: 8})
	if err != nil {
		panic(err)
	}
	run, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	for c.Stats().Terms == 0 { // the worker holds its share and is subscribed
		time.Sleep(10 * time.Millisecond)
	}
	go func() { // each Publish waits for the handler to acknowledge
		for i := range 3 {
			m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "hook %d for customer 42", i))
			m.Metadata.Set("id", "42")
			if err := pubsub.Publish("hooks", m); err != nil {
				panic(err)
			}
		}
	}()
	for range 3 {
		fmt.Println(<-got)
	}
	stop() // as on SIGTERM: stop taking, finish, leave
	fmt.Println("stopped:", <-done)
	// Output:
	// hook 0 for customer 42
	// hook 1 for customer 42
	// hook 2 for customer 42
	// stopped: <nil>
}
