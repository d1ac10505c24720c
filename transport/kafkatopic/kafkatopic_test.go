package kafkatopic_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/transporttest"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/twmb/franz-go/pkg/kfake"
	// kfake needs franz-go v1.22.0 or later (kversion features) but asks for
	// less: importing franz-go here keeps go mod tidy from dropping the pin.
	_ "github.com/twmb/franz-go/pkg/kversion"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var topics atomic.Int64

// cluster starts an in-process Kafka (kfake) with one topic.
func cluster(t *testing.T, brokers, partitions int, topic string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(int32(partitions), topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// writer returns a publish function keeping a key in one partition.
func writer(t *testing.T, addrs []string, topic string) func(string, []byte) {
	return writerWith(t, addrs, topic, &kafka.Hash{})
}

func writerWith(t *testing.T, addrs []string, topic string, b kafka.Balancer) func(string, []byte) {
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: topic, Balancer: b, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	t.Cleanup(func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	})
	return func(k string, p []byte) {
		if err := w.WriteMessages(context.Background(), kafka.Message{Key: []byte(k), Value: p}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConformance(t *testing.T) {
	for _, brokers := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d brokers", brokers), func(t *testing.T) {
			transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
				topic := fmt.Sprintf("tasks-%d", topics.Add(1))
				addrs := cluster(t, brokers, 3, topic)
				src, err := kafkatopic.New(addrs, topic, kafkatopic.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = src.Close() })
				return src, writer(t, addrs, topic)
			}})
		})
	}
}

// A topic written with kafkatopic.Balancer and read with Options.Aligned.
func TestConformanceAligned(t *testing.T) {
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		topic := fmt.Sprintf("aligned-%d", topics.Add(1))
		addrs := cluster(t, 1, 4, topic)
		src, err := kafkatopic.New(addrs, topic, kafkatopic.Options{Aligned: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src, writerWith(t, addrs, topic, kafkatopic.Balancer{})
	}})
}

// SASL/PLAIN configured once (Options.SASL) serves the readers, the
// metadata and the offsets: reads work. With a wrong password the failure
// is logged and counted by the consumer within a second.
func TestSASLConfiguredOnce(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "secure"), kfake.EnableSASL(), kfake.Superuser("PLAIN", "nandi", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	addrs := kc.ListenAddrs()
	mech := plain.Mechanism{Username: "nandi", Password: "s3cret"}
	tr := &kafka.Transport{SASL: mech}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "secure", Balancer: &kafka.Hash{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer func() { _ = w.Close(); tr.CloseIdleConnections() }()
	for i := range 10 {
		if err := w.WriteMessages(context.Background(), kafka.Message{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	srv := redistest.Start(t)
	run := func(password string) (*consumer.Consumer, *logCapture, func()) {
		src, err := kafkatopic.New(addrs, "secure", kafkatopic.Options{SASL: plain.Mechanism{Username: "nandi", Password: password}})
		if err != nil {
			t.Fatal(err)
		}
		l, _ := partition.New(srv.Client(), partition.Options{Name: "secure-" + password, Interval: 200 * time.Millisecond})
		logs := &logCapture{}
		var handled atomic.Int64
		c, err := consumer.New(l, src, func(context.Context, *transport.Message) error { handled.Add(1); return nil },
			consumer.Options{Logger: slog.New(logs)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return c, logs, func() { cancel(); <-done; _ = src.Close() }
	}
	c, _, stop := run("s3cret")
	redistest.WaitFor(t, 15*time.Second, "every message read over SASL", func() bool { return c.Stats().Handled == 10 })
	stop()

	c, logs, stop := run("wrong")
	defer stop()
	if _, err := c.Lease().Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	redistest.WaitFor(t, 5*time.Second, "the failure logged and counted", func() bool {
		st := c.Stats()
		return st.OpenFailures+st.FetchFailures > 0 && logs.warned()
	})
	if took := time.Since(start); took > time.Second {
		t.Errorf("the failure was logged and counted %v after the lease was held; want within a second", took)
	}
	t.Logf("figures: a wrong password logged and counted %v after the term began: %q", time.Since(start).Round(time.Millisecond), logs.first())
}

// logCapture is a slog.Handler that keeps the Warn messages.
type logCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				msg += ": " + a.Value.String()
			}
			return true
		})
		h.mu.Lock()
		h.msgs = append(h.msgs, msg)
		h.mu.Unlock()
	}
	return nil
}
func (h *logCapture) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCapture) WithGroup(string) slog.Handler      { return h }
func (h *logCapture) warned() bool                       { h.mu.Lock(); defer h.mu.Unlock(); return len(h.msgs) > 0 }
func (h *logCapture) first() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.msgs) == 0 {
		return ""
	}
	return h.msgs[0]
}

