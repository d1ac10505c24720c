package watermillpubsub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Client holds each subscription's lease, checkpoint ledger and presence.
	Client redis.UniversalClient
	// Source returns the log a topic is read from, once per Subscribe;
	// a source that is an io.Closer is closed when its subscription ends.
	Source func(topic string) (transport.Source, error)
	// ConsumerGroup: the subscribers of one group split a topic by key;
	// every group gets every message. Required: Watermill's Pub/Subs read
	// an empty group as "every subscriber gets every message", which a
	// group that splits cannot be; give each subscriber a group of its own
	// (watermill.NewShortUUID()) for that.
	ConsumerGroup string
	// Lease and Consumer configure each subscription (Lease.Name is set
	// per group and topic).
	Lease    partition.Options
	Consumer consumer.Options

	// Unmarshaller, if set, reads each message from its entry's fields
	// (watermill-redisstream's DefaultMarshallerUnmarshaller reads what
	// its publishers write: the UUID, msgpack metadata and the payload in
	// fields of their own); a message it cannot read goes to the failure
	// policy, once. Default: the fields this package's Publisher writes.
	// Pair it with a Source whose redisstream.Options.Key is
	// RedisStreamKey, since those publishers write no id.
	Unmarshaller Unmarshaller
	// Handler, if set, wraps each subscription's handler: for example
	// tracing.Handler(h, tracing.Options{}) makes each message a span.
	Handler func(topic string, h consumer.Handler) consumer.Handler
	// OnConsumer, if set, is called with each subscription's consumer
	// before it runs; the func it returns (if any) once the subscription
	// has ended. For example metrics.Register(reg, c, opts), and
	// unregistering its collectors at the end: metrics.Subscriptions(reg,
	// opts) does both.
	OnConsumer func(topic string, c *consumer.Consumer) (ended func())
}

// Subscriber is a Watermill message.Subscriber over nandi's consumer.
type Subscriber struct {
	config SubscriberConfig
	logger watermill.LoggerAdapter

	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close
	running sync.WaitGroup
}

var _ message.Subscriber = (*Subscriber)(nil)

// errNacked is the handler's error for a message its receiver nacked.
var errNacked = errors.New("watermillpubsub: the message was nacked")

// errEnded is the handler's error for a message whose subscription ended
// before it was acknowledged: not checkpointed, the group delivers it again.
var errEnded = errors.New("watermillpubsub: the subscription ended before the message was acknowledged")

