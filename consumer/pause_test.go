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
)

// A paused group finishes what runs and starts nothing while its workers
// keep their leases; resumed, it goes on where it stopped, each worker in
// its place (a pause changes no mapping), and every task is done once,
// in order.
func TestPausedGroupStartsNothingAndKeepsItsLeases(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		const ids, each = 50, 60
		log := memory.NewLog(1)
		fillTasks(func(k string, p []byte) { log.Append(k, p) }, ids, each)
		var seen sync.Map            // worker -> the test has seen it paused
		var startedLate atomic.Int64 // handler calls begun after that
		g := newGroup(t, log.Source, consumer.Options{Concurrency: conc, CheckpointInterval: 50 * time.Millisecond},
			func(w int, _ *partition.Lease) consumer.Handler {
				return func(ctx context.Context, _ *transport.Message) error {
					if _, ok := seen.Load(w); ok {
						startedLate.Add(1)
					}
					time.Sleep(time.Millisecond) // a backlog the pause finds unfinished
					return nil
				}
			})
		ws := []int{g.start(), g.start()}
		g.settle()
		ctx := context.Background()
		c := server(t).Client()
		st, err := consumer.Pause(ctx, c, g.name, "a downstream is down")
		if err != nil {
			t.Fatal(err)
		}
		// Seen paused with nothing running: from then on no handler call
		// may begin (one that passed its check before the pause waits
		// for the resume).
		waitFor(t, "every worker to see the pause and finish what runs", func() bool {
			for _, w := range ws {
				if s := g.worker(w).c.Stats(); !s.Paused || s.InFlight > 0 {
					return false
				}
			}
			return true
		})
		held := map[int]partition.Assignment{}
		for _, w := range ws {
			seen.Store(w, true)
			s := g.worker(w).c.Stats()
			held[w], _ = g.worker(w).l.Current()
			if !s.PausedSince.Equal(st.Since) {
				t.Errorf("worker %d: paused since %v; want %v", w, s.PausedSince, st.Since)
			}
		}
		time.Sleep(200 * time.Millisecond) // an interval: what ran at the pause has finished
		before := g.count()
		time.Sleep(4 * 200 * time.Millisecond)
		if after := g.count(); after != before {
			t.Errorf("%d tasks done while paused; want none", after-before)
		}
		if n := startedLate.Load(); n != 0 {
			t.Errorf("%d handler calls began after their worker reported the pause; want none", n)
		}
		if before >= ids*each {
			t.Fatalf("all %d tasks were done before the pause took effect: the test proves nothing", before)
		}
		for _, w := range ws {
			if _, ok := g.worker(w).l.Current(); !ok {
				t.Errorf("worker %d holds nothing while paused; want its lease kept", w)
			}
		}
		_, paused, err := consumer.ReadPause(ctx, c, g.name)
		if err != nil || !paused {
			t.Fatalf("ReadPause: %v, %v; want paused", paused, err)
		}
		seen.Clear()
		if ok, err := consumer.Resume(ctx, c, g.name); err != nil || !ok {
			t.Fatalf("Resume: %v, %v", ok, err)
		}
		waitFor(t, "every task after the resume", func() bool { return g.check(ids, each).missing == 0 })
		for _, w := range ws {
			s := g.worker(w).c.Stats()
			if s.Paused {
				t.Errorf("worker %d still paused after the resume", w)
			}
			if a, _ := g.worker(w).l.Current(); a.Index != held[w].Index || a.Replicas != held[w].Replicas {
				t.Errorf("worker %d holds %d of %d after the resume, %d of %d at the pause; want its place kept", w, a.Index, a.Replicas, held[w].Index, held[w].Replicas)
			}
		}
		t.Logf("figures: Concurrency %d: %d of %d tasks done at the pause, none during 800ms paused, the rest after the resume, each worker in its place",
			conc, before, ids*each)
		g.exactlyOnce(ids, each)
	})
}

// hangingInfo is a source whose Info blocks until its context ends once
// hang is set: a source whose metadata calls time out (a Kafka broker
// that does not answer, a stream on a stalled node).
type hangingInfo struct {
	transport.Source
	hang *atomic.Bool
}

func (h hangingInfo) Info(ctx context.Context) (transport.Info, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return transport.Info{}, ctx.Err()
	}
	return h.Source.Info(ctx)
}

// The pause is read on its own, not behind the lag (which describes the
// source): with the source's Info hanging, a pause still takes effect
// within an interval or two. (Before, the pause's read shared the lag's
// timeout, failed after it, and the worker started tasks forever.)
func TestPauseTakesEffectWhileTheSourceHangs(t *testing.T) {
	const ids, each = 20, 2000
	log := memory.NewLog(1)
	fillTasks(func(k string, p []byte) { log.Append(k, p) }, ids, each)
	var hang atomic.Bool
	var started atomic.Int64
	g := newGroup(t, func() transport.Source { return hangingInfo{log.Source(), &hang} }, consumer.Options{CheckpointInterval: 50 * time.Millisecond},
		func(int, *partition.Lease) consumer.Handler {
			return func(ctx context.Context, _ *transport.Message) error {
				started.Add(1)
				time.Sleep(time.Millisecond)
				return nil
			}
		})
	w := g.start()
	g.settle()
	waitFor(t, "tasks to run", func() bool { return started.Load() > 0 })
	hang.Store(true)
	if _, err := consumer.Pause(context.Background(), server(t).Client(), g.name, "test"); err != nil {
		t.Fatal(err)
	}
	// The pause is read once per interval (200ms): after three intervals,
	// and one more for what ran to finish, nothing may start.
	time.Sleep(4 * 200 * time.Millisecond)
	before := started.Load()
	time.Sleep(5 * 200 * time.Millisecond)
	if n := started.Load() - before; n != 0 {
		t.Errorf("%d tasks started between 4 and 9 intervals after the pause, with the source's Info hanging; want none", n)
	}
	if !g.worker(w).c.Stats().Paused {
		t.Errorf("the worker does not report the pause")
	}
	if before >= ids*each {
		t.Fatalf("every task was done before the pause: the test proves nothing")
	}
}

// A second pause keeps the spell's Since and takes the new reason; one
// with no reason clears it; a value written by hand is taken as a pause.
func TestPausingAgainUpdatesTheReason(t *testing.T) {
	s := server(t)
	c := s.Client()
	ctx := context.Background()
	first, err := consumer.Pause(ctx, c, "g", "smtp down")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	second, err := consumer.Pause(ctx, c, "g", "smtp down, provider says 2h")
	if err != nil {
		t.Fatal(err)
	}
	read, paused, err := consumer.ReadPause(ctx, c, "g")
	if err != nil || !paused {
		t.Fatal(paused, err)
	}
	if !second.Since.Equal(first.Since) || second.Reason != "smtp down, provider says 2h" || read != second {
		t.Errorf("a second pause: %+v, read %+v; want Since %v kept and the new reason", second, read, first.Since)
	}
	if third, _ := consumer.Pause(ctx, c, "g", ""); third.Reason != "" || !third.Since.Equal(first.Since) {
		t.Errorf("a pause with no reason: %+v", third)
	}
	c.Set(ctx, consumer.PauseKey("h"), "by hand", 0)
	if st, _ := consumer.Pause(ctx, c, "h", "now with a reason"); st.Reason != "now with a reason" || st.Since.IsZero() {
		t.Errorf("pausing over a hand-written pause: %+v", st)
	}
}
