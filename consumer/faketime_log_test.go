package consumer_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nandi-go/nandi/checkpoint/memledger"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// A log's consumer on fake time: an in-memory lease, an in-memory log and
// the checkpoint ledger in memory (checkpoint/memledger: the Redis
// ledger's own scripts), so that marks, handovers and their fencing run to
// the nanosecond of the fake clock in milliseconds of the machine's.
//
// A worker stopped with two tasks unfinished (their handlers ignore their
// context: it gives up on them at ShutdownTimeout) writes marks that name
// both, the one at the watermark and the one past it (Mark.Undone); the
// next worker does both again, and nothing else twice. A mark that left
// out Undone (a seeded bug in book.go's mark) would have the successor
// skip the second: this test fails on it, in about a tenth of a second.
func TestAStoppedWorkersUnfinishedTasksAreDoneByTheNextOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, ledgers, log := partition.NewMemoryGroup(), memledger.New(), memory.NewLog(1)
		var mu sync.Mutex
		done := map[string]int{}
		release := make(chan struct{})
		start := func(stuck bool) (*consumer.Consumer, context.CancelFunc, chan error) {
			l, err := partition.NewInMemory(reg, partition.Options{Name: "log", Interval: time.Second, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			c, err := consumer.New(l, log.Source(), func(ctx context.Context, m *transport.Message) error {
				if stuck && strings.HasPrefix(m.Key, "stuck") {
					<-release // ignores its context
					return nil
				}
				mu.Lock()
				done[m.Key]++
				mu.Unlock()
				return nil
			}, consumer.Options{Concurrency: 4, Checkpoints: ledgers.Ledger("log"), CheckpointInterval: 100 * time.Millisecond,
				ShutdownTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			out := make(chan error, 1)
			go func() { out <- c.Run(ctx) }()
			return c, stop, out
		}
		a, stopA, doneA := start(true)
		for range 100 {
			if a.Reading() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, k := range []string{"stuck-1", "stuck-2", "x1", "x2", "x3"} {
			log.Append(k, nil)
		}
		time.Sleep(time.Second) // the three done, the two stuck, marks written
		stopA()
		<-doneA
		close(release) // its handlers return, too late to count

		_, stopB, doneB := start(false)
		for range 600 {
			mu.Lock()
			n := done["stuck-1"] + done["stuck-2"]
			mu.Unlock()
			if n == 2 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		stopB()
		<-doneB
		mu.Lock()
		defer mu.Unlock()
		for _, k := range []string{"stuck-1", "stuck-2", "x1", "x2", "x3"} {
			if done[k] != 1 {
				t.Errorf("%s done %d times by the workers that finished it; want 1 (all: %v)", k, done[k], done)
			}
		}
	})
}
