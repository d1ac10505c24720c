package consumer_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
)

// fencedSet is a sink fenced by token, as docs/handlers.md shows: it refuses a
// write whose token is below the one stored for the task.
var fencedSet = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) < cur then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1`)

// A handler that outlives its term (it ignores its context, as if paused)
// writes its effect late, after the task's next owner wrote it: the sink,
// fed the token each handler read from its own context, refuses the late
// write.
func TestHandlerTokenFencesALateWrite(t *testing.T) {
	client := server(t).Client()
	log := memory.NewLog(1)
	release := make(chan struct{})
	blocking := make(chan struct{})
	var first atomic.Bool
	var mu sync.Mutex
	type write struct {
		token    int64
		accepted bool
	}
	var writes []write
	sink := func(ctx context.Context) {
		a, ok := consumer.AssignmentFromContext(ctx)
		if !ok {
			t.Error("AssignmentFromContext found nothing in a handler's context")
			return
		}
		n, err := fencedSet.Run(context.Background(), client, []string{"fenced-sink"}, "task-5", a.Token).Int()
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		writes = append(writes, write{a.Token, n == 1})
		mu.Unlock()
	}
	g := newGroup(t, log.Source, consumer.Options{ShutdownTimeout: time.Second}, func(int, *partition.Lease) consumer.Handler {
		return func(ctx context.Context, m *transport.Message) error {
			if first.CompareAndSwap(false, true) {
				close(blocking)
				<-release // paused past its term
			}
			sink(ctx)
			return nil
		}
	})
	g.start()
	g.settle()
	log.Append("5", []byte("5/0"))
	<-blocking
	g.start() // the mapping changes; the task's next owner does it again
	waitFor(t, "the next owner's write", func() bool { mu.Lock(); defer mu.Unlock(); return len(writes) == 1 })
	close(release)
	waitFor(t, "the late write", func() bool { mu.Lock(); defer mu.Unlock(); return len(writes) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if !writes[0].accepted || writes[1].accepted || writes[1].token >= writes[0].token {
		t.Errorf("writes %+v; want the next owner's accepted and the late one, with a smaller token, refused", writes)
	}
	if _, ok := consumer.AssignmentFromContext(context.Background()); ok {
		t.Error("AssignmentFromContext found an assignment in a plain context")
	}
}
