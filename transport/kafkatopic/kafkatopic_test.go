package kafkatopic_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/transporttest"
	"github.com/segmentio/kafka-go"
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
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: topic, Balancer: &kafka.Hash{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
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
