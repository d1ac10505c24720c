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
