package consumer_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// With ServeToCap, a worker whose Run's context ends keeps serving its
// share to its lease's cap (it registers no more), and only then drains
// and returns: tasks keep being done by it well after the cancel, Run
// returns within two intervals and the drain, and every task is done
// exactly once, in order, by its holder. Without it, the worker drains at
// once and does nothing after the cancel but what was running.
func TestServeToCapKeepsServingAfterCancel(t *testing.T) {
	for _, serve := range []bool{true, false} {
		t.Run(fmt.Sprintf("ServeToCap=%t", serve), func(t *testing.T) {
			log := memory.NewLog(4)
			const iv = 200 * time.Millisecond // the group helper's interval
			opts := consumer.Options{ServeToCap: serve, ShutdownTimeout: 2 * time.Second}
			g := newGroup(t, log.Source, opts, func(int, *partition.Lease) consumer.Handler {
				return func(context.Context, *transport.Message) error { return nil }
			})
			g.start()
			g.start()
			g.settle()
			const ids, each = 50, 60
			produced := make(chan struct{})
			go func() {
				defer close(produced)
				for s := range each {
					for x := range ids {
						log.Append(strconv.Itoa(x), fmt.Appendf(nil, "%d/%d", x, s))
					}
					time.Sleep(iv / 20)
				}
			}()
			time.Sleep(iv)
			cancelled := time.Now()
			took := g.stopWithin(1, 2*iv+iv/2+time.Second) // two intervals, the drain, a slow machine's margin
			<-produced
			waitFor(t, "every task", func() bool { return g.check(ids, each).missing == 0 })
			late := 0
			g.mu.Lock()
			for _, d := range g.done {
				if d.worker == 1 && d.at.After(cancelled.Add(iv/4)) {
					late++
				}
			}
			g.mu.Unlock()
			if serve && late == 0 {
				t.Errorf("worker 1 did nothing a quarter interval after its context ended (Run returned after %v); want it serving its share to its cap", took)
			}
			if !serve && late > 0 {
				t.Errorf("worker 1 did %d tasks a quarter interval after its context ended; want none without ServeToCap", late)
			}
			tl := g.exactlyOnce(ids, each)
			t.Logf("Run returned %v after its context ended; %d tasks done by it a quarter interval after; %d repeats", took, late, tl.repeats)
		})
	}
}
