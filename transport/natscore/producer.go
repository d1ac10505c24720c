package natscore

import (
	"context"
	"fmt"

	"github.com/nandi-go/nandi/transport"
	"github.com/nats-io/nats.go"
)

// Producer publishes tasks where the Source reads them: with
// Options.Shards, each key to its shard's subject (SubjectFor, aligned by
// task id), else to the Source's subject; the key in the header
// Options.KeyHeader. Core NATS delivers a message to the subscriptions
// open when it arrives, at most once: what no worker reads then is lost
// (the Source's transport.Info says Lossy).
type Producer struct {
	src    *Source
	nc     *nats.Conn
	inject transport.Inject
}

// ProducerOptions configure a Producer. The zero value is usable.
type ProducerOptions struct {
	// Conn publishes (default: the Source's connection).
	Conn *nats.Conn
	// Inject, if set, writes the context's trace context into each
	// task's headers (tracing.Inject fits it).
	Inject transport.Inject
}

var _ transport.Publisher = (*Producer)(nil)

// Producer returns a producer for s's subjects. It refuses a Source with
// a custom Options.Key: the producer cannot know what Key reads.
func (s *Source) Producer(opts ProducerOptions) (*Producer, error) {
	if s.opts.Key != nil {
		return nil, transport.Invalid("natscore: the Source reads task ids with a custom Options.Key; publish its messages yourself, with what Key reads")
	}
	nc := opts.Conn
	if nc == nil {
		nc = s.nc
	}
	return &Producer{src: s, nc: nc, inject: opts.Inject}, nil
}

func (p *Producer) msg(ctx context.Context, i int, key string, payload []byte, headers map[string]string) (*nats.Msg, error) {
	h, err := transport.TaskHeaders(ctx, i, key, p.src.opts.KeyHeader, headers, p.inject)
	if err != nil {
		return nil, fmt.Errorf("natscore: %w", err)
	}
	m := &nats.Msg{Subject: p.src.SubjectFor(key), Data: payload, Header: make(nats.Header, len(h))}
	for k, v := range h {
		m.Header[k] = []string{v} // NATS headers are case-sensitive: set as given
	}
	return m, nil
}

// Publish hands one task to the connection (buffered, as nats.go's
// Publish is; FlushWithContext or PublishBatch waits for the server).
func (p *Producer) Publish(ctx context.Context, key string, payload []byte, headers map[string]string) error {
	m, err := p.msg(ctx, 0, key, payload, headers)
	if err != nil {
		return err
	}
	if err := p.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("natscore: publish %q to %s: %w", key, m.Subject, err)
	}
	return nil
}

// PublishBatch publishes tasks in order and waits until the server has
// them (a flush: until ctx's deadline, or nats.go's 10s without one). It
// checks every task before it publishes any.
func (p *Producer) PublishBatch(ctx context.Context, ms []transport.Message) error {
	out := make([]*nats.Msg, len(ms))
	for i, m := range ms {
		nm, err := p.msg(ctx, i, m.Key, m.Payload, m.Headers)
		if err != nil {
			return err
		}
		out[i] = nm
	}
	for i, m := range out {
		if err := p.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("natscore: publish task %d (key %q) to %s: %w", i, ms[i].Key, m.Subject, err)
		}
	}
	flush := p.nc.Flush // nats.go: FlushWithContext needs a deadline; Flush waits up to 10s
	if _, ok := ctx.Deadline(); ok {
		flush = func() error { return p.nc.FlushWithContext(ctx) }
	}
	if err := flush(); err != nil {
		return fmt.Errorf("natscore: publish %d tasks: flush: %w", len(ms), err)
	}
	return nil
}
