package watermillsub_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/transporttest"
	"github.com/nandi-go/nandi/transport/watermillsub"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.IgnoreProxyLeaks()...) }

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

// Two routers, each with its own subscription and lease: once the group
// is settled every message is handled by exactly one of them.
func TestFilterSplitsTheWorkBetweenRouters(t *testing.T) {
	srv := redistest.Start(t)
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024}, watermill.NopLogger{})
	defer ps.Close()
	var mu sync.Mutex
	handledBy := map[string][]int{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var leases []*partition.Lease
	var filters []*watermillsub.Filter
	for w := range 2 {
		l, err := partition.New(srv.Client(), partition.Options{Name: "wm", Interval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
		wg.Go(func() { _ = l.Run(ctx) })
		f := watermillsub.NewFilter(l, watermillsub.Options{})
		filters = append(filters, f)
		r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		r.AddMiddleware(f.Middleware)
		r.AddConsumerHandler(fmt.Sprintf("w%d", w), "tasks", ps, func(m *message.Message) error {
			mu.Lock()
			handledBy[m.Metadata.Get("id")] = append(handledBy[m.Metadata.Get("id")], w)
			mu.Unlock()
			return nil
		})
		wg.Go(func() { _ = r.Run(ctx) })
		<-r.Running()
	}
	redistest.WaitFor(t, 10*time.Second, "a settled group of two", func() bool {
		for _, l := range leases {
			if a, ok := l.Current(); !ok || a.Replicas != 2 {
				return false
			}
		}
		return true
	})
	for i := range 100 {
		if err := ps.Publish("tasks", msg(strconv.Itoa(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 10*time.Second, "every message handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(handledBy) == 100 })
	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Wait()
	for k, ws := range handledBy {
		if len(ws) != 1 {
			t.Errorf("message %s handled by workers %v; want exactly one", k, ws)
		}
	}
	if n := filters[0].NotOwned() + filters[1].NotOwned(); n != 100 {
		t.Errorf("%d messages acknowledged as another's; want 100 (each worker skips the other's half)", n)
	}
}
