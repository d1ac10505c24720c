package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// The exactly-once scenario on a Kafka topic of 3 partitions (kfake, three
// brokers), served by up to 5 workers with no consumer group; the group's
// low watermark is committed for lag tools.
func TestKafkaExactlyOnceThroughCleanRebalances(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, "outbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	addrs := kc.ListenAddrs()
	f := &fleet{t: t, srv: redistest.Start(t), opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}}
	f.src = func() transport.Source {
		src, err := kafkatopic.New(addrs, "outbox", kafkatopic.Options{CommitGroup: "mail-senders"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src
	}
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "outbox", Balancer: &kafka.Hash{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	}()
	var batch []kafka.Message
	exactlyOnce(t, f, func(k string, p []byte) {
		batch = append(batch, kafka.Message{Key: []byte(k), Value: p})
		if len(batch) == 100 { // 60,000 is a multiple: nothing is left over
			if err := w.WriteMessages(context.Background(), batch...); err != nil {
				t.Error(err)
			}
			batch = batch[:0]
		}
	})
	// The committed low watermark is where lag tools look.
	cl := &kafka.Client{Addr: kafka.TCP(addrs...), Transport: tr}
	res, err := cl.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: "mail-senders", Topics: map[string][]int{"outbox": {0, 1, 2}}})
	if err != nil {
		t.Fatal(err)
	}
	var committed int64
	for _, p := range res.Topics["outbox"] {
		committed += max(p.CommittedOffset, 0)
	}
	if committed == 0 {
		t.Errorf("no low watermark committed for the consumer group: %+v", res.Topics)
	}
}
