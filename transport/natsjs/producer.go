package natsjs

import (
	"context"
	"fmt"

	"github.com/nandi-go/nandi/transport"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Producer publishes tasks to the stream where the Source reads them:
// with Options.Shards, each key to its shard's subject (SubjectFor,
// aligned by task id), else to ProducerOptions.Subject; the key in the
// header Options.KeyHeader, every other header as given.
type Producer struct {
	src     *Source
	subject string
	inject  transport.Inject
}

// ProducerOptions configure a Producer.
type ProducerOptions struct {
	// Subject is where every task goes on a Source without Shards (a
	// subject of its stream); unused with Shards.
	Subject string
	// Inject, if set, writes the context's trace context into each
	// task's headers (tracing.Inject fits it).
	Inject transport.Inject
}

var _ transport.Publisher = (*Producer)(nil)

// Producer returns a producer for s's stream. It refuses a Source with a
// custom Options.Key (the producer cannot know what Key reads), and one
// without Shards when opts.Subject is empty.
func (s *Source) Producer(opts ProducerOptions) (*Producer, error) {
	switch {
	case s.opts.Key != nil:
		return nil, transport.Invalid("natsjs: the Source reads task ids with a custom Options.Key; publish its messages yourself, with what Key reads")
	case s.opts.Shards == 0 && opts.Subject == "":
		return nil, transport.Invalid("natsjs: the Source has no Shards: give ProducerOptions.Subject, a subject of stream %s", s.stream)
	}
	return &Producer{src: s, subject: opts.Subject, inject: opts.Inject}, nil
}

func (p *Producer) msg(ctx context.Context, i int, key string, payload []byte, headers map[string]string) (*nats.Msg, error) {
	h, err := transport.TaskHeaders(ctx, i, key, p.src.opts.KeyHeader, headers, p.inject)
	if err != nil {
		return nil, fmt.Errorf("natsjs: %w", err)
	}
	subject := p.subject
	if p.src.opts.Shards > 0 {
		subject = p.src.SubjectFor(key)
	}
	m := &nats.Msg{Subject: subject, Data: payload, Header: make(nats.Header, len(h))}
	for k, v := range h {
		m.Header[k] = []string{v} // NATS headers are case-sensitive: set as given
	}
	return m, nil
}

// Publish publishes one task and waits for the stream's acknowledgement.
func (p *Producer) Publish(ctx context.Context, key string, payload []byte, headers map[string]string) error {
	m, err := p.msg(ctx, 0, key, payload, headers)
	if err != nil {
		return err
	}
	if _, err := p.src.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("natsjs: publish %q to %s: %w", key, m.Subject, err)
	}
	return nil
}

// PublishBatch publishes tasks asynchronously (PublishMsgAsync, in order)
// and waits for every acknowledgement. It checks every task before it
// publishes any; the first error is returned, after every acknowledgement
// has come or ctx ended.
func (p *Producer) PublishBatch(ctx context.Context, ms []transport.Message) error {
	out := make([]*nats.Msg, len(ms))
	for i, m := range ms {
		nm, err := p.msg(ctx, i, m.Key, m.Payload, m.Headers)
		if err != nil {
			return err
		}
		out[i] = nm
	}
	var first error
	note := func(err error) {
		if first == nil {
			first = err
		}
	}
	futures := make([]jetstream.PubAckFuture, 0, len(out))
	for i, m := range out {
		f, err := p.src.js.PublishMsgAsync(m)
		if err != nil {
			note(fmt.Errorf("natsjs: publish task %d (key %q) to %s: %w", i, ms[i].Key, m.Subject, err))
			break
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			note(fmt.Errorf("natsjs: publish task %d (key %q): %w", i, ms[i].Key, err))
		case <-ctx.Done():
			note(fmt.Errorf("natsjs: publish: %d of %d tasks not acknowledged: %w", len(futures)-i, len(ms), ctx.Err()))
			return first
		}
	}
	return first
}
