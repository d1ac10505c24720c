//go:build !race

// Watermill's suite is heavy (hundreds of subscriptions, 10,000 messages
// through two restarts): make test runs it without the race detector
// (test-systems), as the delivery scenarios; subscriber_test.go is raced.

package watermillpubsub_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
	"github.com/nats-io/nats.go/jetstream"
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
	return pubSub(t, client, consumerGroup,
		func(topic string) (transport.Source, error) { return source(topic) },
		func(topic string) (transport.Publisher, error) {
			src, err := source(topic)
			if err != nil {
				return nil, err
			}
			return src.Producer(redisstream.ProducerOptions{})
		})
}

// pubSub is a Publisher and a Subscriber of consumerGroup whose topics
// are read from source and written with producer, the leases and
// checkpoints on client: short intervals and retries, for the suite.
func pubSub(t *testing.T, client redis.UniversalClient, consumerGroup string, source func(string) (transport.Source, error), producer func(string) (transport.Publisher, error)) (message.Publisher, message.Subscriber) {
	pub, err := watermillpubsub.NewPublisher(watermillpubsub.PublisherConfig{Publisher: producer}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := watermillpubsub.NewSubscriber(watermillpubsub.SubscriberConfig{
		Client:        client,
		Source:        source,
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

// restartEnv names, in a child process of the test binary, where to ask
// the test that started it to restart its redis-server: Watermill's
// TestReconnect runs a command (RestartServiceCommand), and this is the
// command, as docker restart is for watermill-redisstream's own test.
const restartEnv = "NANDI_TEST_RESTART_URL"

func TestMain(m *testing.M) {
	if url := os.Getenv(restartEnv); url != "" {
		res, err := http.Post(url, "text/plain", nil)
		if err != nil || res.StatusCode != http.StatusOK {
			fmt.Fprintln(os.Stderr, "restarting redis-server:", err, res)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// restartCommand serves the restart of srv (a clean shutdown that saves
// its data, and a start on the same port) and returns the command that
// asks for it, and the count of restarts done.
func restartCommand(t *testing.T, srv *redistest.Server) ([]string, *atomic.Int64) {
	var mu sync.Mutex
	var n atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		srv.RestartSaved()
		n.Add(1)
	}))
	t.Cleanup(hs.Close)
	os.Setenv(restartEnv, hs.URL) // not t.Setenv: the suite's subtests run in parallel
	t.Cleanup(func() { os.Unsetenv(restartEnv) })
	// The child inherits the variable; this process has read it already.
	return []string{os.Args[0]}, &n
}

// reconnectEnv, set to 1 (make chaos does), runs Watermill's
// TestReconnect in TestPubSubOverRedisStreams. make test leaves it out:
// that test's own bookkeeping races (the race detector reports
// test_pubsub.go:1086, where a goroutine appends the messages published,
// against 1120, which compares them with those received), so a fast
// subscriber can receive the last message before it is listed as
// published, and the test fails with an "extra" message now and then.
const reconnectEnv = "NANDI_WATERMILL_RECONNECT"

// Watermill's universal suite over Redis Streams on a real redis-server,
// with the Features watermill-redisstream v1.4.5 declares for itself, and
// (reconnectEnv) TestReconnect restarting the test's own redis-server.
func TestPubSubOverRedisStreams(t *testing.T) {
	srv := redistest.Start(t)
	var restart []string
	if os.Getenv(reconnectEnv) == "1" {
		var restarts *atomic.Int64
		restart, restarts = restartCommand(t, srv)
		defer func() {
			if run := flag.Lookup("test.run").Value.String(); (run == "" || strings.Contains(run, "Reconnect")) && restarts.Load() < 2 {
				t.Errorf("the redis-server was restarted %d times; TestReconnect restarts it twice", restarts.Load())
			}
		}()
	} else {
		t.Logf("Watermill's TestReconnect is run by make chaos (%s=1): its own bookkeeping races", reconnectEnv)
	}
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      true,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    true,
		RestartServiceCommand:               restart,
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

// jetStreamPubSub is a Publisher and a Subscriber of consumerGroup over
// JetStream on an embedded nats-server, a stream per topic (its one
// subject the topic), created on first use.
func jetStreamPubSub(t *testing.T, ns *natstest.Server, srv *redistest.Server, consumerGroup string) (message.Publisher, message.Subscriber) {
	client := srv.Client(func(o *redis.Options) { o.PoolSize = 64 })
	t.Cleanup(func() { _ = client.Close() })
	js, err := jetstream.New(ns.Conn())
	if err != nil {
		t.Fatal(err)
	}
	source := func(topic string) (*natsjs.Source, error) {
		if _, err := js.CreateOrUpdateStream(context.Background(), jetstream.StreamConfig{Name: topic, Subjects: []string{topic}}); err != nil {
			return nil, err
		}
		return natsjs.New(js, topic, natsjs.Options{})
	}
	return pubSub(t, client, consumerGroup,
		func(topic string) (transport.Source, error) { return source(topic) },
		func(topic string) (transport.Publisher, error) {
			src, err := source(topic)
			if err != nil {
				return nil, err
			}
			return src.Producer(natsjs.ProducerOptions{Subject: topic})
		})
}

// Watermill's suite over JetStream (an embedded nats-server; the leases
// and checkpoints on a real redis-server), with the Features it keeps as
// Redis Streams does; TestReconnect is not run (no restart of the
// embedded server yet).
func TestPubSubOverJetStream(t *testing.T) {
	ns := natstest.Start(t)
	srv := redistest.Start(t)
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    true,
	},
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return jetStreamPubSub(t, ns, srv, watermill.NewShortUUID())
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return jetStreamPubSub(t, ns, srv, group)
		})
}
