//go:build !race

// Watermill's suite is heavy (hundreds of subscriptions, 10,000 messages
// through two restarts): make test runs it without the race detector
// (test-systems), as the delivery scenarios; subscriber_test.go is raced.

package watermillpubsub_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
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
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
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
	if strings.Contains(t.Name(), "TestReconnect") {
		return settled{pub: pub}, settled{sub: sub}
	}
	return pub, sub
}

// published holds, by UUID, when each Publish of a message returned.
var published sync.Map // string -> time.Time

// settled mends a race in Watermill's TestReconnect, not in the code it
// tests: a publisher goroutine lists a message as published after its
// Publish returns (test_pubsub.go, through a channel and another
// goroutine), while the test compares that list with what it received as
// soon as the last message arrives, so a subscriber quick enough to hand
// out the last message before it is listed fails the test with one
// "extra" message. settled hands each message out once its Publish has
// returned and a moment has passed; every message still arrives, in the
// order it came, and is acknowledged by the test as before.
type settled struct {
	pub message.Publisher  // the Publisher's side, or
	sub message.Subscriber // the Subscriber's
}

func (s settled) Publish(topic string, messages ...*message.Message) error {
	err := s.pub.Publish(topic, messages...)
	if err == nil {
		for _, msg := range messages {
			published.Store(msg.UUID, time.Now())
		}
	}
	return err
}

func (s settled) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for msg := range in {
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
				if at, ok := published.Load(msg.UUID); ok {
					time.Sleep(time.Until(at.(time.Time).Add(20 * time.Millisecond)))
					break
				}
				time.Sleep(time.Millisecond)
			}
			out <- msg
		}
	}()
	return out, nil
}

func (s settled) Close() error {
	if s.pub != nil {
		return s.pub.Close()
	}
	return s.sub.Close()
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

// restartCommand serves restart (a clean stop of the test's server that
// keeps its data, and a start on the same port) and returns the command
// that asks for it, and the count of restarts done.
func restartCommand(t *testing.T, restart func()) ([]string, *atomic.Int64) {
	var mu sync.Mutex
	var n atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		restart()
		n.Add(1)
	}))
	t.Cleanup(hs.Close)
	os.Setenv(restartEnv, hs.URL) // not t.Setenv: the suite's subtests run in parallel
	t.Cleanup(func() { os.Unsetenv(restartEnv) })
	// The child inherits the variable; this process has read it already.
	return []string{os.Args[0]}, &n
}

// fullEnv, set to 1 (make chaos does), runs Watermill's suite at its
// full size: 50 subscribers of 5,000 messages where make test's run
// (ForceShort) has 10 of 100. Every test runs either way; at full size,
// the three suites beside make test's raced packages on a busy 2-core
// machine ran past Watermill's own timeouts (a subscriber per group, 50
// groups, each reading every message).
const fullEnv = "NANDI_WATERMILL_FULL"

func short() bool { return os.Getenv(fullEnv) != "1" }

// reconnect returns TestReconnect's restart command, and checks at t's
// end that the test did restart the server twice.
func reconnect(t *testing.T, restart func()) []string {
	command, restarts := restartCommand(t, restart)
	t.Cleanup(func() {
		if run := flag.Lookup("test.run").Value.String(); (run == "" || strings.Contains(run, "Reconnect")) && restarts.Load() < 2 {
			t.Errorf("the server was restarted %d times; TestReconnect restarts it twice", restarts.Load())
		}
	})
	return command
}

// Watermill's universal suite over Redis Streams on a real redis-server,
// with the Features watermill-redisstream v1.4.5 declares for itself, and
// TestReconnect restarting the test's own redis-server.
func TestPubSubOverRedisStreams(t *testing.T) {
	srv := redistest.Start(t)
	restart := reconnect(t, srv.RestartSaved)
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      true,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    true,
		ForceShort:                          short(),
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
// Redis Streams does, TestReconnect restarting the nats-server on its
// store.
func TestPubSubOverJetStream(t *testing.T) {
	ns := natstest.Start(t)
	srv := redistest.Start(t)
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    true,
		ForceShort:                          short(),
		RestartServiceCommand:               reconnect(t, ns.Restart),
	},
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return jetStreamPubSub(t, ns, srv, watermill.NewShortUUID())
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return jetStreamPubSub(t, ns, srv, group)
		})
}

// kafkaProducer closes the Writer it writes through with the Publisher.
type kafkaProducer struct {
	*kafkatopic.Producer
	w *kafka.Writer
}

func (p kafkaProducer) Close() error { return p.w.Close() }

// kafkaPartitions is the partitions of each topic of the Kafka suite.
const kafkaPartitions = 4

// kafkaPubSub is a Publisher and a Subscriber of consumerGroup over Kafka
// (kfake at addrs), a topic of kafkaPartitions aligned partitions per
// Watermill topic,
// created on first use.
func kafkaPubSub(t *testing.T, addrs []string, srv *redistest.Server, consumerGroup string) (message.Publisher, message.Subscriber) {
	client := srv.Client(func(o *redis.Options) { o.PoolSize = 64 })
	t.Cleanup(func() { _ = client.Close() })
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	create := func(topic string) error {
		kc := &kafka.Client{Addr: kafka.TCP(addrs...), Transport: tr}
		res, err := kc.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{
			Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: kafkaPartitions, ReplicationFactor: 1}},
		})
		if err != nil {
			return err
		}
		if err := res.Errors[topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return err
		}
		return nil
	}
	return pubSub(t, client, consumerGroup,
		func(topic string) (transport.Source, error) {
			if err := create(topic); err != nil {
				return nil, err
			}
			return kafkatopic.New(addrs, topic, kafkatopic.Options{Aligned: true})
		},
		func(topic string) (transport.Publisher, error) {
			if err := create(topic); err != nil {
				return nil, err
			}
			w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: topic, Transport: tr, BatchTimeout: time.Millisecond}
			p, err := kafkatopic.NewProducer(w, kafkatopic.ProducerOptions{})
			if err != nil {
				return nil, err
			}
			return kafkaProducer{p, w}, nil
		})
}

// Watermill's suite over Kafka (kfake, franz-go's in-process Kafka
// protocol peer, not a Kafka broker; the leases and checkpoints on a real
// redis-server), with the Features watermill-kafka declares for itself
// and TestReconnect restarting kfake on its data directory.
func TestPubSubOverKafka(t *testing.T) {
	dir := t.TempDir()
	start := func(opts ...kfake.Opt) *kfake.Cluster {
		kc, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.DataDir(dir), kfake.SyncWrites()}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return kc
	}
	var mu sync.Mutex
	kc := start()
	t.Cleanup(func() { mu.Lock(); defer mu.Unlock(); kc.Close() })
	addrs := kc.ListenAddrs()
	_, port, _ := net.SplitHostPort(addrs[0])
	restart := reconnect(t, func() {
		mu.Lock()
		defer mu.Unlock()
		kc.Close()
		p, _ := strconv.Atoi(port)
		kc = start(kfake.Ports(p))
	})
	srv := redistest.Start(t)
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                      true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    true,
		ForceShort:                          short(),
		RestartServiceCommand:               restart,
	},
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return kafkaPubSub(t, addrs, srv, watermill.NewShortUUID())
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return kafkaPubSub(t, addrs, srv, group)
		})
}
