package watermillpubsub_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wrs "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
	"github.com/redis/go-redis/v9"
)

// sent is what a side publishes: three messages, two with metadata (one
// holding bytes msgpack must carry as they are), one without.
func sent() []*message.Message {
	var out []*message.Message
	for i, md := range []message.Metadata{{"tenant": "acme", "trace": "00-4bf9-01"}, nil, {"bin": "\x00\xff\x01", "empty": ""}} {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("payload %d", i)))
		for k, v := range md {
			m.Metadata.Set(k, v)
		}
		out = append(out, m)
	}
	return out
}

// same says how got differs from want (UUID, payload, metadata), or "".
func same(want, got *message.Message) string {
	if got.UUID != want.UUID || string(got.Payload) != string(want.Payload) {
		return fmt.Sprintf("message %s %q came as %s %q", want.UUID, want.Payload, got.UUID, got.Payload)
	}
	if len(got.Metadata) != len(want.Metadata) {
		return fmt.Sprintf("message %s: metadata %v came as %v", want.UUID, want.Metadata, got.Metadata)
	}
	for k, v := range want.Metadata {
		if got.Metadata[k] != v {
			return fmt.Sprintf("message %s: metadata %v came as %v", want.UUID, want.Metadata, got.Metadata)
		}
	}
	return ""
}

// receive reads n messages from ch, acknowledging each.
func receive(t *testing.T, ch <-chan *message.Message, n int) map[string]*message.Message {
	t.Helper()
	out := map[string]*message.Message{}
	for len(out) < n {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("the channel closed after %d of %d messages", len(out), n)
			}
			out[m.UUID] = m
			m.Ack()
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d messages in 15s", len(out), n)
		}
	}
	return out
}

