package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// The consumer itself on fake time (testing/synctest): a real
// *partition.Lease on an in-memory registry with the lease script's
// semantics (partition.NewInMemory), a source that is not a log (so no
// ledger), and the whole Consumer between them: term, intake, book,
// runner, drain. What these tests show holds to the nanosecond of the
// fake clock, whatever else the machine runs; the guarantees against a
// real redis-server are proven by the tests beside them.

// fakeQueue is a source that is not a log, in memory, for a bubble: a
// message published goes to every reader open then (as NATS core
// delivers), and each copy is acknowledged on its own.
type fakeQueue struct {
	mu      sync.Mutex
	readers map[*fakeReader]bool
	seq     uint64
	acks    map[string]int // per message (key/seq), acknowledgements
}

func newFakeQueue() *fakeQueue {
	return &fakeQueue{readers: map[*fakeReader]bool{}, acks: map[string]int{}}
}

func (q *fakeQueue) Info(context.Context) (transport.Info, error) {
	return transport.Info{Shards: 1, System: "memory", Destinations: []string{"queue"}}, nil
}

func (q *fakeQueue) Open(context.Context, []transport.Position) (transport.Reader, error) {
	r := &fakeReader{q: q, ch: make(chan *transport.Message, 1<<14), done: make(chan struct{})}
	q.mu.Lock()
	q.readers[r] = true
	q.mu.Unlock()
	return r, nil
}

// publish sends key's next message (payload "key/n") to every reader open.
func (q *fakeQueue) publish(key string, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	name := fmt.Sprintf("%s/%d", key, n)
	for r := range q.readers {
		r.ch <- &transport.Message{Key: key, Payload: []byte(name), Position: transport.Offset(q.seq), Ack: func() {
			q.mu.Lock()
			q.acks[name]++
			q.mu.Unlock()
		}}
	}
}

func (q *fakeQueue) acked(name string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.acks[name]
}

type fakeReader struct {
	q    *fakeQueue
	ch   chan *transport.Message
	done chan struct{}
	once sync.Once
}

func (r *fakeReader) Fetch(ctx context.Context) ([]*transport.Message, error) {
	var out []*transport.Message
	select {
	case m := <-r.ch:
		out = append(out, m)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.done:
		return nil, transport.ErrClosed
	}
	for len(out) < 64 {
		select {
		case m := <-r.ch:
			out = append(out, m)
		default:
			return out, nil
		}
	}
	return out, nil
}

func (r *fakeReader) Close() error {
	r.once.Do(func() {
		close(r.done)
		r.q.mu.Lock()
		delete(r.q.readers, r)
		r.q.mu.Unlock()
	})
	return nil
}

// fakeWorker is one consumer of q on an in-memory lease of reg, run until
// stop. Call it inside a bubble.
type fakeWorker struct {
	c    *consumer.Consumer
	l    *partition.Lease
	stop context.CancelFunc
	done chan error
}

