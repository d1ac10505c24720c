// Package natscore is the core NATS transport: every worker of a group
// subscribes to the subject (no queue group) and handles what its lease
// owns.
//
// Core NATS keeps nothing. A message that arrives while no worker owns its
// index (the group standing down at a change of membership, for about an
// interval) is lost, and so is one that a slow subscriber drops. The
// consumer counts what it read while holding nothing (consumer.Stats
// Unowned) and the Source counts what its subscriptions dropped (Dropped).
// Use JetStream (package natsjs) when a handover must lose nothing.
//
// The task id is the message header Options.KeyHeader (default "id"), or
// Options.Key. A message without it carries an error naming its subject
// and goes to the consumer's failure policy.
package natscore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nandi-go/nandi/transport"
	"github.com/nats-io/nats.go"
)

// Options configure a Source.
type Options struct {
	// KeyHeader is the header holding the task id; default "id".
	KeyHeader string
	// Key, if set, returns the task id of a message instead.
	Key func(m *nats.Msg) (string, error)
	// Buffer is how many messages a subscription holds before NATS drops
	// them as a slow consumer's (default 65536).
	Buffer int
	// Batch is the most messages one Fetch returns (default 512).
	Batch int
}

// Source subscribes to one subject.
type Source struct {
	nc      *nats.Conn
	subject string
	opts    Options
	dropped atomic.Int64
}

// New returns a Source for subject on nc. It does no I/O.
func New(nc *nats.Conn, subject string, opts Options) (*Source, error) {
	if nc == nil {
		return nil, errors.New("natscore: connection is nil")
	}
	if subject == "" {
		return nil, errors.New("natscore: subject is empty")
	}
	if opts.KeyHeader == "" {
		opts.KeyHeader = "id"
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 65536
	}
	if opts.Batch <= 0 {
		opts.Batch = 512
	}
	return &Source{nc: nc, subject: subject, opts: opts}, nil
}

// Info reports a source that is not a log and loses what arrives while
// nobody reads.
func (s *Source) Info(context.Context) (transport.Info, error) {
	return transport.Info{Shards: 1, Lossy: true}, nil
}

// Dropped counts the messages NATS dropped from this source's closed
// subscriptions because they were not read fast enough (slow consumer). It
// implements transport.Dropper.
func (s *Source) Dropped() int64 { return s.dropped.Load() }

var _ transport.Dropper = (*Source)(nil)

// Open subscribes; from is ignored.
func (s *Source) Open(_ context.Context, _ []transport.Position) (transport.Reader, error) {
	ch := make(chan *nats.Msg, s.opts.Buffer)
	sub, err := s.nc.ChanSubscribe(s.subject, ch)
	if err != nil {
		return nil, fmt.Errorf("natscore: subscribe %s: %w", s.subject, err)
	}
	_ = sub.SetPendingLimits(s.opts.Buffer, -1)
	// The subscription is registered once the server has seen it.
	if err := s.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("natscore: flush: %w", err)
	}
	return &reader{s: s, sub: sub, ch: ch}, nil
}

type reader struct {
	transport.Closing
	s    *Source
	sub  *nats.Subscription
	ch   chan *nats.Msg
	once sync.Once
}

func (r *reader) Fetch(ctx context.Context) ([]*transport.Message, error) {
	if err := r.Err(ctx); err != nil {
		return nil, err
	}
	var first *nats.Msg
	select {
	case first = <-r.ch:
	case <-r.Done():
		return nil, transport.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := []*transport.Message{r.s.message(first)}
	for len(out) < r.s.opts.Batch {
		select {
		case m := <-r.ch:
			out = append(out, r.s.message(m))
		default:
			return out, nil
		}
	}
	return out, nil
}

func (s *Source) message(m *nats.Msg) *transport.Message {
	out := &transport.Message{Payload: m.Data}
	if len(m.Header) > 0 {
		out.Headers = make(map[string]string, len(m.Header))
		for k := range m.Header {
			out.Headers[k] = m.Header.Get(k)
		}
	}
	switch {
	case s.opts.Key != nil:
		out.Key, out.Err = s.opts.Key(m)
	case m.Header.Get(s.opts.KeyHeader) != "":
		out.Key = m.Header.Get(s.opts.KeyHeader)
	default:
		out.Err = fmt.Errorf("natscore: a message on %s has no header %q (its task id)", m.Subject, s.opts.KeyHeader)
	}
	return out
}

func (r *reader) Close() error {
	r.once.Do(func() {
		if n, err := r.sub.Dropped(); err == nil {
			r.s.dropped.Add(int64(n))
		}
		_ = r.sub.Unsubscribe()
	})
	return r.Closing.Close()
}