func nandiSubscriber(t *testing.T, client redis.UniversalClient, u watermillpubsub.Unmarshaller) *watermillpubsub.Subscriber {
	t.Helper()
	sub, err := watermillpubsub.NewSubscriber(watermillpubsub.SubscriberConfig{
		Client: client, ConsumerGroup: "movers", Unmarshaller: u,
		Source: func(topic string) (transport.Source, error) {
			return redisstream.New(client, topic, redisstream.Options{Key: watermillpubsub.RedisStreamKey, Block: 20 * time.Millisecond})
		},
		Lease:    partition.Options{Interval: 100 * time.Millisecond},
		Consumer: consumer.Options{Concurrency: 4},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func nandiPublisher(t *testing.T, client redis.UniversalClient, m watermillpubsub.Marshaller) *watermillpubsub.Publisher {
	t.Helper()
	pub, err := watermillpubsub.NewPublisher(watermillpubsub.PublisherConfig{Marshaller: m,
		Publisher: func(topic string) (transport.Publisher, error) {
			src, err := redisstream.New(client, topic, redisstream.Options{})
			if err != nil {
				return nil, err
			}
			return src.Producer(redisstream.ProducerOptions{})
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// A fleet moves from watermill-redisstream (v1.4.5) one service at a time
// (its Publisher and Subscriber close their client at Close: each gets one
// of its own):
// with its marshaller given to this package, what either side writes the
// other reads, on a real redis-server, with UUID, metadata and payload
// as sent, and both sides' messages mixed on one topic.
func TestAStreamSharedWithWatermillRedisstream(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	format := wrs.DefaultMarshallerUnmarshaller{}
	ctx := context.Background()

	t.Run("watermill-redisstream writes, nandi reads", func(t *testing.T) {
		pub, err := wrs.NewPublisher(wrs.PublisherConfig{Client: srv.Client()}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		msgs := sent()
		if err := pub.Publish("orders.old", msgs...); err != nil {
			t.Fatal(err)
		}
		ch, err := nandiSubscriber(t, client, format).Subscribe(ctx, "orders.old")
		if err != nil {
			t.Fatal(err)
		}
		got := receive(t, ch, len(msgs))
		for _, m := range msgs {
			if diff := same(m, got[m.UUID]); got[m.UUID] == nil || diff != "" {
				t.Errorf("%s (received: %v)", diff, got[m.UUID] != nil)
			}
		}
	})

	t.Run("nandi writes, watermill-redisstream reads", func(t *testing.T) {
		msgs := sent()
		if err := nandiPublisher(t, client, format).Publish("orders.new", msgs...); err != nil {
			t.Fatal(err)
		}
		sub, err := wrs.NewSubscriber(wrs.SubscriberConfig{Client: srv.Client(), ConsumerGroup: "legacy", OldestId: "0"}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		ch, err := sub.Subscribe(ctx, "orders.new")
		if err != nil {
			t.Fatal(err)
		}
		got := receive(t, ch, len(msgs))
		for _, m := range msgs {
			if diff := same(m, got[m.UUID]); got[m.UUID] == nil || diff != "" {
				t.Errorf("%s (received: %v)", diff, got[m.UUID] != nil)
			}
		}
	})

	t.Run("both write one topic, nandi reads", func(t *testing.T) {
		old, err := wrs.NewPublisher(wrs.PublisherConfig{Client: srv.Client()}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		a, b := sent(), sent()
		if err := old.Publish("orders.mixed", a...); err != nil {
			t.Fatal(err)
		}
		if err := nandiPublisher(t, client, format).Publish("orders.mixed", b...); err != nil {
			t.Fatal(err)
		}
		ch, err := nandiSubscriber(t, client, format).Subscribe(ctx, "orders.mixed")
		if err != nil {
			t.Fatal(err)
		}
		got := receive(t, ch, len(a)+len(b))
		for _, m := range append(a, b...) {
			if diff := same(m, got[m.UUID]); got[m.UUID] == nil || diff != "" {
				t.Errorf("%s (received: %v)", diff, got[m.UUID] != nil)
			}
		}
	})
}

// Without the Unmarshaller, a watermill-redisstream entry is not skipped:
// it reaches the failure policy (the group's dead-letter stream by
// default), and one the Unmarshaller cannot read is dead-lettered once,
// never retried.
func TestAnEntryTheUnmarshallerCannotReadIsDeadLettered(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	ctx := context.Background()
	// metadata that is not msgpack
	if err := client.XAdd(ctx, &redis.XAddArgs{Stream: "orders.bad", Values: []any{watermillpubsub.UUIDHeader, "u-1", "metadata", "\xc1", "payload", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	ch, err := nandiSubscriber(t, client, wrs.DefaultMarshallerUnmarshaller{}).Subscribe(ctx, "orders.bad")
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 15*time.Second, "the entry in the group's dead-letter stream", func() bool {
		n, _ := client.XLen(ctx, deadletter.Stream("movers:orders.bad")).Result()
		return n == 1
	})
	select {
	case m := <-ch:
		t.Fatalf("a message the Unmarshaller cannot read was delivered: %s", m.UUID)
	case <-time.After(300 * time.Millisecond):
	}
	letters, _ := client.XRange(ctx, deadletter.Stream("movers:orders.bad"), "-", "+").Result()
	if len(letters) != 1 || !strings.Contains(fmt.Sprint(letters[0].Values), "Unmarshaller cannot read") {
		t.Errorf("dead letters: %v; want one, saying the Unmarshaller cannot read it", letters)
	}
}

// An empty ConsumerGroup is refused, saying what to set: Watermill's
// Pub/Subs read it as "every subscriber gets every message".
func TestAnEmptyConsumerGroupIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	_, err := watermillpubsub.NewSubscriber(watermillpubsub.SubscriberConfig{
		Client: srv.Client(),
		Source: func(string) (transport.Source, error) { return nil, nil },
	}, nil)
	if err == nil || !strings.Contains(err.Error(), "ConsumerGroup is empty") || !strings.Contains(err.Error(), "NewShortUUID") {
		t.Fatalf("an empty ConsumerGroup: %v", err)
	}
}
