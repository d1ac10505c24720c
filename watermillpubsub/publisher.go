package watermillpubsub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/transport"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Publisher returns the producer a topic is written with.
	Publisher func(topic string) (transport.Publisher, error)
	// Key returns the key a message is partitioned by (its task id);
	// nil: the message's UUID.
	Key func(topic string, msg *message.Message) (string, error)
	// Marshaller, if set, writes each message's fields (beside its key):
	// watermill-redisstream's DefaultMarshallerUnmarshaller writes what
	// its subscribers read (the UUID, msgpack metadata and the payload in
	// fields of their own), so that they read what this Publisher writes.
	// Default: the UUID and each metadata entry as a field of its own.
	Marshaller Marshaller
}

// Publisher is a Watermill message.Publisher over nandi's producers.
type Publisher struct {
	config PublisherConfig
	logger watermill.LoggerAdapter

	mu     sync.Mutex
	topics map[string]transport.Publisher
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// ErrClosed is returned by a Publisher's or Subscriber's calls after
// Close.
var ErrClosed = errors.New("watermillpubsub: closed")

// NewPublisher returns a Publisher. It does no I/O.
func NewPublisher(config PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	if config.Publisher == nil {
		return nil, transport.Invalid("watermillpubsub: PublisherConfig.Publisher is nil: give the function that returns a topic's producer (for Redis Streams, redisstream.New(client, topic, opts) and its Producer)")
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Publisher{config: config, logger: logger, topics: map[string]transport.Publisher{}}, nil
}

// Publish writes messages to topic, in order, each with its key, payload,
// UUID and metadata. It returns at the first error (the messages before it
// are written). Metadata named as the field or header the transport keeps
// the key in ("id" for Redis Streams and NATS, "payload" too for Redis) is
// refused with an error saying so (transport.ErrInvalidTask): it would be
// read as the key.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	pub, err := p.producer(topic)
	if err != nil {
		return err
	}
	for _, msg := range messages {
		if _, reserved := msg.Metadata[UUIDHeader]; reserved {
			return fmt.Errorf("watermillpubsub: message %s: metadata %q is reserved for the message's UUID", msg.UUID, UUIDHeader)
		}
		key := msg.UUID
		if p.config.Key != nil {
			if key, err = p.config.Key(topic, msg); err != nil {
				return fmt.Errorf("watermillpubsub: the key of message %s: %w", msg.UUID, err)
			}
		}
		ctx := msg.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		payload, headers := []byte(msg.Payload), headersOf(msg)
		if p.config.Marshaller != nil {
			if payload, headers, err = marshal(p.config.Marshaller, topic, msg); err != nil {
				return fmt.Errorf("watermillpubsub: marshalling message %s: %w", msg.UUID, err)
			}
		}
		if err := pub.Publish(ctx, key, payload, headers); err != nil {
			return fmt.Errorf("watermillpubsub: publishing message %s to %s: %w", msg.UUID, topic, err)
		}
	}
	return nil
}

// producer returns topic's producer, made once.
func (p *Publisher) producer(topic string) (transport.Publisher, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if pub, ok := p.topics[topic]; ok {
		return pub, nil
	}
	pub, err := p.config.Publisher(topic)
	if err != nil {
		return nil, fmt.Errorf("watermillpubsub: the producer of topic %s: %w", topic, err)
	}
	p.topics[topic] = pub
	return pub, nil
}

// Close closes the producers that can be closed; Publish fails after it.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for _, pub := range p.topics {
		if c, ok := pub.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
