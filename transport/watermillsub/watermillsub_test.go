package watermillsub_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nandi-go/nandi/internal/faultproxy"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/transporttest"
	"github.com/nandi-go/nandi/transport/watermillsub"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, faultproxy.IgnoreLeaks()...) }

var topics atomic.Int64

func msg(k string, p []byte) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), p)
	m.Metadata.Set("id", k)
	return m
}

func TestConformanceGoChannel(t *testing.T) {
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		// In order only when Publish waits for every subscriber's ack.
		ps := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		t.Cleanup(func() { _ = ps.Close() })
		topic := fmt.Sprintf("t%d", topics.Add(1))
		src, err := watermillsub.New(ps, topic, watermillsub.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, p []byte) {
			if err := ps.Publish(topic, msg(k, p)); err != nil {
				t.Fatal(err)
			}
		}
	}})
}

func TestConformanceRedisStream(t *testing.T) {
	srv := redistest.Start(t)
	pub, err := wmredis.NewPublisher(wmredis.PublisherConfig{Client: srv.Client()}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		// Fan-out (no consumer group); Close closes its client, so one each.
		// Each test has a fresh stream, read from its start: a message
		// published before the subscription's first XREAD is not missed, so
		// no sleep has to guess when the subscription exists (a fixed
		// Settle raced it under load).
		sub, err := wmredis.NewSubscriber(wmredis.SubscriberConfig{Client: srv.Client(), BlockTime: 20 * time.Millisecond, DisableIndefiniteInitialBlock: true, FanOutOldestId: "0"}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		topic := fmt.Sprintf("wm%d", topics.Add(1))
		src, _ := watermillsub.New(sub, topic, watermillsub.Options{})
		return src, func(k string, p []byte) {
			if err := pub.Publish(topic, msg(k, p)); err != nil {
				t.Fatal(err)
			}
		}
	}})
}
