package delivery

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
)

// noID writes to shard s of an aligned log a message without a task id
// (payload names it), as another producer would.
type noID = func(s int, payload string)

// A message without a task id on an aligned log belongs to the index
// that reads its shard: it reaches the failure policy once, whatever the
// group's size. Before, its owner was computed from its fallback key,
// which the index reading its shard mostly did not own: 0 of 2 reached
// DeadLetter on two Redis streams under a group of 2, counted only as
// NotOwned.
func TestNoIDOnAnAlignedLogReachesTheFailurePolicyOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  func(t *testing.T, shards int) (*fleet, publisher, noID)
	}{
		{"RedisStreams", noIDRedisStreams},
		{"Kafka", noIDKafka},
		{"JetStream", noIDJetStream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{2, 3} { // 3 over 2 shards: two indexes read a shard
				t.Run(strconv.Itoa(size)+"workers", func(t *testing.T) {
					const shards, each = 2, 3
					f, publish, bad := tc.log(t, shards)
					var mu sync.Mutex
					dead := map[string]int{}
					f.copt = consumer.Options{Concurrency: 2, CheckpointInterval: 50 * time.Millisecond,
						DeadLetter: func(_ context.Context, m *transport.Message, err error) error {
							mu.Lock()
							defer mu.Unlock()
							dead[string(m.Payload)]++
							return nil
						}}
					for range size {
						f.start()
					}
					for s := range shards {
						for i := range each {
							bad(s, fmt.Sprintf("bad %d/%d", s, i))
						}
					}
					for x := range 100 {
						publish(strconv.Itoa(x), []byte(strconv.Itoa(x)+"/0"))
					}
					redistest.WaitFor(t, 20*time.Second, "every message without an id dead-lettered", func() bool {
						mu.Lock()
						defer mu.Unlock()
						return len(dead) == shards*each
					})
					redistest.WaitFor(t, 30*time.Second, "every good task handled", func() bool { return f.handled() >= 100 })
					time.Sleep(300 * time.Millisecond) // a second letter, if any, would come now
					f.stopAll()
					f.check(100, 1)
					mu.Lock()
					defer mu.Unlock()
					for s := range shards {
						for i := range each {
							if p := fmt.Sprintf("bad %d/%d", s, i); dead[p] != 1 {
								t.Errorf("%q dead-lettered %d times; want 1", p, dead[p])
							}
						}
					}
				})
			}
		})
	}
}

func noIDRedisStreams(t *testing.T, shards int) (*fleet, publisher, noID) {
	f, publish := alignedRedisStreams(t, shards)
	names := redisstream.Names("outbox", shards)
	c := f.srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	return f, publish, func(s int, payload string) {
		if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: names[s], Values: []any{"payload", payload}}).Err(); err != nil {
			t.Error(err)
		}
	}
}

// noIDKafka writes the good tasks one by one (alignedKafkaTopic's writes
// a hundred at a time) and the bad ones with a nil key to a partition
// picked by hand, as another producer would.
func noIDKafka(t *testing.T, shards int) (*fleet, publisher, noID) {
	f, addrs := kafkaLog(t, shards)
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	write := func(b kafka.Balancer, m kafka.Message) {
		w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "outbox", Balancer: b, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
		defer w.Close()
		if err := w.WriteMessages(context.Background(), m); err != nil {
			t.Error(err)
		}
	}
	return f, func(k string, p []byte) {
			write(kafkatopic.Balancer{}, kafka.Message{Key: []byte(k), Value: p})
		}, func(s int, payload string) {
			write(toPartition(s), kafka.Message{Value: []byte(payload)})
		}
}

// toPartition is a kafka.Balancer that writes every message to one
// partition.
type toPartition int

func (p toPartition) Balance(kafka.Message, ...int) int { return int(p) }

func noIDJetStream(t *testing.T, shards int) (*fleet, publisher, noID) {
	f, router, pub := jetStreamLog(t, shards)
	return f, func(k string, p []byte) { publishTo(t, pub, router.SubjectFor(k), k, p) },
		func(s int, payload string) { publishTo(t, pub, "outbox."+strconv.Itoa(s), "", []byte(payload)) }
}
