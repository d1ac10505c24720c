package watermillpubsub_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
)

// Two members of one group on a topic split its messages: every message
// is received, each key's in order, a nacked message comes again, UUID
// and metadata come back as sent, the message's context carries the
// member's assignment, and closing the subscriber closes both channels.
func TestTwoMembersSplitATopic(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	defer client.Close()
	source := func(topic string) (transport.Source, error) {
		return redisstream.New(client, topic, redisstream.Options{Block: 20 * time.Millisecond})
	}
	pub, err := watermillpubsub.NewPublisher(watermillpubsub.PublisherConfig{
		Publisher: func(topic string) (transport.Publisher, error) {
			src, _ := redisstream.New(client, topic, redisstream.Options{})
			return src.Producer(redisstream.ProducerOptions{})
		},
		Key: func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("key"), nil },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := watermillpubsub.NewSubscriber(watermillpubsub.SubscriberConfig{
		Client: client, Source: source, ConsumerGroup: "mailers",
		Lease:    partition.Options{Interval: 100 * time.Millisecond},
		Consumer: consumer.Options{Concurrency: 4, RetryDelay: func(int, error) time.Duration { return 5 * time.Millisecond }},
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	const keys, each = 20, 10
	for s := range each {
		for k := range keys {
			msg := message.NewMessage(watermill.NewUUID(), []byte{byte(s)})
			msg.Metadata.Set("key", string(rune('a'+k)))
			if err := pub.Publish("mail", msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	last := map[string]int{}
	got, nacked := 0, 0
	bad := 0
	var wg sync.WaitGroup
	for range 2 {
		ch, err := sub.Subscribe(context.Background(), "mail")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for msg := range ch {
				key, seq := msg.Metadata.Get("key"), int(msg.Payload[0])
				a, ok := consumer.AssignmentFromContext(msg.Context())
				mu.Lock()
				if !ok || a.Replicas < 1 || msg.UUID == "" {
					bad++
				}
				if seq%4 == 1 && nacked < keys {
					nacked++
					mu.Unlock()
					msg.Nack()
					continue
				}
				if p, seen := last[key]; seen && seq != p+1 || !seen && seq != 0 {
					bad++
				}
				last[key] = seq
				got++
				mu.Unlock()
				msg.Ack()
			}
		})
	}
	redistest.WaitFor(t, 20*time.Second, "every message received", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got >= keys*each
	})
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if bad > 0 || got != keys*each {
		t.Fatalf("%d of %d messages acknowledged, %d out of order or without their UUID or assignment", got, keys*each, bad)
	}
	if nacked == 0 {
		t.Fatal("no message was nacked: the test did not test it")
	}
}
