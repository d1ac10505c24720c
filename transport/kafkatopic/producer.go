package kafkatopic

import (
	"context"
	"fmt"

	"github.com/nandi-go/nandi/transport"
	"github.com/segmentio/kafka-go"
)

// Producer writes tasks through a kafka-go Writer so that the group reads
// them as it expects: each key in one partition (per-id order), by
// default the aligned one (Balancer: partition TaskID(key) % partitions,
// for a Source with Options.Aligned), with its headers.
type Producer struct {
	w      *kafka.Writer
	inject transport.Inject
}

// ProducerOptions configure a Producer. The zero value is usable.
type ProducerOptions struct {
	// Inject, if set, writes the context's trace context into each
	// message's headers (for OpenTelemetry:
	// func(ctx context.Context, h map[string]string) { tracing.Inject(ctx, h, tracing.Options{}) }).
	Inject transport.Inject
}

var _ transport.Publisher = (*Producer)(nil)

// NewProducer returns a producer writing through w, which must name its
// Topic. A Writer with no Balancer gets Balancer (aligned): kafka-go's
// default, round robin, would scatter a key's tasks over partitions and
// lose their order, so it is refused, as is any balancer known to ignore
// the key; a key-hashing balancer (kafka.Hash, CRC32Balancer, Murmur2Balancer)
// is kept, for a topic read without Options.Aligned. A Writer whose
// RequiredAcks is kafka-go's default, RequireNone, gets RequireAll: with no
// acknowledgement a synchronous write returns once its request is on a
// socket, so the next write can reach the broker first on another of the
// Transport's connections (a key's tasks out of order) and a lost request
// is never reported. The caller closes w.
func NewProducer(w *kafka.Writer, opts ProducerOptions) (*Producer, error) {
	if w == nil {
		return nil, transport.Invalid("kafkatopic: the Writer is nil")
	}
	if w.Topic == "" {
		return nil, transport.Invalid("kafkatopic: the Writer names no Topic; a Producer writes one topic, the group's")
	}
	switch w.Balancer.(type) {
	case nil:
		w.Balancer = Balancer{}
	case *kafka.RoundRobin, *kafka.LeastBytes:
		return nil, transport.Invalid("kafkatopic: the Writer's Balancer %T ignores the key: a key's tasks would land in several partitions and lose their order; use kafkatopic.Balancer{} (aligned) or a hash", w.Balancer)
	}
	if w.RequiredAcks == kafka.RequireNone {
		w.RequiredAcks = kafka.RequireAll
	}
	return &Producer{w: w, inject: opts.Inject}, nil
}

// Publish writes one task (synchronously, as the Writer does unless it is
// Async).
func (p *Producer) Publish(ctx context.Context, key string, payload []byte, headers map[string]string) error {
	m, err := p.message(ctx, 0, key, payload, headers)
	if err != nil {
		return err
	}
	if err := p.w.WriteMessages(ctx, m); err != nil {
		return fmt.Errorf("kafkatopic: publish %q to %s: %w", key, p.w.Topic, err)
	}
	return nil
}

// PublishBatch writes tasks in one call to the Writer, which batches them
// per partition (BatchSize, BatchBytes). It checks every task before it
// writes any. Keys given as transport.Message's Key, payloads as Payload,
// headers as Headers.
func (p *Producer) PublishBatch(ctx context.Context, ms []transport.Message) error {
	out := make([]kafka.Message, len(ms))
	for i, m := range ms {
		km, err := p.message(ctx, i, m.Key, m.Payload, m.Headers)
		if err != nil {
			return err
		}
		out[i] = km
	}
	if err := p.w.WriteMessages(ctx, out...); err != nil {
		return fmt.Errorf("kafkatopic: publish %d tasks to %s: %w", len(ms), p.w.Topic, err)
	}
	return nil
}

func (p *Producer) message(ctx context.Context, i int, key string, payload []byte, headers map[string]string) (kafka.Message, error) {
	h, err := transport.TaskHeaders(ctx, i, key, "", headers, p.inject)
	if err != nil {
		return kafka.Message{}, fmt.Errorf("kafkatopic: %w", err)
	}
	m := kafka.Message{Key: []byte(key), Value: payload}
	if len(h) > 0 {
		m.Headers = make([]kafka.Header, 0, len(h))
		for k, v := range h {
			m.Headers = append(m.Headers, kafka.Header{Key: k, Value: []byte(v)})
		}
	}
	return m, nil
}
