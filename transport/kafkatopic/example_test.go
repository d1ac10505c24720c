package kafkatopic_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// A worker of the group "mail-sender" sends the mails of the topic
// "outbox" it owns, keyed by customer; run more with the same group name
// and they split every partition between them, each key in order. The
// lease and the checkpoints (the offsets) live in Redis.
func Example() {
	// Here kfake, an in-process implementation of the Kafka protocol; any
	// Kafka cluster (Options.SASL and Options.TLS for credentials).
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "outbox"))
	if err != nil {
		panic(err)
	}
	defer kc.Close()
	brokers := kc.ListenAddrs()
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "outbox", Balancer: &kafka.Hash{}, Transport: tr, RequiredAcks: kafka.RequireAll}
	for i := range 3 {
		m := kafka.Message{Key: []byte("42"), Value: fmt.Appendf(nil, "mail %d to customer 42", i)}
		if err := w.WriteMessages(context.Background(), m); err != nil {
			panic(err)
		}
	}
	_ = w.Close()
	tr.CloseIdleConnections()

	mr := miniredis.NewMiniRedis() // any Redis: a server, Sentinel or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	lease, err := partition.New(rdb, partition.Options{Name: "mail-sender", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	src, err := kafkatopic.New(brokers, "outbox", kafkatopic.Options{})
	if err != nil {
		panic(err)
	}
	defer src.Close()
	sent := make(chan string)
	send := func(ctx context.Context, m *transport.Message) error {
		sent <- string(m.Payload) // ctx ends with the lease: honour it
		return nil
	}
	c, err := consumer.New(lease, src, send, consumer.Options{Concurrency: 8})
	if err != nil {
		panic(err)
	}
	run, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	for range 3 {
		fmt.Println(<-sent)
	}
	stop() // as on SIGTERM: stop taking, finish, write checkpoints, leave
	fmt.Println("stopped:", <-done)
	// Output:
	// mail 0 to customer 42
	// mail 1 to customer 42
	// mail 2 to customer 42
	// stopped: <nil>
}
