package watermillsub

import (
	"context"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/transport"
)

// Options configure a Source (and the task key of a watermillfilter.Filter).
type Options struct {
	// KeyMetadata is the metadata key holding the task id; default "id".
	KeyMetadata string
	// Key, if set, returns the task id of a message instead.
	Key func(m *message.Message) (string, error)
}

// TaskKey returns the task key of m: Options.Key's answer, or the
// metadata value KeyMetadata (default "id"); an error names the message
// when it has none.
func (o Options) TaskKey(m *message.Message) (string, error) {
	if o.Key != nil {
		return o.Key(m)
	}
	k := o.KeyMetadata
	if k == "" {
		k = "id"
	}
	if v := m.Metadata.Get(k); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("watermillsub: message %s has no metadata %q (its task id)", m.UUID, k)
}

var _ transport.Source = (*Source)(nil)

// Source reads one topic of a subscriber.
type Source struct {
	sub   message.Subscriber
	topic string
	opts  Options
}

// New returns a Source for topic of sub. It does no I/O; sub is not closed
// by the Source.
func New(sub message.Subscriber, topic string, opts Options) (*Source, error) {
	if sub == nil {
		return nil, transport.Invalid("watermillsub: subscriber is nil")
	}
	if topic == "" {
		return nil, transport.Invalid("watermillsub: topic is empty")
	}
	return &Source{sub: sub, topic: topic, opts: opts}, nil
}

// Info reports a source that is not a log; what arrives while the worker
// holds nothing is dropped.
func (s *Source) Info(context.Context) (transport.Info, error) {
	return transport.Info{Shards: 1, Lossy: true, System: "watermill", Destinations: []string{s.topic}}, nil
}

// Open subscribes; from is ignored.
func (s *Source) Open(_ context.Context, _ []transport.Position) (transport.Reader, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.sub.Subscribe(ctx, s.topic)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watermillsub: subscribe %s: %w", s.topic, err)
	}
	return &reader{s: s, ch: ch, cancel: cancel}, nil
}

type reader struct {
	transport.Closing
	s      *Source
	ch     <-chan *message.Message
	cancel context.CancelFunc
	once   sync.Once
}

// Fetch returns one message: Watermill subscribers deliver the next one
// after the last is acknowledged.
func (r *reader) Fetch(ctx context.Context) ([]*transport.Message, error) {
	if err := r.Err(ctx); err != nil {
		return nil, err
	}
	select {
	case m, ok := <-r.ch:
		if !ok {
			if err := r.Err(ctx); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("watermillsub: the subscription to %s ended", r.s.topic)
		}
		return []*transport.Message{r.s.message(m)}, nil
	case <-r.Done():
		return nil, transport.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Source) message(m *message.Message) *transport.Message {
	out := &transport.Message{Payload: m.Payload}
	out.Key, out.Err = s.opts.TaskKey(m)
	// The metadata as headers, but the task id's: it is Message.Key, and
	// only there (the rule of every transport).
	idKey := s.opts.KeyMetadata
	if idKey == "" {
		idKey = "id"
	}
	for k, v := range m.Metadata {
		if k == idKey && s.opts.Key == nil {
			continue
		}
		if out.Headers == nil {
			out.Headers = make(map[string]string, len(m.Metadata))
		}
		out.Headers[k] = v
	}
	if out.Err != nil {
		out.Key = transport.FallbackKey(m.UUID)
	}
	out.Ack = func() { m.Ack() }
	return out
}

func (r *reader) Close() error {
	_ = r.Closing.Close()
	r.once.Do(func() {
		r.cancel()
		// Messages delivered after the cancel are not ours to handle.
		for {
			select {
			case m, ok := <-r.ch:
				if !ok {
					return
				}
				m.Nack()
			default:
				return
			}
		}
	})
	return nil
}
