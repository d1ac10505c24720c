package consumer_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// The tests of this file hold handovers to "nothing done twice" (issue
// 12): a task cut off at the drain, or one stuck failing, costs only
// itself; a change of Interval the documented way goes on where the group
// stopped; a log recreated below its checkpoints is read again, not
// skipped.

// handoverWith runs a group of 2 on a memory log of 4 shards, 1,000 ids x
// 3 tasks, Concurrency 4, makes one task misbehave with h, and has a third
// worker join while it does; it returns the tally, except for the
// misbehaving task's id.
func handoverWith(t *testing.T, conc int, bad string, h func(ctx context.Context, first bool) error, started chan struct{}) tally {
	log := memory.NewLog(4)
	var once atomic.Bool
	g := newGroup(t, log.Source, consumer.Options{Concurrency: conc, RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond},
		func(int, *partition.Lease) consumer.Handler {
			return func(ctx context.Context, m *transport.Message) error {
				if string(m.Payload) == bad {
					return h(ctx, once.CompareAndSwap(false, true))
				}
				return nil
			}
		})
	for range 2 {
		g.start()
	}
	g.settle()
	const ids, each = 1000, 3
	fillTasks(func(k string, p []byte) { log.Append(k, p) }, ids, each)
	<-started
	g.start()
	key := strings.Split(bad, "/")[0]
	waitFor(t, "every task but the bad id's", func() bool {
		tl := g.check(ids, each, key)
		return tl.missing == 0
	})
	g.settle()
	time.Sleep(3 * hostileInterval) // anything done twice shows up now
	for w := range 3 {
		g.stop(w + 1)
	}
	tl := g.exactlyOnce(ids, each, key)
	t.Logf("figures: %d repeats of other tasks at a handover 2 -> 3 with %s misbehaving", tl.repeats, bad)
	return tl
}

// A task that outlives the drain (it takes 4s and honours its context) is
// cut off once and done by its next owner; every other task exactly once.
func TestSlowTaskCostsOnlyItselfAtAHandover(t *testing.T) {
	forEachConcurrency(t, slowTaskCostsOnlyItself)
}