func startFake(t *testing.T, reg *partition.MemoryGroup, q *fakeQueue, h consumer.Handler, opts consumer.Options) *fakeWorker {
	t.Helper()
	l, err := partition.NewInMemory(reg, partition.Options{Name: "fake", Interval: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	c, err := consumer.New(l, q, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &fakeWorker{c: c, l: l, stop: stop, done: make(chan error, 1)}
	go func() { w.done <- c.Run(ctx) }()
	return w
}

// served waits, on fake time, until the worker serves a term.
func (w *fakeWorker) served(t *testing.T) partition.Assignment {
	t.Helper()
	for range 1000 {
		if a, ok := w.l.Current(); ok && w.c.Reading() != nil {
			return a
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the worker never served a term in 50 s of fake time")
	return partition.Assignment{}
}

// A failing task is retried exactly at the times RetryDelay gives, never
// once more than it fails, while its id's later task waits for it and
// every other id goes on; at every Concurrency.
func TestRetriesOnFakeTime(t *testing.T) {
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprintf("Concurrency=%d", conc), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg, q := partition.NewMemoryGroup(), newFakeQueue()
				var mu sync.Mutex
				var calls []string
				at := map[string][]time.Time{}
				fails := 3
				h := func(ctx context.Context, m *transport.Message) error {
					mu.Lock()
					defer mu.Unlock()
					name := string(m.Payload)
					calls = append(calls, name)
					at[name] = append(at[name], time.Now())
					if name == "a/0" && fails > 0 {
						fails--
						return errors.New("smtp: 451")
					}
					return nil
				}
				delay := func(attempt int, _ error) time.Duration { return time.Duration(attempt) * time.Minute }
				w := startFake(t, reg, q, h, consumer.Options{Concurrency: conc, RetryDelay: delay})
				w.served(t)
				q.publish("a", 0)
				q.publish("b", 0)
				q.publish("a", 1)
				q.publish("b", 1)
				time.Sleep(10 * time.Minute)
				w.stop()
				if err := <-w.done; err != nil {
					t.Fatal(err)
				}

				mu.Lock()
				defer mu.Unlock()
				if n := len(at["a/0"]); n != 4 {
					t.Fatalf("a/0 ran %d times; want 4 (3 failures, then done): %v", n, calls)
				}
				for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute} {
					got := at["a/0"][i+1].Sub(at["a/0"][i])
					// The wait is RetryDelay's, and the attempt starts at
					// most a renewal later (a task does not start within
					// MinTaskTime of a deadline the renewal has not moved).
					if got < want || got > want+time.Second {
						t.Errorf("retry %d of a/0 came %v after the attempt before; RetryDelay said %v", i+1, got, want)
					}
				}
				if len(at["a/1"]) != 1 || at["a/1"][0].Before(at["a/0"][3]) {
					t.Errorf("a/1 ran at %v, a/0 succeeded at %v: a/1 must wait for a/0", at["a/1"], at["a/0"][3])
				}
				for _, b := range []string{"b/0", "b/1"} {
					if len(at[b]) != 1 || !at[b][0].Before(at["a/0"][1]) {
						t.Errorf("%s ran at %v; want once, before a/0's first retry (%v): a failing id blocks no other", b, at[b], at["a/0"][1])
					}
				}
				for _, name := range []string{"a/0", "a/1", "b/0", "b/1"} {
					if n := q.acked(name); n != 1 {
						t.Errorf("%s acknowledged %d times; want 1", name, n)
					}
				}
			})
		})
	}
}

// At shutdown a handler that ignores its context is left running once
// ShutdownTimeout has passed: Run returns by then, the handler is counted
// overdue until it returns, and its task is abandoned, never handled.
func TestShutdownLeavesAStuckHandlerOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, q := partition.NewMemoryGroup(), newFakeQueue()
		started := make(chan struct{})
		h := func(ctx context.Context, m *transport.Message) error {
			if m.Key == "stuck" {
				close(started)
				time.Sleep(time.Hour) // ignores ctx
			}
			return nil
		}
		w := startFake(t, reg, q, h, consumer.Options{Concurrency: 2, ShutdownTimeout: 3 * time.Second})
		w.served(t)
		q.publish("stuck", 0)
		q.publish("fine", 0)
		<-started
		time.Sleep(time.Second)
		begin := time.Now()
		w.stop()
		if err := <-w.done; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took > 3*time.Second+time.Second {
			t.Errorf("Run returned %v after its context ended; want within ShutdownTimeout (3s) and the lease's stop", took)
		}
		if n := w.c.Stats().Overdue; n != 1 {
			t.Errorf("Stats.Overdue = %d while the handler runs; want 1", n)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := w.c.Stats().Overdue; n != 0 {
			t.Errorf("Stats.Overdue = %d after the handler returned; want 0", n)
		}
		// A source that is not a log has given the stuck task up (it is
		// acknowledged as abandoned, not as handled), and the handler's
		// late return changes nothing.
		st := w.c.Stats()
		if st.Handled != 1 || st.Abandoned != 1 || st.OverdueTotal != 1 || st.InFlight != 0 {
			t.Errorf("handled %d, abandoned %d, overdue in all %d, in flight %d; want 1, 1, 1, 0", st.Handled, st.Abandoned, st.OverdueTotal, st.InFlight)
		}
		if q.acked("stuck/0") != 1 || q.acked("fine/0") != 1 {
			t.Errorf("acknowledged: stuck %d, fine %d; want each once", q.acked("stuck/0"), q.acked("fine/0"))
		}
	})
}

