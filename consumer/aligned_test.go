package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/presence"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// An aligned log of 12 shards served by a group that goes 3 -> 5 -> 2 ->
// 4 workers, sizes that divide 12 and one that does not: each worker reads
// only the shards its lease can own ids in; where the size divides 12 no
// worker reads a message it does not own; and every task is done exactly
// once, in order, through the clean handovers.
func TestAlignedLogThroughGroupSizes(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		log := memory.NewAlignedLog(12)
		g := newGroup(t, log.Source, consumer.Options{Concurrency: conc, CheckpointInterval: 50 * time.Millisecond},
			func(int, *partition.Lease) consumer.Handler {
				return func(context.Context, *transport.Message) error { return nil }
			})
		const ids = 600
		sizes := []int{3, 5, 2, 4}
		var live []int
		for phase, size := range sizes {
			for len(live) < size {
				live = append(live, g.start())
			}
			for len(live) > size {
				g.stop(live[len(live)-1])
				live = live[:len(live)-1]
			}
			g.settle()
			notOwned := func() (n int64) {
				for _, w := range live {
					n += g.worker(w).c.Stats().NotOwned
				}
				return n
			}
			before := notOwned()
			for x := range ids {
				log.Append(strconv.Itoa(x), []byte(strconv.Itoa(x)+"/"+strconv.Itoa(phase)))
			}
			waitFor(t, "the phase's tasks", func() bool { return g.check(ids, phase+1).missing == 0 })
			// Each worker reads the shards its lease can own ids in. Polled:
			// on a busy machine a worker can be between terms (reading
			// nothing) at any one look.
			for _, w := range live {
				gw := g.worker(w)
				var got, want []int
				var a partition.Assignment
				ok := waitUntil(10*time.Second, func() bool {
					var held bool
					a, held = gw.l.Current()
					got, want = gw.c.Reading(), a.ShardsOf(12)
					return held && a.Replicas == size && slices.Equal(got, want)
				})
				if !ok {
					t.Errorf("%d workers: %d of %d reads shards %v; want %v", size, a.Index, a.Replicas, got, want)
				}
			}
			if extra := notOwned() - before; 12%size == 0 && extra != 0 {
				t.Errorf("%d workers (a divisor of 12): %d messages read by a worker that does not own them; want 0", size, extra)
			} else {
				t.Logf("figures: %d workers over 12 aligned shards: %d messages read and not owned for %d tasks (read amplification %d)",
					size, extra, ids, partition.ReadAmplification(12, size))
			}
		}
		// The presence records say which shards each worker reads.
		waitFor(t, "presence records of the shards read", func() bool {
			rs, err := presence.Read(context.Background(), server(t).Client(), g.name)
			if err != nil {
				return false
			}
			n := 0
			for _, r := range rs {
				a := partition.Assignment{Index: r.Index, Replicas: r.Replicas}
				if r.Held && r.Replicas == 4 && r.Of == 12 && slices.Equal(r.Shards, a.ShardsOf(12)) {
					n++
				}
			}
			return n == 4
		})
		for _, w := range live {
			g.stop(w)
		}
		g.exactlyOnce(ids, len(sizes))
	})
}

