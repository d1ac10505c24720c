package consumer_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// One failing id never stops the others, whatever MaxPending: 10,000
// tasks of id 7 wait behind its first, which fails until told to succeed,
// with MaxPending 8; every other id's task is done meanwhile, the
// checkpoint lists every task of 7 that waits, a worker joins (a clean
// handover) and then 7 recovers: every task, 7's included, done exactly
// once, in order. Before, no other id's task was done at all: 7's waiting
// tasks filled MaxPending and intake stopped.
func TestFailingIDNeverStopsOtherIDs(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		log := memory.NewLog(1)
		var failing atomic.Bool
		failing.Store(true)
		var attempts atomic.Int64
		g := newGroup(t, log.Source, consumer.Options{Concurrency: conc, MaxPending: 8, RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond,
			CheckpointInterval: 50 * time.Millisecond},
			func(int, *partition.Lease) consumer.Handler {
				return func(ctx context.Context, m *transport.Message) error {
					if m.Key == "7" && failing.Load() {
						attempts.Add(1)
						return errors.New("always fails, for now")
					}
					return nil
				}
			})
		for range 2 {
			g.start()
		}
		g.settle()
		const waiting, ids = 10000, 300
		for i := range waiting + 1 {
			log.Append("7", []byte("7/"+strconv.Itoa(i)))
		}
		for x := range ids {
			if x != 7 {
				log.Append(strconv.Itoa(x), []byte(strconv.Itoa(x)+"/0"))
			}
		}
		waitFor(t, "every other id's task while 7 fails", func() bool { return g.check(ids, 1, "7").missing == 0 })
		if attempts.Load() == 0 {
			t.Fatal("7/0 was never attempted")
		}

		// The holder of 7 lists every task of 7 as unfinished: Low at 7/0,
		// the 10,000 others in Undone.
		ledger := checkpoint.NewRedis(server(t).Client(), g.name)
		waitFor(t, "a checkpoint that lists 7's waiting tasks", func() bool {
			st, err := ledger.Read(context.Background())
			if err != nil || st.Current == nil {
				return false
			}
			m := st.Current.Mark(0, int(7%uint64(st.Current.R)))
			return m.Low == transport.Offset(0) && len(m.Undone) == waiting
		})
		var held, waitingNow int64
		for w := 1; w <= 2; w++ {
			s := g.worker(w).c.Stats()
			held, waitingNow = max(held, s.Pending), max(waitingNow, s.Waiting)
		}
		if held > 8 || waitingNow != waiting {
			t.Errorf("the holder of 7: Pending %d, Waiting %d; want at most MaxPending (8) held whole and %d waiting as positions", held, waitingNow, waiting)
		}

		// A clean handover while 7 fails, then 7 recovers.
		g.start()
		g.settle()
		failing.Store(false)
		waitFor(t, "all of 7's tasks once it recovers", func() bool { return g.countKey("7") >= waiting+1 })
		time.Sleep(3 * hostileInterval) // anything done twice shows up now
		for w := range 3 {
			g.stop(w + 1)
		}
		g.exactlyOnce(ids, 1, "7")
		g.keyExactlyOnceInOrder("7", waiting+1)
	})
}