// NewSubscriber returns a Subscriber. It validates config (each
// subscription's consumer and lease options are validated by Subscribe)
// and does no I/O.
func NewSubscriber(config SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if config.Client == nil {
		return nil, transport.Invalid("watermillpubsub: SubscriberConfig.Client is nil: give the Redis client that holds the group's leases and checkpoints")
	}
	if config.Source == nil {
		return nil, transport.Invalid("watermillpubsub: SubscriberConfig.Source is nil: give the function that returns a topic's log (for Redis Streams, redisstream.New(client, topic, opts))")
	}
	if config.ConsumerGroup == "" {
		return nil, transport.Invalid("watermillpubsub: SubscriberConfig.ConsumerGroup is empty: name the group whose subscribers split each topic by key (every group gets every message). An empty group means \"every subscriber gets every message\" in Watermill's Redis, Kafka and NATS Pub/Subs, which a group that splits cannot do: for that, give each subscriber a group of its own (watermill.NewShortUUID())")
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Subscriber{config: config, logger: logger, closing: make(chan struct{})}, nil
}

// leaseName is the lease (and ledger) name of a group on a topic.
func (s *Subscriber) leaseName(topic string) string {
	return s.config.ConsumerGroup + ":" + topic
}

// Subscribe joins the consumer group on topic as one more member and
// returns the channel its share of the messages arrives on. Cancelling
// ctx, or Close, drains the subscription and closes the channel.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	src, err := s.config.Source(topic)
	if err != nil {
		return nil, fmt.Errorf("watermillpubsub: the source of topic %s: %w", topic, err)
	}
	lopts := s.config.Lease
	lopts.Name = s.leaseName(topic)
	lease, err := partition.New(s.config.Client, lopts)
	if err != nil {
		return nil, fmt.Errorf("watermillpubsub: the lease of topic %s: %w", topic, err)
	}
	sub := &subscription{out: make(chan *message.Message), done: make(chan struct{}), unmarshaller: s.config.Unmarshaller}
	var h consumer.Handler = sub.handle
	if s.config.Handler != nil {
		h = s.config.Handler(topic, h)
	}
	c, err := consumer.New(lease, src, h, s.config.Consumer)
	if err != nil {
		return nil, fmt.Errorf("watermillpubsub: the consumer of topic %s: %w", topic, err)
	}
	fields := watermill.LogFields{"topic": topic, "group": lopts.Name}
	s.logger.Info("subscribing", fields)
	var ended func()
	if s.config.OnConsumer != nil {
		ended = s.config.OnConsumer(topic, c)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.running.Add(2)
	go func() {
		defer s.running.Done()
		select {
		case <-ctx.Done():
		case <-s.closing:
		case <-runCtx.Done():
		}
		sub.end()
		cancel()
	}()
	go func() {
		defer s.running.Done()
		defer sub.closeOut()
		if closer, ok := src.(io.Closer); ok {
			// The source was made for this subscription: its connections
			// (a Kafka source's Transport) end with it.
			defer func() {
				if err := closer.Close(); err != nil {
					s.logger.Error("closing the source", err, fields)
				}
			}()
		}
		if ended != nil {
			defer ended()
		}
		if err := c.Run(runCtx); err != nil {
			s.logger.Error("subscription failed", err, fields)
		}
		cancel()
		s.logger.Info("subscription ended", fields)
	}()
	return sub.out, nil
}

// Close ends every subscription (each drains, and its channel is closed)
// and returns when they all have. Subscribe fails after it.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.running.Wait()
	return nil
}

// subscription is one Subscribe: the consumer's handler hands each
// message to the channel and waits for its Ack or Nack.
type subscription struct {
	unmarshaller Unmarshaller // nil: the fields the Publisher writes

	out  chan *message.Message
	done chan struct{} // closed when the subscription ends: nothing more is handed out
	once sync.Once

	mu     sync.RWMutex // held to read while sending on out, to write to close it
	outEnd bool
}

func (sub *subscription) end() { sub.once.Do(func() { close(sub.done) }) }

// closeOut closes the channel once no handler can send on it.
func (sub *subscription) closeOut() {
	sub.end()
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.outEnd {
		sub.outEnd = true
		close(sub.out)
	}
}

// handle is the consumer's handler: the message goes out with the task's
// context; Ack is success, Nack a failure (the retry policy applies); the
// subscription ending first leaves it unacknowledged, to come again.
func (sub *subscription) handle(taskCtx context.Context, m *transport.Message) error {
	// The message's context is the task's, ended once the message is
	// acknowledged, nacked or left (as Watermill's Pub/Subs do).
	ctx, cancel := context.WithCancel(taskCtx)
	defer cancel()
	msg := messageOf(m)
	if sub.unmarshaller != nil {
		var err error
		if msg, err = unmarshal(sub.unmarshaller, m); err != nil {
			return err
		}
	}
	msg.SetContext(ctx)
	sub.mu.RLock()
	if sub.outEnd {
		sub.mu.RUnlock()
		return errEnded
	}
	select {
	case sub.out <- msg:
	case <-sub.done:
		sub.mu.RUnlock()
		return errEnded
	case <-ctx.Done():
		sub.mu.RUnlock()
		return ctx.Err()
	}
	sub.mu.RUnlock()
	select {
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return errNacked
	case <-sub.done:
		return errEnded
	case <-ctx.Done():
		return ctx.Err()
	}
}
