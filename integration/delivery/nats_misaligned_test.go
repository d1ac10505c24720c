package delivery

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nats-io/nats.go"
)

// NATS core with a subject per shard, declared aligned, under a group of
// two (each subscribes to two of the four subjects), while a producer
// publishes to the wrong subjects. Before, every such message reached only
// the worker that does not own it and was dropped as another index's,
// with no warning. Now the first is said at Error and counted, the group
// records it (consumer.MisalignedKey) and every worker subscribes to every
// subject, so each message reaches its owner; once cleared, the workers
// subscribe to their own subjects again. (NATS core keeps nothing: what is
// published while the workers resubscribe may be lost, as any message
// published while no one listens.)
func TestNATSCoreMisalignedSubjectsFallBackToEverySubject(t *testing.T) {
	ns := natstest.Start(t)
	srv := redistest.Start(t)
	group := groupName(t)
	var mu sync.Mutex
	handled := map[string]int{}
	wrongOwner := 0
	type worker struct {
		c      *consumer.Consumer
		cancel context.CancelFunc
		done   chan error
	}
	var workers []worker
	for range 2 {
		l, err := partition.New(srv.Client(), partition.Options{Name: group, Interval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		src, err := natscore.New(ns.Conn(), "tasks", natscore.Options{Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		c, err := consumer.New(l, src, func(ctx context.Context, m *transport.Message) error {
			a, _ := consumer.AssignmentFromContext(ctx)
			mu.Lock()
			defer mu.Unlock()
			handled[m.Key]++
			if int(transport.TaskID(m.Key)%uint64(a.Replicas)) != a.Index {
				wrongOwner++
			}
			return nil
		}, consumer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		w := worker{c: c, cancel: cancel, done: make(chan error, 1)}
		go func() { w.done <- c.Run(ctx) }()
		workers = append(workers, w)
	}
	defer func() {
		for _, w := range workers {
			w.cancel()
			if err := <-w.done; err != nil {
				t.Error(err)
			}
		}
	}()
	pub := ns.Conn()
	batch := 0
	// publish sends a batch of 40 keys, each to its own subject or (wrong)
	// to the next one, and reports whether all of them were handled.
	publish := func(wrong bool) bool {
		batch++
		keys := make([]string, 40)
		for i := range keys {
			keys[i] = strconv.Itoa(batch*1000 + i)
			shard := int(transport.TaskID(keys[i]) % 4)
			if wrong {
				shard = (shard + 1) % 4 // the other worker's subject
			}
			m := nats.NewMsg(natscore.ShardSubject("tasks", shard))
			m.Header.Set("id", keys[i])
			if err := pub.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		_ = pub.Flush()
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			if handled[k] == 0 {
				return false
			}
		}
		return true
	}
	redistest.WaitFor(t, 20*time.Second, "a batch placed right, all handled (both workers serving)", func() bool { return publish(false) })
	if _, set, _ := consumer.ReadMisaligned(context.Background(), srv.Client(), group); set {
		t.Fatal("misaligned before any misplaced message")
	}
	redistest.WaitFor(t, 20*time.Second, "a batch of misplaced messages, all handled (every subject subscribed)", func() bool { return publish(true) })
	mis, set, err := consumer.ReadMisaligned(context.Background(), srv.Client(), group)
	if err != nil || !set || mis.Destination == "" || mis.Key == "" || mis.BelongsTo == mis.Shard {
		t.Fatalf("the group's misalignment: %+v, set %v, %v; want the first misplaced message", mis, set, err)
	}
	var misplaced int64
	for _, w := range workers {
		misplaced += w.c.Stats().Misplaced
	}
	if misplaced == 0 {
		t.Error("no misplaced message counted")
	}
	if _, err := consumer.ClearMisaligned(context.Background(), srv.Client(), group); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 20*time.Second, "a batch placed right after the clear, all handled", func() bool { return publish(false) })
	mu.Lock()
	defer mu.Unlock()
	for k, n := range handled {
		if n != 1 {
			t.Errorf("key %s handled %d times", k, n)
		}
	}
	if wrongOwner != 0 {
		t.Errorf("%d messages handled by a worker that does not own them", wrongOwner)
	}
	t.Logf("figures: %d misplaced messages counted; the first %+v; %d batches published", misplaced, mis, batch)
}