// Under a pool of 8 with handlers of random durations that fail one time
// in five, every task is done once, the tasks of an id one at a time and
// in the order they came.
func TestPerIDOrderOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, q := partition.NewMemoryGroup(), newFakeQueue()
		const ids, each = 20, 10
		var mu sync.Mutex
		running := map[string]bool{}
		next := map[string]int{} // per id, the task it must do next
		var violations []string
		rnd := rand.New(rand.NewPCG(1, 2))
		h := func(ctx context.Context, m *transport.Message) error {
			mu.Lock()
			var n int
			fmt.Sscanf(string(m.Payload)[len(m.Key)+1:], "%d", &n)
			if running[m.Key] {
				violations = append(violations, string(m.Payload)+" ran beside another task of its id")
			}
			if n != next[m.Key] {
				violations = append(violations, fmt.Sprintf("%s ran when %s/%d was next", m.Payload, m.Key, next[m.Key]))
			}
			running[m.Key] = true
			d := time.Duration(rnd.IntN(50)) * time.Millisecond
			fail := rnd.IntN(5) == 0
			mu.Unlock()
			time.Sleep(d)
			mu.Lock()
			defer mu.Unlock()
			running[m.Key] = false
			if fail {
				return errors.New("flaky")
			}
			next[m.Key]++
			return nil
		}
		w := startFake(t, reg, q, h, consumer.Options{Concurrency: 8, RetryDelay: func(int, error) time.Duration { return 30 * time.Millisecond }})
		w.served(t)
		for n := range each {
			for id := range ids {
				q.publish(fmt.Sprintf("id%d", id), n)
			}
		}
		time.Sleep(time.Minute)
		w.stop()
		if err := <-w.done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, v := range violations {
			t.Error(v)
		}
		for id := range ids {
			key := fmt.Sprintf("id%d", id)
			if next[key] != each {
				t.Errorf("%s: %d of %d tasks done", key, next[key], each)
			}
			for n := range each {
				if a := q.acked(fmt.Sprintf("%s/%d", key, n)); a != 1 {
					t.Errorf("%s/%d acknowledged %d times; want 1", key, n, a)
				}
			}
		}
	})
}

// The group's rate, used in full and re-split at each change of mapping,
// on fake time: with a backlog, 3 -> 5 -> 2 workers start GroupRate
// handler calls a second between them (at least 90% of it, and at most
// it and the bursts), whatever else the machine runs. A worker that kept
// its old share at a change (5 -> 2: 2 x 60/s) would fall short; one that
// enforced the whole rate alone would pass it. The same scenario on a
// real redis-server (TestGroupRateHoldsThroughMembershipChanges) proves
// the ceiling, which a busy machine can only lower.
func TestGroupRateIsUsedInFullOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const groupRate, groupBurst = 300.0, 30
		reg, q := partition.NewMemoryGroup(), newFakeQueue()
		var mu sync.Mutex
		var starts []time.Time
		h := func(context.Context, *transport.Message) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			return nil
		}
		opts := consumer.Options{Concurrency: 4, GroupRate: groupRate, GroupBurst: groupBurst, MaxPending: 1 << 14}
		var live []*fakeWorker
		for _, size := range []int{3, 5, 2} {
			for len(live) < size {
				live = append(live, startFake(t, reg, q, h, opts))
			}
			for len(live) > size {
				w := live[len(live)-1]
				live = live[:len(live)-1]
				w.stop()
				if err := <-w.done; err != nil {
					t.Fatal(err)
				}
			}
			// Settled: every worker serves a term of the group's size.
			for range 1000 {
				ok := true
				for _, w := range live {
					a, held := w.l.Current()
					ok = ok && held && a.Replicas == size && w.c.Reading() != nil
				}
				if ok {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			for x := range 1500 { // 5 seconds' worth: a backlog through the window
				q.publish(strconv.Itoa(x%500), x)
			}
			time.Sleep(time.Second) // past each term's burst
			mu.Lock()
			before := len(starts)
			mu.Unlock()
			time.Sleep(2 * time.Second)
			mu.Lock()
			got := float64(len(starts)-before) / 2
			mu.Unlock()
			t.Logf("figures: %d workers, GroupRate %v: %.0f handler calls a second on fake time", size, groupRate, got)
			if got < 0.9*groupRate || got > groupRate+groupBurst {
				t.Errorf("%d workers: %.0f calls a second with a backlog; want GroupRate %v (90%% to it and a burst)", size, got, groupRate)
			}
			time.Sleep(10 * time.Second) // the backlog drains before the next change
		}
		for _, w := range live {
			w.stop()
			if err := <-w.done; err != nil {
				t.Fatal(err)
			}
		}
	})
}
