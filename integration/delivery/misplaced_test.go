package delivery

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// A topic written with another partitioner than the one it is read as
// aligned by (kafka-go's Hash, as kcat's librdkafka or kafkajs would:
// each key in one partition, but not TaskID % partitions), on kfake,
// under a group of 3. Before, each worker read only its partitions and
// counted the rest as another index's: 6,580 of 10,000 records written by
// kcat were never handled. Now the first misplaced record is counted and
// the group reads every partition: every record once, in order per key,
// only by its owner.
func TestKafkaTopicOfAnotherPartitionerReadAsAlignedSkipsNothing(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(12, "outbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	addrs := kc.ListenAddrs()
	const ids, each = 500, 8
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "outbox", Balancer: &kafka.Hash{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	}()
	var batch []kafka.Message
	for s := range each {
		for x := range ids {
			batch = append(batch, kafka.Message{Key: []byte(strconv.Itoa(x)), Value: fmt.Appendf(nil, "%d/%d", x, s)})
		}
		if err := w.WriteMessages(context.Background(), batch...); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	f := &fleet{t: t, srv: redistest.Start(t), opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond},
		ids: ids, live: map[int]*member{}, copt: consumer.Options{Concurrency: 4, CheckpointInterval: 50 * time.Millisecond}}
	f.src = func() transport.Source {
		src, err := kafkatopic.New(addrs, "outbox", kafkatopic.Options{Aligned: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src
	}
	for range 3 {
		f.start()
	}
	redistest.WaitFor(t, 60*time.Second, "every record handled", func() bool { return f.handled() >= ids*each })
	var misplaced int64
	for _, m := range f.live {
		misplaced += m.c.Stats().Misplaced
	}
	f.stopAll()
	if misplaced == 0 {
		t.Error("no misplaced record counted")
	}
	f.check(ids, each)
	t.Logf("figures: %d records of %d keys written with kafka.Hash to 12 partitions read as aligned by 3 workers: each once; %d misplaced records met", ids*each, ids, misplaced)
}