// An aligned log that grows shards while its group changes size: 12 ->
// 16 -> 24 shards as the group goes 3 -> 5 -> 2, producers placing by
// the new count as soon as it grows. Before the ledger knew where a log
// grew, the workers kept reading the old shards by the old count, and 96
// of 288 tasks written over three phases (on Redis streams) were never
// done. Now every task is done exactly once, in order; once the shards
// below the cuts are done with, each worker reads only the shards its
// share can own ids in by the new count.
func TestAlignedLogGrowsShards(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		log := memory.NewAlignedLog(12)
		g := newGroup(t, log.Source, consumer.Options{Concurrency: conc, CheckpointInterval: 50 * time.Millisecond, DescribeInterval: 100 * time.Millisecond},
			func(int, *partition.Lease) consumer.Handler {
				return func(context.Context, *transport.Message) error { return nil }
			})
		const ids = 300
		shapes := []struct{ shards, size int }{{12, 3}, {16, 5}, {24, 2}}
		var live []int
		for phase, sh := range shapes {
			log.Grow(sh.shards)
			// Tasks before the group changes and after: some land below
			// the cuts, some above.
			for x := range ids / 2 {
				log.Append(strconv.Itoa(x), []byte(strconv.Itoa(x)+"/"+strconv.Itoa(phase)))
			}
			for len(live) < sh.size {
				live = append(live, g.start())
			}
			for len(live) > sh.size {
				g.stop(live[len(live)-1])
				live = live[:len(live)-1]
			}
			g.settle()
			for x := ids / 2; x < ids; x++ {
				log.Append(strconv.Itoa(x), []byte(strconv.Itoa(x)+"/"+strconv.Itoa(phase)))
			}
			waitFor(t, "the phase's tasks", func() bool { return g.check(ids, phase+1).missing == 0 })
		}
		waitFor(t, "every worker reading only its share's shards of 24", func() bool {
			for _, w := range live {
				a, ok := g.worker(w).l.Current()
				if !ok || !slices.Equal(g.worker(w).c.Reading(), a.ShardsOf(24)) {
					return false
				}
			}
			return true
		})
		for _, w := range live {
			g.stop(w)
		}
		g.exactlyOnce(ids, len(shapes))
	})
}

// An aligned log whose producers do not place as it declares: some keys
// written to other shards (a producer in another language hashing keys
// its own way), and, after the log grew, some by the old count (a
// producer not yet switched). Before, a worker read only its shards and
// counted such a task as another index's: 6,580 of 10,000 records never
// handled, with no warning. Now the first one is said at Error naming its
// shard and key, counted, and the group reads what the owner must, so
// every task is done exactly once, in order. (Late: the log grows from 12
// to 20 shards under a group of 5, whose owners of an id placed by 12 do
// not read its shard by 20, since 5 divides 20 and not 12.)
func TestMisplacedTasksOfAnAlignedLogAreNotSkipped(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) {
			log := memory.NewAlignedLog(12)
			rec := &errorLog{}
			g := newGroup(t, log.Source, consumer.Options{Concurrency: 4, CheckpointInterval: 50 * time.Millisecond, DescribeInterval: 100 * time.Millisecond, Logger: slog.New(rec)},
				func(int, *partition.Lease) consumer.Handler {
					return func(context.Context, *transport.Message) error { return nil }
				})
			const ids = 200
			live := []int{g.start(), g.start(), g.start()}
			if late {
				live = append(live, g.start(), g.start())
			}
			g.settle()
			for x := range ids {
				log.Append(strconv.Itoa(x), []byte(strconv.Itoa(x)+"/0"))
			}
			waitFor(t, "the first tasks", func() bool { return g.check(ids, 1).missing == 0 })
			if late {
				log.Grow(20)
				ledger := checkpoint.NewRedis(server(t).Client(), g.name)
				waitFor(t, "the checkpoints to follow the log to 20 shards", func() bool {
					st, err := ledger.ReadLow(context.Background())
					return err == nil && st.Current != nil && st.Current.Aligned == 20
				})
			}
			for x := range ids {
				k := strconv.Itoa(x)
				switch {
				case late && x%5 == 0: // by the old count
					log.AppendTo(int(transport.TaskID(k)%12), k, []byte(k+"/1"))
				case !late && x%5 == 0: // its own way
					log.AppendTo(int(transport.KeyHash(k)%12), k, []byte(k+"/1"))
				default:
					log.Append(k, []byte(k+"/1"))
				}
			}
			waitFor(t, "every task", func() bool { return g.check(ids, 2).missing == 0 })
			var misplaced int64
			for _, w := range live {
				misplaced += g.worker(w).c.Stats().Misplaced
			}
			if misplaced == 0 {
				t.Errorf("no misplaced task counted")
			}
			msgs := rec.all()
			if len(msgs) == 0 || !strings.Contains(msgs[0], "shard its id") {
				t.Errorf("records at Error %q; want the misplaced task said", msgs)
			}
			t.Logf("figures: %d misplaced tasks counted; %d records at Error, the first %q", misplaced, len(msgs), msgs[0])
			for _, w := range live {
				g.stop(w)
			}
			g.exactlyOnce(ids, 2)
		})
	}
}

