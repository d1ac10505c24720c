package delivery

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The exactly-once scenario on a JetStream stream: ordered consumers from
// the ledger's stream sequences.
func TestJetStreamExactlyOnceThroughCleanRebalances(t *testing.T) {
	ns := natstest.Start(t)
	js, err := jetstream.New(ns.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox"}}); err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, srv: redistest.Start(t), opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}}
	f.src = func() transport.Source {
		wjs, err := jetstream.New(ns.Conn())
		if err != nil {
			t.Fatal(err)
		}
		src, err := natsjs.New(wjs, "OUTBOX", natsjs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	pub := ns.Conn()
	exactlyOnce(t, f, func(k string, p []byte) {
		m := nats.NewMsg("outbox")
		m.Header.Set("id", k)
		m.Data = p
		if err := pub.PublishMsg(m); err != nil { // JetStream stores core publishes in order
			t.Error(err)
		}
	})
}

// Core NATS keeps nothing: what arrives while the worker holds nothing is
// read, counted as Unheld and dropped; what arrives while it holds is
// handled.
func TestNATSCoreCountsWhatArrivesUnowned(t *testing.T) {
	ns := natstest.Start(t)
	srv := redistest.Start(t)
	l, err := partition.New(srv.Client(), partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	src, _ := natscore.New(ns.Conn(), "tasks", natscore.Options{})
	var handled atomic.Int64
	c, err := consumer.New(l, src, func(ctx context.Context, m *transport.Message) error { handled.Add(1); return nil }, consumer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	pub := ns.Conn()
	publish := func(from, n int) {
		for i := from; i < from+n; i++ {
			m := nats.NewMsg("tasks")
			m.Header.Set("id", strconv.Itoa(i))
			if err := pub.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		_ = pub.Flush()
	}
	time.Sleep(50 * time.Millisecond) // subscribed; the lease needs two intervals more
	publish(0, 100)
	redistest.WaitFor(t, 10*time.Second, "100 messages read while holding nothing", func() bool { return c.Stats().Unheld == 100 })
	if _, err := l.Next(ctx); err != nil {
		t.Fatal(err)
	}
	// Held is not yet served: on a busy machine the term starts a moment
	// after the lease is granted, and what arrives between is unheld.
	redistest.WaitFor(t, 10*time.Second, "the term served", func() bool { return c.Reading() != nil })
	publish(100, 100)
	redistest.WaitFor(t, 10*time.Second, "100 messages handled under the lease", func() bool { return handled.Load() == 100 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Unheld != 100 || st.Handled != 100 {
		t.Fatalf("Stats = %+v; want 100 unowned (lost, and counted), 100 handled", st)
	}
}

// A message a source cannot make a task of (a stream entry without its id
// field) reaches the failure policy with an error naming it, never the
// handler, and is not dropped silently.
func TestEntryWithoutIDGoesToTheFailurePolicy(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	bad, _ := c.XAdd(ctx, &redis.XAddArgs{Stream: "in", Values: []any{"payload", "no id"}}).Result()
	c.XAdd(ctx, &redis.XAddArgs{Stream: "in", Values: []any{"id", "7", "payload", "fine"}})
	l, _ := partition.New(srv.Client(), partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond})
	src, _ := redisstream.New(srv.Client(), "in", redisstream.Options{})
	var handled atomic.Int64
	dead := make(chan error, 1)
	cons, err := consumer.New(l, src, func(ctx context.Context, m *transport.Message) error { handled.Add(1); return nil }, consumer.Options{
		MaxAttempts: 1,
		DeadLetter: func(ctx context.Context, m *transport.Message, err error) error {
			dead <- err
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(rctx) }()
	select {
	case err := <-dead:
		if !strings.Contains(err.Error(), bad) {
			t.Errorf("dead letter error %q does not name entry %s", err, bad)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the entry without an id never reached the failure policy")
	}
	redistest.WaitFor(t, 10*time.Second, "the good entry handled", func() bool { return handled.Load() == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