// Partitions added to the topic while one worker holds the whole group
// (its term renewed, never ending) are read: the consumer describes the
// log every DescribeInterval, and opens it again with the new partition,
// from its start, without losing or repeating anything.
func TestPartitionsAddedAreRead(t *testing.T) {
	addrs := cluster(t, 1, 1, "growing")
	publish := writer(t, addrs, "growing")
	for i := range 5 {
		publish(strconv.Itoa(i), []byte("v"))
	}
	src, err := kafkatopic.New(addrs, "growing", kafkatopic.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	srv := redistest.Start(t)
	l, _ := partition.New(srv.Client(), partition.Options{Name: "growing", Interval: 200 * time.Millisecond})
	var mu sync.Mutex
	seen, shards := map[string]int{}, map[string]int{}
	c, err := consumer.New(l, src, func(_ context.Context, m *transport.Message) error {
		mu.Lock()
		seen[string(m.Payload)]++
		shards[string(m.Payload)] = m.Shard
		mu.Unlock()
		return nil
	}, consumer.Options{DescribeInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	redistest.WaitFor(t, 10*time.Second, "the first partition read", func() bool { return c.Stats().Handled == 5 })

	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Transport: tr}
	res, err := client.CreatePartitions(context.Background(), &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: "growing", Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	for topic, err := range res.Errors {
		if err != nil {
			t.Fatalf("adding a partition to %s: %v", topic, err)
		}
	}
	// A kafka.Transport answers metadata from a cache of up to 6s: ask and
	// write through a fresh one.
	tr2 := &kafka.Transport{}
	defer tr2.CloseIdleConnections()
	client = &kafka.Client{Addr: kafka.TCP(addrs...), Transport: tr2}
	md, err := client.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{"growing"}})
	if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 2 {
		t.Fatalf("after adding a partition: %+v, %v; want 2 partitions", md, err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "growing", Transport: tr2, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll,
		Balancer: kafka.BalancerFunc(func(_ kafka.Message, ps ...int) int { return ps[len(ps)-1] })}
	defer func() { _ = w.Close() }()
	for i := range 5 {
		if err := w.WriteMessages(context.Background(), kafka.Message{Key: []byte(strconv.Itoa(10 + i)), Value: []byte(fmt.Sprintf("new-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 10*time.Second, "the added partition read", func() bool { return c.Stats().Handled == 10 })
	mu.Lock()
	defer mu.Unlock()
	if seen["v"] != 5 {
		t.Errorf("the first partition's 5 messages handled %d times; want 5", seen["v"])
	}
	for i := range 5 {
		if n := seen[fmt.Sprintf("new-%d", i)]; n != 1 {
			t.Errorf("new-%d handled %d times; want once", i, n)
		}
		if sh := shards[fmt.Sprintf("new-%d", i)]; sh != 1 {
			t.Errorf("new-%d came from partition %d; want the added one, 1", i, sh)
		}
	}
}

// Balancer places a key as its doc says: TaskID(key) % partitions, and a
// message without a key in the first partition.
func TestBalancerPlacesAsDocumented(t *testing.T) {
	parts := []int{0, 1, 2, 3, 4}
	for _, key := range []string{"0", "1", "7", "42", "order-9", "ünï"} {
		if got, want := (kafkatopic.Balancer{}).Balance(kafka.Message{Key: []byte(key)}, parts...), int(transport.TaskID(key)%5); got != want {
			t.Errorf("Balance(%q) = %d; want %d", key, got, want)
		}
	}
	for _, key := range [][]byte{nil, {}} {
		if got := (kafkatopic.Balancer{}).Balance(kafka.Message{Key: key}, parts...); got != 0 {
			t.Errorf("Balance(key %#v) = %d; want 0, the first partition", key, got)
		}
	}
}
