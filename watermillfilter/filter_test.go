package watermillfilter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/watermillfilter"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

const filterInterval = 200 * time.Millisecond

// runLease runs a lease of group name on client until the test ends.
func runLease(t *testing.T, client redis.UniversalClient, name string) *partition.Lease {
	t.Helper()
	l, err := partition.New(client, partition.Options{Name: name, Interval: filterInterval})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// A panicking handler is a failed message, not a dead process: the
// middleware returns a *consumer.PanicError and counts it.
func TestFilterRecoversPanics(t *testing.T) {
	srv := redistest.Start(t)
	l := runLease(t, srv.Client(), "wm-panic")
	if _, err := l.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := watermillfilter.New(l, watermillfilter.Options{})
	h := f.Middleware(func(m *message.Message) ([]*message.Message, error) {
		panic("cannot parse " + string(m.Payload))
	})
	_, err := h(msg("7", []byte("{")))
	var pe *consumer.PanicError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "cannot parse {") {
		t.Fatalf("middleware returned %v; want a *consumer.PanicError with the panic value", err)
	}
	if s := f.Stats(); s.Panics != 1 || s.Failed != 1 || s.InFlight != 0 {
		t.Errorf("stats %+v; want 1 panic, 1 failed, none in flight", s)
	}
	if _, err := f.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(message.NewMessage("u", nil)); !consumer.IsPermanent(err) {
		t.Errorf("a message without its id: %v; want a permanent error", err)
	}
}

// The handler's context ends when the lease runs out: here the worker's
// link to Redis holds every byte, so no renewal comes.
func TestFilterHandlerContextEndsWithTheLease(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.NewLink(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer client.Close()
	l := runLease(t, client, "wm-deadline")
	if _, err := l.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := watermillfilter.New(l, watermillfilter.Options{})
	var heldAtEnd atomic.Bool
	h := f.Middleware(func(m *message.Message) ([]*message.Message, error) {
		<-m.Context().Done()
		_, held := l.Current()
		heldAtEnd.Store(held)
		return nil, m.Context().Err()
	})
	done := make(chan error, 1)
	go func() { _, err := h(msg("1", nil)); done <- err }()
	time.Sleep(20 * time.Millisecond)
	p.Hold()
	defer p.Release()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("handler ended with %v; want its context's deadline", err)
		}
		if heldAtEnd.Load() {
			t.Errorf("the handler's context ended while the lease was still held")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end after the lease lost its store")
	}
}

// At a change of term, handlers of the new term wait until those of the
// old one have returned; one that outlives the old deadline is overdue.
func TestFilterDrainsAtTheEndOfATerm(t *testing.T) {
	srv := redistest.Start(t)
	a := runLease(t, srv.Client(), "wm-drain")
	if _, err := a.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := watermillfilter.New(a, watermillfilter.Options{})
	release := make(chan struct{})
	var oldEnd, newStart atomic.Int64
	slow := f.Middleware(func(m *message.Message) ([]*message.Message, error) {
		<-release // ignores its context: it will be overdue
		oldEnd.Store(time.Now().UnixNano())
		return nil, nil
	})
	slowDone := make(chan struct{})
	go func() { _, _ = slow(msg("0", nil)); close(slowDone) }()
	time.Sleep(20 * time.Millisecond)
	b := runLease(t, srv.Client(), "wm-drain") // the mapping changes: a's term ends
	redistest.WaitFor(t, 10*time.Second, "a group of two", func() bool {
		x, ok1 := a.Current()
		y, ok2 := b.Current()
		return ok1 && ok2 && x.Replicas == 2 && y.Replicas == 2
	})
	next := f.Middleware(func(m *message.Message) ([]*message.Message, error) {
		newStart.Store(time.Now().UnixNano())
		return nil, nil
	})
	go func() {
		time.Sleep(50 * time.Millisecond)
		close(release)
	}()
	for i := range 4 { // one of them is a's
		if _, err := next(msg(string(rune('0'+i)), nil)); err != nil {
			t.Fatal(err)
		}
	}
	<-slowDone
	if newStart.Load() == 0 {
		t.Fatal("no message of the new term was handled")
	}
	if newStart.Load() > oldEnd.Load() {
		t.Errorf("the new term waited for a handler that outlived the old deadline; it must go on without it")
	}
	if s := f.Stats(); s.Overdue != 1 {
		t.Errorf("%d overdue; want 1 (the handler that ignored its context past the old deadline)", s.Overdue)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func msg(k string, p []byte) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), p)
	m.Metadata.Set("id", k)
	return m
}

// Two routers, each with its own subscription and lease: once the group
// is settled every message is handled by exactly one of them.
func TestFilterSplitsTheWorkBetweenRouters(t *testing.T) {
	srv := redistest.Start(t)
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024}, watermill.NopLogger{})
	defer ps.Close()
	var mu sync.Mutex
	handledBy := map[string][]int{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var leases []*partition.Lease
	var filters []*watermillfilter.Filter
	for w := range 2 {
		l, err := partition.New(srv.Client(), partition.Options{Name: "wm", Interval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
		wg.Go(func() { _ = l.Run(ctx) })
		f := watermillfilter.New(l, watermillfilter.Options{})
		filters = append(filters, f)
		r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		r.AddMiddleware(f.Middleware)
		r.AddConsumerHandler(fmt.Sprintf("w%d", w), "tasks", ps, func(m *message.Message) error {
			mu.Lock()
			handledBy[m.Metadata.Get("id")] = append(handledBy[m.Metadata.Get("id")], w)
			mu.Unlock()
			return nil
		})
		wg.Go(func() { _ = r.Run(ctx) })
		<-r.Running()
	}
	redistest.WaitFor(t, 10*time.Second, "a settled group of two", func() bool {
		for _, l := range leases {
			if a, ok := l.Current(); !ok || a.Replicas != 2 {
				return false
			}
		}
		return true
	})
	for i := range 100 {
		if err := ps.Publish("tasks", msg(strconv.Itoa(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 10*time.Second, "every message handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(handledBy) == 100 })
	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Wait()
	for k, ws := range handledBy {
		if len(ws) != 1 {
			t.Errorf("message %s handled by workers %v; want exactly one", k, ws)
		}
	}
	if n := filters[0].Stats().NotOwned + filters[1].Stats().NotOwned; n != 100 {
		t.Errorf("%d messages acknowledged as another's; want 100 (each worker skips the other's half)", n)
	}
}