// A late producer after a growth, with no fault anywhere: the log grows
// from 2 to 4 shards under a group of 2 while one producer keeps placing
// even ids by 2 (every id 2 mod 4 is then misplaced in shard 0, read by
// one worker, which realigns) and another places odd ids by 4, for the
// other worker, which meets no late entry. Before, the second worker was
// left on an old epoch that the first one's realigns dropped from the
// history: its next write was moved, and it redid what it had done since
// (94 of 3,600 tasks twice), while every late entry made an epoch (252
// after 6 s). Now every task is done once, and the history stays small.
func TestALateProducerAfterAGrowthRepeatsNothing(t *testing.T) {
	log := memory.NewAlignedLog(2)
	g := newGroup(t, log.Source, consumer.Options{Concurrency: 4, DescribeInterval: 100 * time.Millisecond},
		func(int, *partition.Lease) consumer.Handler {
			return func(context.Context, *transport.Message) error { return nil }
		})
	g.start()
	g.start()
	g.settle()
	client := server(t).Client()
	ledger := checkpoint.NewRedis(client, g.name)
	if err := client.Do(context.Background(), "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	log.Grow(4)
	waitFor(t, "the checkpoints to follow the log to 4 shards", func() bool {
		st, err := ledger.ReadLow(context.Background())
		return err == nil && st.Current != nil && st.Current.Aligned == 4
	})
	const tasks = 3600
	var epochs, fields int
	for x := range tasks {
		k := strconv.Itoa(x)
		switch {
		case x%2 == 0:
			log.AppendTo(x%2, k, []byte(k+"/0")) // by the old count
		default:
			log.Append(k, []byte(k+"/0"))
		}
		if x%60 == 59 {
			time.Sleep(100 * time.Millisecond) // 6 s in all
			if st, err := ledger.ReadLow(context.Background()); err == nil {
				epochs = max(epochs, len(st.History))
			}
			n, _ := client.HLen(context.Background(), checkpoint.Key(g.name)).Result()
			fields = max(fields, int(n))
		}
	}
	waitFor(t, "every task", func() bool { return g.check(tasks, 1).missing == 0 })
	time.Sleep(300 * time.Millisecond)
	tl := g.check(tasks, 1)
	if tl.repeats > 0 {
		t.Errorf("%d of %d tasks done twice with no fault; want 0", tl.repeats, tasks)
	}
	var last int64
	if st, err := ledger.ReadLow(context.Background()); err == nil {
		last = st.Current.N
	}
	var misplaced int64
	for _, w := range []int{1, 2} {
		misplaced += g.worker(w).c.Stats().Misplaced
	}
	t.Logf("figures: %d tasks, half of them placed by the old count after the growth (%d misplaced met, %d epochs made): %d done twice; at most %d epochs in the history, %d fields in the head", tasks, misplaced, last, tl.repeats, epochs, fields)
	if epochs > checkpoint.MaxHistory {
		t.Errorf("the history held %d epochs; want at most %d", epochs, checkpoint.MaxHistory)
	}
	// No script call blocked Redis for long meanwhile.
	logs, err := client.SlowLogGet(context.Background(), 128).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		if l.Duration > 20*time.Millisecond {
			t.Errorf("%v took %v; want every call within 20ms", l.Args[:min(len(l.Args), 2)], l.Duration)
		}
	}
}
