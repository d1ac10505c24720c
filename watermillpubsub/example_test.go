package watermillpubsub_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
	"github.com/redis/go-redis/v9"
)

// A Watermill Router whose handler runs on nandi's Subscriber: start the
// same program on more machines, with the same ConsumerGroup, and they
// split the topic by key, each key's messages in order. The key here is
// the "customer" metadata.
func Example() {
	mr := miniredis.NewMiniRedis() // here miniredis; any Redis: a server, Sentinel or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	stream := func(topic string) (*redisstream.Source, error) {
		return redisstream.New(rdb, topic, redisstream.Options{})
	}

	pub, err := watermillpubsub.NewPublisher(watermillpubsub.PublisherConfig{
		Publisher: func(topic string) (transport.Publisher, error) {
			src, err := stream(topic)
			if err != nil {
				return nil, err
			}
			return src.Producer(redisstream.ProducerOptions{})
		},
		Key: func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("customer"), nil },
	}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	sub, err := watermillpubsub.NewSubscriber(watermillpubsub.SubscriberConfig{
		Client:        rdb,
		Source:        func(topic string) (transport.Source, error) { return stream(topic) },
		ConsumerGroup: "mailer",
		Lease:         partition.Options{Interval: 100 * time.Millisecond},
		Consumer:      consumer.Options{Concurrency: 8},
	}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	sent := make(chan string)
	router.AddConsumerHandler("send-mail", "outbox", sub, func(msg *message.Message) error {
		// The effect (the mail sent) is this handler's last step: once it
		// is done, return nil, so that the message is acknowledged.
		sent <- string(msg.Payload)
		return nil
	})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()

	for i := range 3 {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("mail %d to customer 42", i)))
		msg.Metadata.Set("customer", "42")
		if err := pub.Publish("outbox", msg); err != nil {
			panic(err)
		}
	}
	for range 3 {
		fmt.Println(<-sent)
	}
	stop() // as on SIGTERM: the router stops, the subscription drains and leaves
	fmt.Println("stopped:", <-done, sub.Close())
	// Output:
	// mail 0 to customer 42
	// mail 1 to customer 42
	// mail 2 to customer 42
	// stopped: <nil> <nil>
}
