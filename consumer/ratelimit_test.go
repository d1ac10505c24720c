package consumer_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// A group limited to GroupRate handler calls a second stays within it
// through 3 -> 5 -> 2 workers, over every sliding window of a second,
// with no coordinator (each worker enforces GroupRate/Replicas of its
// term). A worker that kept its old share at a change of mapping
// (3 -> 5: 5 x 100/s), or enforced the whole rate alone, would break the
// bound; none waiting would run thousands a second. The rate used while
// settled is a figure here (a busy machine lowers it); that it is used in
// full is TestGroupRateIsUsedInFullOnFakeTime's.
func TestGroupRateHoldsThroughMembershipChanges(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		const (
			groupRate  = 300.0
			groupBurst = 30
			window     = time.Second
		)
		log := memory.NewLog(1)
		for x := range 20_000 {
			log.Append(strconv.Itoa(x%2000), []byte(strconv.Itoa(x)))
		}
		var (
			mu     sync.Mutex
			starts []time.Time
		)
		g := newGroup(t, log.Source, consumer.Options{Concurrency: conc, GroupRate: groupRate, GroupBurst: groupBurst},
			func(int, *partition.Lease) consumer.Handler {
				return func(context.Context, *transport.Message) error {
					mu.Lock()
					starts = append(starts, time.Now())
					mu.Unlock()
					return nil
				}
			})
		startsIn := func(from, to time.Time) int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, s := range starts {
				if !s.Before(from) && s.Before(to) {
					n++
				}
			}
			return n
		}
		var live []int
		for _, size := range []int{3, 5, 2} {
			for len(live) < size {
				live = append(live, g.start())
			}
			for len(live) > size {
				g.stop(live[len(live)-1])
				live = live[:len(live)-1]
			}
			g.settle()
			// Every worker serving its term, not only holding its lease: a
			// term may wait for its ledger at the change (the fenced
			// handoff), and a worker not serving yet would lower the rate
			// measured for a reason that is not the limit's.
			handled := map[int]int64{}
			for _, w := range live {
				handled[w] = g.worker(w).c.Stats().Handled
			}
			waitFor(t, "every worker to serve", func() bool {
				for _, w := range live {
					if g.worker(w).c.Stats().Handled == handled[w] {
						return false
					}
				}
				return true
			})
			from := time.Now()
			time.Sleep(2 * time.Second)
			to := time.Now()
			got := float64(startsIn(from, to)) / to.Sub(from).Seconds()
			// A figure, not an assertion: a busy machine runs fewer calls
			// than the rate allows. That the rate is used in full, at
			// every size, is TestGroupRateIsUsedInFullOnFakeTime's.
			t.Logf("figures: %d workers (Concurrency %d), GroupRate %v: %.0f handler calls a second (%.0f%% of it) while settled",
				size, conc, groupRate, got, 100*got/groupRate)
		}
		for _, w := range live {
			g.stop(w)
		}

		// Every sliding window of a second: at most the rate, the group's
		// burst, the burst of the terms begun within it (a term's bucket
		// starts full: at most the group's burst again), and a tenth of a
		// second of the rate for calls a busy machine ran late.
		mu.Lock()
		ts := slices.Clone(starts)
		mu.Unlock()
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		limit := int(groupRate*window.Seconds()) + 2*groupBurst + int(groupRate/10)
		peak, at := 0, time.Time{}
		for i, j := 0, 0; i < len(ts); i++ {
			for j < len(ts) && ts[j].Sub(ts[i]) < window {
				j++
			}
			if j-i > peak {
				peak, at = j-i, ts[i]
			}
		}
		mean := float64(len(ts)) / ts[len(ts)-1].Sub(ts[0]).Seconds()
		t.Logf("figures: GroupRate %v, GroupBurst %d, Concurrency %d, 3 -> 5 -> 2 workers: peak %d calls in a window of %v (bound %d), mean %.0f a second over %d calls",
			groupRate, groupBurst, conc, peak, window, limit, mean, len(ts))
		if peak > limit {
			t.Errorf("%d handler calls in the window of %v from %v; want at most %d (GroupRate %v, GroupBurst %d)",
				peak, window, at.Sub(ts[0]), limit, groupRate, groupBurst)
		}
	})
}

func TestGroupRateOptionsAreChecked(t *testing.T) {
	l, err := partition.New(server(t).Client(), partition.Options{Name: "rate-options", Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	src := memory.NewLog(1).Source()
	h := func(context.Context, *transport.Message) error { return nil }
	for _, o := range []consumer.Options{{GroupRate: -1}, {GroupBurst: -1}} {
		if _, err := consumer.New(l, src, h, o); err == nil {
			t.Errorf("New with GroupRate %v, GroupBurst %d: no error", o.GroupRate, o.GroupBurst)
		} else {
			t.Log(err)
		}
	}
}
