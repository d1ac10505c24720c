package watermillpubsub_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
	"github.com/redis/go-redis/v9"
)

// redisPubSub is a Publisher and a Subscriber of consumerGroup over Redis
// Streams on srv, a stream per topic.
func redisPubSub(t *testing.T, srv *redistest.Server, consumerGroup string) (message.Publisher, message.Subscriber) {
	client := srv.Client(func(o *redis.Options) { o.PoolSize = 64 })
	t.Cleanup(func() { _ = client.Close() })
	source := func(topic string) (*redisstream.Source, error) {
		return redisstream.New(client, topic, redisstream.Options{Block: 20 * time.Millisecond})
	}
	pub, err := watermillpubsub.NewPublisher(watermillpubsub.PublisherConfig{
		Publisher: func(topic string) (transport.Publisher, error) {
			src, err := source(topic)
			if err != nil {
				return nil, err
			}
			return src.Producer(redisstream.ProducerOptions{})
		},
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := watermillpubsub.NewSubscriber(watermillpubsub.SubscriberConfig{
		Client:        client,
		Source:        func(topic string) (transport.Source, error) { return source(topic) },
		ConsumerGroup: consumerGroup,
		Lease:         partition.Options{Interval: 100 * time.Millisecond},
		Consumer: consumer.Options{Concurrency: 16, ShutdownTimeout: 2 * time.Second,
			RetryDelay: func(int, error) time.Duration { return 10 * time.Millisecond }},
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	return pub, sub
}

// Watermill's universal suite over Redis Streams on a real redis-server,
// with the Features watermill-redisstream v1.4.5 declares for itself.
func TestPubSubOverRedisStreams(t *testing.T) {
	srv := redistest.Start(t)
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      true,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    true,
	},
		// a group of its own per constructor call, as watermill-redisstream's
		// own test has it: a new subscriber gets every message
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return redisPubSub(t, srv, watermill.NewShortUUID())
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return redisPubSub(t, srv, group)
		})
}
