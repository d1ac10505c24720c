package redisstream

import (
	"context"
	"fmt"

	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// Producer writes tasks where the Source it was made from reads them: each
// key to the stream of its shard (StreamFor: aligned by task id, or
// LegacyShard with Options.Unaligned), in the Source's key and payload
// fields, every header a field of its own.
type Producer struct {
	src    *Source
	inject transport.Inject
}

// ProducerOptions configure a Producer. The zero value is usable.
type ProducerOptions struct {
	// Inject, if set, writes the context's trace context into each
	// task's headers before it is published (for OpenTelemetry:
	// func(ctx context.Context, h map[string]string) { tracing.Inject(ctx, h, tracing.Options{}) }),
	// so the consumer's span is a child of the producer's.
	Inject transport.Inject
}

// Producer returns a producer for s's streams. It refuses a Source with a
// custom Options.Key: the producer cannot know which field that reads.
func (s *Source) Producer(opts ProducerOptions) (*Producer, error) {
	if s.opts.Key != nil {
		return nil, transport.Invalid("redisstream: the Source reads task ids with a custom Options.Key; write its entries yourself, with the field that Key reads")
	}
	return &Producer{src: s, inject: opts.Inject}, nil
}

var _ transport.Publisher = (*Producer)(nil)

// Publish writes one task (XADD to its key's stream).
func (p *Producer) Publish(ctx context.Context, key string, payload []byte, headers map[string]string) error {
	_, err := p.PublishBatch(ctx, []transport.Message{{Key: key, Payload: payload, Headers: headers}})
	return err
}

// PublishBatch writes tasks in one pipelined round trip (per node, on a
// cluster), in order: tasks of one key land in one stream in the order
// given, and returns their positions. It checks every task before it
// writes any; on an error from Redis, the positions of the tasks written
// are returned with it (zero for the others). Each task is given as a
// transport.Message's Key, Payload and Headers.
func (p *Producer) PublishBatch(ctx context.Context, rs []transport.Message) ([]transport.Position, error) {
	o := p.src.opts
	args := make([]*redis.XAddArgs, len(rs))
	for i, r := range rs {
		h, err := transport.TaskHeaders(ctx, i, r.Key, "", r.Headers, p.inject, o.KeyField, o.PayloadField)
		if err != nil {
			return nil, fmt.Errorf("redisstream: %w", err)
		}
		values := make([]any, 0, 4+2*len(h))
		values = append(values, o.KeyField, r.Key, o.PayloadField, r.Payload)
		for k, v := range h {
			values = append(values, k, v)
		}
		args[i] = &redis.XAddArgs{Stream: p.src.StreamFor(r.Key), Values: values}
	}
	cmds := make([]*redis.StringCmd, len(args))
	_, err := p.src.c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, a := range args {
			cmds[i] = pipe.XAdd(ctx, a)
		}
		return nil
	})
	out := make([]transport.Position, len(rs))
	for i, c := range cmds {
		if c.Err() != nil {
			return out, fmt.Errorf("redisstream: publish task %d (key %q) to %s: %w", i, rs[i].Key, args[i].Stream, c.Err())
		}
		pos, perr := parseID(c.Val())
		if perr != nil {
			return out, fmt.Errorf("redisstream: publish task %d: %w", i, perr)
		}
		out[i] = pos
	}
	if err != nil {
		return out, fmt.Errorf("redisstream: publish: %w", err)
	}
	return out, nil
}