func slowTaskCostsOnlyItself(t *testing.T, conc int) {
	started := make(chan struct{})
	var attempts, done atomic.Int64
	handoverWith(t, conc, "7/1", func(ctx context.Context, first bool) error {
		attempts.Add(1)
		if first {
			close(started)
			select {
			case <-time.After(4 * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		done.Add(1)
		return nil
	}, started)
	if a, d := attempts.Load(), done.Load(); a > 2 || d != 1 {
		t.Errorf("the slow task was started %d times and finished %d; want at most 2 (cut once, then done) and 1", a, d)
	}
}

// A task that always fails (default policy) costs only itself at a
// handover too: every other task exactly once.
func TestFailingTaskCostsOnlyItselfAtAHandover(t *testing.T) {
	forEachConcurrency(t, failingTaskCostsOnlyItself)
}

func failingTaskCostsOnlyItself(t *testing.T, conc int) {
	started := make(chan struct{})
	var once sync.Once
	handoverWith(t, conc, "7/0", func(ctx context.Context, first bool) error {
		once.Do(func() { close(started) })
		return errors.New("always fails")
	}, started)
}

// Changing Interval the documented way: stop every worker, wait 10
// intervals, start again with the new Interval (here twice the old, with
// another count of workers). Every new task is done once and no old one
// again; the ledger never refuses the new holders (their tokens grow with
// time, not with the interval's number).
func TestChangingTheIntervalGoesOnWhereTheGroupStopped(t *testing.T) {
	log := memory.NewLog(4)
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	var mu sync.Mutex
	seen := map[string]int{}
	h := func(ctx context.Context, m *transport.Message) error {
		mu.Lock()
		seen[string(m.Payload)]++
		mu.Unlock()
		return nil
	}
	run := func(n int, interval time.Duration, until func() bool) {
		var stops []func()
		for range n {
			l, err := partition.New(server(t).Client(), partition.Options{Name: name, Interval: interval})
			if err != nil {
				t.Fatal(err)
			}
			c, err := consumer.New(l, log.Source(), h, consumer.Options{Concurrency: 4})
			if err != nil {
				t.Fatal(err)
			}
			stops = append(stops, run(t, c))
		}
		waitFor(t, "the tasks", until)
		for _, stop := range stops {
			stop()
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	fillTasks(func(k string, p []byte) { log.Append(k, p) }, 200, 3)
	run(3, 200*time.Millisecond, func() bool { return count() == 600 })
	time.Sleep(12 * 200 * time.Millisecond) // stopped for more than 10 intervals: the settings may change
	for x := range 200 {
		log.Append(fmtInt(x), []byte("new/"+fmtInt(x)))
	}
	begin := time.Now()
	run(2, 400*time.Millisecond, func() bool { return count() == 800 })
	t.Logf("figures: 200 new tasks done in %v after the restart at twice the interval", time.Since(begin).Round(time.Millisecond))
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for p, n := range seen {
		if n != 1 {
			t.Errorf("task %s done %d times; want once across the change of interval", p, n)
		}
	}
}

// recreatable is a log that can be deleted and created again: its
// positions start over.
type recreatable struct {
	mu  sync.Mutex
	log *memory.Log
}

func (r *recreatable) current() *memory.Log { r.mu.Lock(); defer r.mu.Unlock(); return r.log }
func (r *recreatable) Info(ctx context.Context) (transport.Info, error) {
	return r.current().Source().Info(ctx)
}
func (r *recreatable) Open(ctx context.Context, from []transport.Position) (transport.Reader, error) {
	return r.current().Source().Open(ctx, from)
}

// A log deleted and created again (positions start over, below the
// checkpoints) is reported and read from its start: nothing of the new log
// is skipped.
func TestRecreatedLogIsReadAgainNotSkipped(t *testing.T) {
	src := &recreatable{log: memory.NewLog(2)}
	var mu sync.Mutex
	seen := map[string]int{}
	h := func(ctx context.Context, m *transport.Message) error {
		mu.Lock()
		seen[string(m.Payload)]++
		mu.Unlock()
		return nil
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	for x := range 300 {
		src.current().Append(fmtInt(x), []byte("old/"+fmtInt(x)))
	}
	l := lease(t, server(t).Client())
	c, _ := consumer.New(l, src, h, consumer.Options{})
	stop := run(t, c)
	waitFor(t, "the old log", func() bool { return count() == 300 })
	stop()
	// The log is deleted and created again with fewer entries than the
	// checkpoints had passed.
	src.mu.Lock()
	src.log = memory.NewLog(2)
	src.mu.Unlock()
	for x := range 40 {
		src.current().Append(fmtInt(x), []byte("new/"+fmtInt(x)))
	}
	c2, _ := consumer.New(lease(t, server(t).Client()), src, h, consumer.Options{})
	stop = run(t, c2)
	waitFor(t, "the new log", func() bool { return count() == 340 })
	stop()
	if st := c2.Stats(); st.Rewinds == 0 {
		t.Errorf("the rewound log was not reported (Stats.Rewinds 0)")
	}
}

func fmtInt(x int) string {
	const digits = "0123456789"
	if x == 0 {
		return "0"
	}
	var b []byte
	for ; x > 0; x /= 10 {
		b = append([]byte{digits[x%10]}, b...)
	}
	return string(b)
}

// A failing id whose later tasks pile up behind it (per-id order) far
// beyond what a checkpoint once listed (128 unfinished tasks), with other
// ids' tasks finishing between them: a clean handover still does every
// other task exactly once, the ones after the 129th queued task included.
func TestFailingIDWithManyQueuedTasksCostsOnlyItself(t *testing.T) {
	log := memory.NewLog(1) // one shard: the failing id's tasks and the others interleave in it
	var failing atomic.Int64
	g := newGroup(t, log.Source, consumer.Options{Concurrency: 4, RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond},
		func(int, *partition.Lease) consumer.Handler {
			return func(ctx context.Context, m *transport.Message) error {
				if m.Key == "7" {
					failing.Add(1)
					return errors.New("always fails")
				}
				return nil
			}
		})
	for range 2 {
		g.start()
	}
	g.settle()
	const ids, queued = 1000, 200 // 7's tasks: 7/0 fails, 7/1..7/200 wait behind it
	for x := range ids {
		log.Append(fmtInt(x), []byte(fmtInt(x)+"/0"))
		if x%4 == 0 && x/4 < queued {
			log.Append("7", []byte("7/"+fmtInt(x/4+1)))
		}
	}
	waitFor(t, "every task but id 7's", func() bool { return g.check(ids, 1, "7").missing == 0 })
	waitFor(t, "7/0 failing", func() bool { return failing.Load() > 2 })
	g.start()
	g.settle()
	time.Sleep(3 * hostileInterval) // anything done twice shows up now
	for w := range 3 {
		g.stop(w + 1)
	}
	tl := g.exactlyOnce(ids, 1, "7")
	t.Logf("figures: %d repeats of other tasks at a handover 2 -> 3 with id 7 failing and %d of its tasks queued behind it", tl.repeats, queued)
}

// The age of the oldest unfinished task grows across a rebalance when
// its worker keeps the share (indexes are sticky): a task stuck failing
// for longer than the group has been stable shows as such, so an alert on
// it fires in a fleet that rebalances often.
func TestOldestUnfinishedAgeSurvivesARebalance(t *testing.T) {
	log := memory.NewLog(1)
	var failing atomic.Int64
	g := newGroup(t, log.Source, consumer.Options{Concurrency: 4, RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond},
		func(int, *partition.Lease) consumer.Handler {
			return func(ctx context.Context, m *transport.Message) error {
				if m.Key == "7" {
					failing.Add(1)
					return errors.New("always fails")
				}
				return nil
			}
		})
	for range 2 {
		g.start()
	}
	g.settle()
	for x := range 100 {
		log.Append(fmtInt(x), []byte(fmtInt(x)+"/0"))
	}
	waitFor(t, "7/0 failing", func() bool { return failing.Load() > 2 })
	time.Sleep(2 * hostileInterval)
	joined := time.Now()
	w3 := g.start()
	g.settle()
	time.Sleep(2 * hostileInterval)
	var oldest time.Duration
	for w := 1; w <= w3; w++ {
		for _, d := range g.worker(w).c.Stats().Oldest {
			oldest = max(oldest, d)
		}
	}
	if since := time.Since(joined); oldest <= since {
		t.Errorf("the failing task's age is %v after a rebalance %v ago; want it older than the rebalance (it has failed since before)", oldest, since)
	}
}

// A worker never runs again a task it finished in its own earlier term:
// a handler that overran its term and then returned nil is remembered,
// and the worker's next term, which meets the task again (the ledger
// never heard it was done), skips it. The group is paused while terms
// change, so that no call starts but the overdue one; before, the worker
// ran the task a second time once resumed.
func TestAWorkerSkipsWhatItFinishedAfterItsTerm(t *testing.T) {
	client := server(t).Client()
	ctx := context.Background()
	log := memory.NewLog(1)
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	calls := map[string]int{} // worker/key
	g := newGroup(t, log.Source, consumer.Options{Concurrency: 2, CheckpointInterval: 20 * time.Millisecond},
		func(w int, _ *partition.Lease) consumer.Handler {
			return func(ctx context.Context, m *transport.Message) error {
				mu.Lock()
				calls[strconv.Itoa(w)+"/"+m.Key]++
				first := calls[strconv.Itoa(w)+"/"+m.Key] == 1
				mu.Unlock()
				if m.Key == "x" && w == 1 && first {
					close(started)
					<-release // ignores its context: it overruns its term
				}
				return nil
			}
		})
	w1 := g.start()
	g.settle()
	log.Append("x", []byte("x/0"))
	<-started
	if _, err := consumer.Pause(ctx, client, g.name, "terms change"); err != nil {
		t.Fatal(err)
	}
	w2 := g.start()
	waitFor(t, "x's handler overdue on worker 1", func() bool { return g.worker(w1).c.Stats().OverdueTotal == 1 })
	close(release)
	waitFor(t, "x's handler returned", func() bool { return g.worker(w1).c.Stats().Overdue == 0 })
	g.stop(w2)
	g.settle()
	if _, err := consumer.Resume(ctx, client, g.name); err != nil {
		t.Fatal(err)
	}
	log.Append("y", []byte("y/0"))
	waitFor(t, "y handled", func() bool { return g.countKey("y") == 1 })
	time.Sleep(100 * time.Millisecond) // x again, if at all, would have started by now
	mu.Lock()
	defer mu.Unlock()
	if calls["1/x"] != 1 || calls["2/x"] != 0 {
		t.Errorf("x was run %d times by worker 1 and %d by worker 2; want once, by worker 1 (overdue, then finished)", calls["1/x"], calls["2/x"])
	}
}

// A worker that takes its index over from a holder that never released
// it (crashed, or stalled past its lease) announces what it may do a
// second time: the tasks it takes between that holder's marks and the
// log's end when it opened are counted (Stats.Redone) and named in one
// Warn line when its term ends; tasks written after it opened are not.
func TestATakeoverFromAHolderThatNeverReleasedIsAnnounced(t *testing.T) {
	client := server(t).Client()
	ctx := context.Background()
	log := memory.NewLog(1)
	var at []transport.Position
	for i := range 10 {
		_, p := log.Append(strconv.Itoa(i), []byte(strconv.Itoa(i)+"/0"))
		at = append(at, transport.Offset(p))
	}
	rec := &warnLog{}
	g := newGroup(t, log.Source, consumer.Options{Logger: slog.New(rec)}, func(int, *partition.Lease) consumer.Handler {
		return func(context.Context, *transport.Message) error { return nil }
	})
	// The former holder of index 0 (token 1000) wrote that the first 3
	// are done, and never released the index.
	ledger := checkpoint.NewRedis(client, g.name)
	st, err := ledger.Open(ctx, checkpoint.OpenRequest{Replicas: 1, Token: 1000, Origin: []transport.Position{{}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.Write(ctx, checkpoint.WriteRequest{Epoch: st.Current.N, Token: 1000, Replicas: 1,
		Marks: map[int]checkpoint.Mark{0: {Low: at[3], High: at[3]}}}); err != nil {
		t.Fatal(err)
	}
	w := g.start()
	waitFor(t, "the 7 tasks past the marks", func() bool { return g.count() == 7 })
	for i := 10; i < 15; i++ {
		log.Append(strconv.Itoa(i), []byte(strconv.Itoa(i)+"/0"))
	}
	waitFor(t, "the 5 written after", func() bool { return g.count() == 12 })
	st2 := g.worker(w).c.Stats()
	g.stop(w)
	if st2.Redone != 7 {
		t.Errorf("Stats.Redone = %d; want 7, the tasks between the former holder's marks and the log's end when the worker opened", st2.Redone)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var lines []string
	for _, m := range rec.msgs {
		if strings.HasPrefix(m, "tasks a former holder may have done") {
			lines = append(lines, m)
		}
	}
	want := "ranges=[0/" + at[3].String() + ".." + at[9].String() + "]"
	if len(lines) != 1 || !strings.Contains(lines[0], "count=7") || !strings.Contains(lines[0], want) {
		t.Errorf("the term's lines of tasks redone: %q; want one, count=7 and %s", lines, want)
	}
}
