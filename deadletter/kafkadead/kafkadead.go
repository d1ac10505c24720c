// Package kafkadead is a ready-made consumer.Options.DeadLetter that
// writes each dead task to a Kafka topic through a kafka-go Writer: the
// task's key as the record's key, its payload as the value, its headers
// as given, and what deadletter.Describe says of it under "Nandi-"
// headers (Nandi-Error, Nandi-Attempts, Nandi-Worker, Nandi-Index,
// Nandi-Replicas, Nandi-Token, Nandi-Shard, Nandi-Position, Nandi-At). A
// kafkatopic Source reads the topic as tasks again. The write is
// synchronous unless the Writer is Async (then a lost letter goes
// unnoticed: keep it synchronous), and its error makes the consumer
// retry the dead letter.
package kafkadead

import (
	"context"
	"fmt"

	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/transport"
	"github.com/segmentio/kafka-go"
)

// Sink returns a DeadLetter writing through w, which must name its Topic.
func Sink(w *kafka.Writer) func(ctx context.Context, m *transport.Message, cause error) error {
	return func(ctx context.Context, m *transport.Message, cause error) error {
		rec := kafka.Message{Key: []byte(m.Key), Value: m.Payload}
		for k, v := range m.Headers {
			rec.Headers = append(rec.Headers, kafka.Header{Key: k, Value: []byte(v)})
		}
		for k, v := range deadletter.Describe(ctx, m, cause) {
			rec.Headers = append(rec.Headers, kafka.Header{Key: deadletter.Header(k), Value: []byte(v)})
		}
		if err := w.WriteMessages(ctx, rec); err != nil {
			return fmt.Errorf("kafkadead: write %q to %s: %w", m.Key, w.Topic, err)
		}
		return nil
	}
}
