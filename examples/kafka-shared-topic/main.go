// Command kafka-shared-topic serves a Kafka topic of 3 partitions with 5
// workers, more than partitions, with no consumer group: every worker reads
// every partition and handles the keys its nandi lease owns, in order per
// key. It runs on an embedded Kafka (kfake) and an embedded Redis
// (miniredis) by default; -brokers and -redis use real ones.
//
//	cd examples && go run ./kafka-shared-topic
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/examples/internal/demoredis"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	brokers := flag.String("brokers", "", "Kafka brokers, comma-separated (default: an embedded kfake cluster)")
	redisURL := flag.String("redis", "", "Redis URL for the leases (default: an embedded Redis)")
	workers := flag.Int("workers", 5, "workers")
	keys := flag.Int("keys", 200, "keys (task ids)")
	each := flag.Int("each", 10, "messages per key")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *brokers, *redisURL, *workers, *keys, *each); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-shared-topic:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, brokers, redisURL string, workers, keys, each int) error {
	const topic = "orders"
	addrs := strings.Split(brokers, ",")
	if brokers == "" {
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
		if err != nil {
			return err
		}
		defer kc.Close()
		addrs = kc.ListenAddrs()
	}
	ropts, stopRedis, err := demoredis.Options(redisURL)
	if err != nil {
		return err
	}
	defer stopRedis()

	// Each key's messages go to one partition (hash of the key), in order.
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: topic, Balancer: &kafka.Hash{}, Transport: tr, BatchTimeout: time.Millisecond,
		// Wait for the broker: with kafka-go's default, RequireNone, a write
		// returns before the broker has it and the next can overtake it.
		RequiredAcks: kafka.RequireAll}
	for s := range each {
		// One call per round: kafka-go writes the batches of one call
		// concurrently, which can reorder a partition.
		var round []kafka.Message
		for k := range keys {
			round = append(round, kafka.Message{Key: []byte(strconv.Itoa(k)), Value: []byte(strconv.Itoa(s))})
		}
		if err := w.WriteMessages(ctx, round...); err != nil {
			return fmt.Errorf("producing: %w", err)
		}
	}
	_ = w.Close()
	tr.CloseIdleConnections()
	fmt.Fprintf(out, "wrote %d messages (%d keys x %d) to %s, 3 partitions\n", keys*each, keys, each, topic)

	var mu sync.Mutex
	next := map[string]int{} // per key, the sequence number due
	perWorker := make([]int, workers)
	var problems []string
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range workers {
		client := redis.NewClient(ropts)
		defer client.Close()
		lease, err := partition.New(client, partition.Options{Name: "orders", Interval: 200 * time.Millisecond})
		if err != nil {
			return err
		}
		src, err := kafkatopic.New(addrs, topic, kafkatopic.Options{})
		if err != nil {
			return err
		}
		defer src.Close()
		c, err := consumer.New(lease, src, func(ctx context.Context, m *transport.Message) error {
			seq, _ := strconv.Atoi(string(m.Payload))
			mu.Lock()
			defer mu.Unlock()
			if next[m.Key] != seq {
				problems = append(problems, fmt.Sprintf("key %s: %d handled when %d was due", m.Key, seq, next[m.Key]))
			}
			next[m.Key] = seq + 1
			perWorker[i]++
			return nil
		}, consumer.Options{Concurrency: 4})
		if err != nil {
			return err
		}
		wg.Go(func() { _ = c.Run(ctx) })
	}
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range perWorker {
			n += c
		}
		return n
	}
	deadline := time.Now().Add(time.Minute)
	for total() < keys*each && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	wg.Wait()
	for i, n := range perWorker {
		fmt.Fprintf(out, "worker %d handled %d messages\n", i+1, n)
	}
	if n := total(); n != keys*each || len(problems) > 0 {
		return fmt.Errorf("%d of %d messages handled; %d out of order: %v", n, keys*each, len(problems), problems)
	}
	fmt.Fprintf(out, "all %d messages handled once, in order per key, by %d workers on 3 partitions\n", keys*each, workers)
	return nil
}
