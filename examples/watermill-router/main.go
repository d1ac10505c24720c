// Command watermill-router is a Watermill Router on nandi's Subscriber
// (watermillpubsub): two routers of one consumer group split the orders
// topic (a Redis stream) by order id, each order's events in the order
// they were published, with Watermill's own Retry and PoisonQueue
// middleware in front of the handler. A transient failure is retried in
// place; an event that keeps failing goes to the poison topic, and the
// order's later events then proceed. It runs on an embedded Redis
// (miniredis) by default; -redis uses a real one.
//
//	cd examples && go run ./watermill-router
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/examples/internal/demoredis"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
	"github.com/redis/go-redis/v9"
)

const (
	ordersTopic = "orders"
	poisonTopic = "orders.poison"
	group       = "invoicing"
)

// events are the steps of every order, published in this order.
var events = []string{"created", "paid", "shipped"}

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded Redis)")
	orders := flag.Int("orders", 60, "orders to publish, each with the events "+fmt.Sprint(events))
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *redisURL, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "watermill-router:", err)
		os.Exit(1)
	}
}

// poisonedOrder's "paid" event is refused by the handler every time: it
// ends on the poison topic. Every tenth order's "created" fails once.
const poisonedOrder = 13

func run(ctx context.Context, out io.Writer, redisURL string, orders int) error {
	ropts, stopRedis, err := demoredis.Options(redisURL)
	if err != nil {
		return err
	}
	defer stopRedis()
	client := redis.NewClient(ropts)
	defer client.Close()
	source := func(topic string) (*redisstream.Source, error) {
		return redisstream.New(client, topic, redisstream.Options{})
	}
	publisher, err := watermillpubsub.NewPublisher(watermillpubsub.PublisherConfig{
		Publisher: func(topic string) (transport.Publisher, error) {
			src, err := source(topic)
			if err != nil {
				return nil, err
			}
			return src.Producer(redisstream.ProducerOptions{})
		},
		// An order's events share its id as their key: one router at a
		// time handles an order, its events in order.
		Key: func(_ string, msg *message.Message) (string, error) {
			if id := msg.Metadata.Get("order"); id != "" {
				return id, nil
			}
			return "", fmt.Errorf("message %s has no order metadata", msg.UUID)
		},
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer publisher.Close()
	newSubscriber := func(consumerGroup string) (*watermillpubsub.Subscriber, error) {
		return watermillpubsub.NewSubscriber(watermillpubsub.SubscriberConfig{
			Client:        client,
			Source:        func(topic string) (transport.Source, error) { return source(topic) },
			ConsumerGroup: consumerGroup,
			// A short interval, so that the second router holds its share
			// within a second; production keeps the default.
			Lease:    partition.Options{Interval: 200 * time.Millisecond},
			Consumer: consumer.Options{Concurrency: 8},
		}, watermill.NopLogger{})
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := newBook()
	var wg sync.WaitGroup
	for r := 1; r <= 2; r++ {
		subscriber, err := newSubscriber(group)
		if err != nil {
			return err
		}
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		poison, err := middleware.PoisonQueue(publisher, poisonTopic)
		if err != nil {
			return err
		}
		// PoisonQueue outside Retry: an event goes to the poison topic
		// once its retries are spent, and is then acknowledged, so that
		// the order's later events proceed.
		router.AddMiddleware(poison, middleware.Retry{MaxRetries: 2, InitialInterval: 10 * time.Millisecond}.Middleware)
		router.AddConsumerHandler("send-invoice", ordersTopic, subscriber, func(msg *message.Message) error {
			return b.handle(r, msg)
		})
		wg.Go(func() {
			if err := router.Run(ctx); err != nil {
				fmt.Fprintf(out, "router %d: %v\n", r, err)
			}
		})
		<-router.Running()
		defer func() { _ = subscriber.Close() }()
	}

	// The poison topic, read by a group of its own.
	audit, err := newSubscriber("audit")
	if err != nil {
		return err
	}
	defer audit.Close()
	poisoned, err := audit.Subscribe(ctx, poisonTopic)
	if err != nil {
		return err
	}

	for i := range orders {
		for _, event := range events {
			msg := message.NewMessage(watermill.NewUUID(), []byte(event))
			msg.Metadata.Set("order", strconv.Itoa(i))
			if err := publisher.Publish(ordersTopic, msg); err != nil {
				return err
			}
		}
		time.Sleep(5 * time.Millisecond) // orders arrive over a moment: the second router joins meanwhile
	}

	var dead *message.Message
	select {
	case dead = <-poisoned:
		dead.Ack()
	case <-time.After(30 * time.Second):
		return errors.New("nothing reached the poison topic in 30s")
	}
	want := orders*len(events) - 1
	if err := b.wait(want, 30*time.Second); err != nil {
		return err
	}
	cancel()
	wg.Wait()

	if err := b.check(orders); err != nil {
		return err
	}
	for r := 1; r <= 2; r++ {
		fmt.Fprintf(out, "router %d handled %d events of %d orders\n", r, b.byRouter[r], len(b.ordersOf(r)))
	}
	fmt.Fprintf(out, "retried in place: %d transient failures (Retry middleware)\n", b.transient)
	fmt.Fprintf(out, "poisoned: order %s %q after %d attempts: %s (PoisonQueue middleware, read back from %s)\n",
		dead.Metadata.Get("order"), dead.Payload, b.attempts[fmt.Sprintf("%d/paid", poisonedOrder)],
		dead.Metadata.Get(middleware.ReasonForPoisonedKey), poisonTopic)
	fmt.Fprintf(out, "all %d orders' events handled once each, in order per order, by two routers of one group\n", orders)
	return nil
}

// book records what the handlers did.
type book struct {
	mu        sync.Mutex
	next      map[string]int // order -> index in events of the next event
	handled   int
	byRouter  map[int]int
	routerOf  map[string]map[int]bool // order -> routers that handled its events
	attempts  map[string]int          // "order/event" -> attempts
	transient int
	errs      []error
}

func newBook() *book {
	return &book{next: map[string]int{}, byRouter: map[int]int{}, routerOf: map[string]map[int]bool{}, attempts: map[string]int{}}
}

var errDeclined = errors.New("card declined: will not succeed on retry")

// handle is the handler: it sends an order's invoice step. The effect's
// boundary is the line that records the event as handled (here: sent):
// up to it, an error means nothing was done and the event may come
// again; after it, the handler returns nil whatever else fails.
func (b *book) handle(router int, msg *message.Message) error {
	order, event := msg.Metadata.Get("order"), string(msg.Payload)
	b.mu.Lock()
	defer b.mu.Unlock()
	key := order + "/" + event
	b.attempts[key]++
	if order == strconv.Itoa(poisonedOrder) && event == "paid" {
		return errDeclined
	}
	if n, _ := strconv.Atoi(order); n%10 == 3 && event == "created" && b.attempts[key] == 1 {
		b.transient++
		return errors.New("invoice service unavailable (transient)")
	}
	// Each order's events come in the order they were published; the
	// poisoned one is skipped by the poison queue, not lost.
	want := b.next[order]
	if order == strconv.Itoa(poisonedOrder) && want == 1 {
		want = 2
	}
	if events[want%len(events)] != event {
		b.errs = append(b.errs, fmt.Errorf("order %s: %s handled when %s was next", order, event, events[want%len(events)]))
	}
	// The effect: the invoice step is sent and recorded. Nothing after
	// this line may fail the message.
	b.next[order] = want + 1
	b.handled++
	b.byRouter[router]++
	if b.routerOf[order] == nil {
		b.routerOf[order] = map[int]bool{}
	}
	b.routerOf[order][router] = true
	return nil
}

func (b *book) wait(want int, limit time.Duration) error {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b.mu.Lock()
		n := b.handled
		b.mu.Unlock()
		if n >= want {
			return nil
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Errorf("%d of %d events handled in %s", b.handled, want, limit)
}

// check asserts that every event was handled once, in order.
func (b *book) check(orders int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) > 0 {
		return errors.Join(b.errs...)
	}
	for i := range orders {
		if got := b.next[strconv.Itoa(i)]; got != len(events) {
			return fmt.Errorf("order %d: %d events handled; want %d", i, got, len(events))
		}
	}
	if want := orders*len(events) - 1; b.handled != want {
		return fmt.Errorf("%d events handled; want %d (each once, the poisoned one on its topic)", b.handled, want)
	}
	return nil
}

// ordersOf lists the orders router handled events of.
func (b *book) ordersOf(router int) []string {
	var ids []string
	for id, rs := range b.routerOf {
		if rs[router] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}
