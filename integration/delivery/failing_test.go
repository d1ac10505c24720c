package delivery

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// failingIDWith runs two workers over src with MaxPending 8; id 7 has 2,000
// tasks and fails until told to recover; 200 other ids have one each.
// Every other id's task is done while 7 fails (its waiting tasks held as
// positions, outside MaxPending), then 7 recovers, and its tasks are read
// again from the real log and done once each, in order.
func failingIDWith(t *testing.T, src func() transport.Source, publish func(key string, payload []byte)) {
	const waiting, others = 2000, 200
	srv := redistest.Start(t)
	var failing atomic.Bool
	failing.Store(true)
	var mu sync.Mutex
	done := map[string][]int{}
	var stops []func()
	var cs []*consumer.Consumer
	for range 2 {
		l, err := partition.New(srv.Client(), partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c, err := consumer.New(l, src(), func(ctx context.Context, m *transport.Message) error {
			if m.Key == "7" && failing.Load() {
				return errors.New("fails for now")
			}
			seq, _ := strconv.Atoi(strings.TrimPrefix(string(m.Payload), m.Key+"/"))
			mu.Lock()
			done[m.Key] = append(done[m.Key], seq)
			mu.Unlock()
			return nil
		}, consumer.Options{Concurrency: 4, MaxPending: 8, RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ret := make(chan error, 1)
		go func() { ret <- c.Run(ctx) }()
		stops = append(stops, func() {
			cancel()
			if err := <-ret; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
		cs = append(cs, c)
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for i := range waiting {
		publish("7", []byte("7/"+strconv.Itoa(i)))
	}
	for x := 100; x < 100+others; x++ {
		publish(strconv.Itoa(x), []byte(strconv.Itoa(x)+"/0"))
	}
	count := func(other bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for k, seqs := range done {
			if (k != "7") == other {
				n += len(seqs)
			}
		}
		return n
	}
	redistest.WaitFor(t, 30*time.Second, "every other id's task while 7 fails", func() bool { return count(true) == others })
	if n := count(false); n != 0 {
		t.Fatalf("%d of 7's tasks done while its first fails", n)
	}
	var waitingNow int64
	for _, c := range cs {
		waitingNow += c.Stats().Waiting
	}
	if waitingNow != waiting-1 {
		t.Errorf("%d tasks waiting light; want %d (7's, behind its first)", waitingNow, waiting-1)
	}
	failing.Store(false)
	redistest.WaitFor(t, 60*time.Second, "7's tasks once it recovers", func() bool { return count(false) >= waiting })
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	seqs := done["7"]
	for i, s := range seqs {
		if s != i {
			t.Fatalf("7's tasks done in the order %v...; want 0, 1, 2, ... once each", seqs[:min(len(seqs), i+5)])
		}
	}
	if len(seqs) != waiting {
		t.Fatalf("7: %d tasks done; want %d", len(seqs), waiting)
	}
	var reread int64
	for _, c := range cs {
		reread += c.Stats().Reread
	}
	t.Logf("figures: %d tasks of a failing id held light with MaxPending 8, %d read again from the log", waiting-1, reread)
}

func TestFailingIDOnARedisStream(t *testing.T) {
	pubSrv := redistest.Start(t)
	c := pubSrv.Client()
	defer c.Close()
	failingIDWith(t, func() transport.Source {
		src, err := redisstream.New(pubSrv.Client(), "outbox", redisstream.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}, func(k string, p []byte) {
		if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: "outbox", Values: []any{"id", k, "payload", p}}).Err(); err != nil {
			t.Error(err)
		}
	})
}

func TestFailingIDOnJetStream(t *testing.T) {
	ns := natstest.Start(t)
	js, err := jetstream.New(ns.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox"}}); err != nil {
		t.Fatal(err)
	}
	failingIDWith(t, func() transport.Source {
		wjs, err := jetstream.New(ns.Conn())
		if err != nil {
			t.Fatal(err)
		}
		src, err := natsjs.New(wjs, "OUTBOX", natsjs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}, func(k string, p []byte) {
		m := nats.NewMsg("outbox")
		m.Header.Set("id", k)
		m.Data = p
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Error(err)
		}
	})
}

// Kafka through kfake, franz-go's in-process Kafka protocol peer.
func TestFailingIDOnKafka(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "outbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	addrs := kc.ListenAddrs()
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "outbox", Balancer: &kafka.Hash{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	}()
	var batch []kafka.Message
	flush := func() {
		if len(batch) > 0 {
			if err := w.WriteMessages(context.Background(), batch...); err != nil {
				t.Error(err)
			}
			batch = batch[:0]
		}
	}
	failingIDWith(t, func() transport.Source {
		src, err := kafkatopic.New(addrs, "outbox", kafkatopic.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src
	}, func(k string, p []byte) {
		batch = append(batch, kafka.Message{Key: []byte(k), Value: p})
		if len(batch) == 100 { // 2,200 messages: nothing is left over
			flush()
		}
	})
}
