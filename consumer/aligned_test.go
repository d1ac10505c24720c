package consumer_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

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
			for _, w := range live {
				gw := g.worker(w)
				a, ok := gw.l.Current()
				if !ok {
					continue
				}
				if got, want := gw.c.Reading(), a.ShardsOf(12); !slices.Equal(got, want) {
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
