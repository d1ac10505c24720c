package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/metrics"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/tracing"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A Watermill subscription is observed as a consumer is, by configuration:
// SubscriberConfig.OnConsumer with metrics.Subscriptions exports each
// subscription's figures under its group (GROUP:TOPIC), and
// SubscriberConfig.Handler with tracing.Handler makes each message a
// span; when the subscriptions end, their series go.
func TestAWatermillSubscriptionIsMeasuredAndTraced(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	reg := prometheus.NewRegistry()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	sub, err := watermillpubsub.NewSubscriber(watermillpubsub.SubscriberConfig{
		Client: client, ConsumerGroup: "observed",
		Source: func(topic string) (transport.Source, error) {
			return redisstream.New(client, topic, redisstream.Options{Block: 20 * time.Millisecond})
		},
		Lease:      partition.Options{Interval: 100 * time.Millisecond},
		Consumer:   consumer.Options{Concurrency: 4},
		OnConsumer: metrics.Subscriptions(reg, metrics.Options{}),
		Handler: func(topic string, h consumer.Handler) consumer.Handler {
			return tracing.Handler(h, tracing.Options{TracerProvider: tp})
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := watermillpubsub.NewPublisher(watermillpubsub.PublisherConfig{
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
	defer pub.Close()
	ctx := context.Background()
	const each = 5
	for _, topic := range []string{"invoices", "refunds"} {
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for range each {
			if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
				t.Fatal(err)
			}
		}
		for range each {
			select {
			case m := <-ch:
				m.Ack()
			case <-time.After(15 * time.Second):
				t.Fatalf("%s: a message did not arrive", topic)
			}
		}
	}
	handled := func() map[string]float64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range fams {
			if f.GetName() != "nandi_consumer_messages_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				if label(m, "outcome") == "handled" {
					out[label(m, "group")] += m.GetCounter().GetValue()
				}
			}
		}
		return out
	}
	redistest.WaitFor(t, 10*time.Second, "each subscription's handled count", func() bool {
		h := handled()
		return h["observed:invoices"] == each && h["observed:refunds"] == each
	})
	spans := 0
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			if a.Key == "messaging.consumer.group.name" && strings.HasPrefix(a.Value.AsString(), "observed:") {
				spans++
			}
		}
	}
	if spans != 2*each {
		t.Errorf("%d spans of the group's messages; want %d", spans, 2*each)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if h := handled(); len(h) != 0 {
		t.Errorf("after Close the subscriptions still export %v", h)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
