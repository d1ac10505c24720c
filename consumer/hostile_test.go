package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// The tests of this file treat the handler, its hooks and the source as
// hostile, as issue 11 lists: a group of workers on a real redis-server at
// a 200ms interval with Concurrency 4, each failure injected where it
// hurts most, and the record of finished tasks checked.

const hostileInterval = 200 * time.Millisecond

// forEachConcurrency runs a test with Concurrency 1 (intake runs each task
// inline) and 4 (a pool of workers): the two ways tasks run.
func forEachConcurrency(t *testing.T, f func(t *testing.T, conc int)) {
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprintf("Concurrency=%d", conc), func(t *testing.T) { f(t, conc) })
	}
}

// A handler that panics on one task every time: the process survives, the
// task is dead-lettered exactly once with an error that says it panicked,
// and every other task is done once, in order per id.
func TestPanickingHandlerIsAFailedAttempt(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		log := memory.NewLog(4)
		var mu sync.Mutex
		var dead []string
		var deadErrs []error
		opts := consumer.Options{
			Concurrency: conc, MaxAttempts: 3, RetryMin: time.Millisecond,
			DeadLetter: func(ctx context.Context, m *transport.Message, err error) error {
				mu.Lock()
				defer mu.Unlock()
				dead = append(dead, string(m.Payload))
				deadErrs = append(deadErrs, err)
				return nil
			},
		}
		g := newGroup(t, log.Source, opts, func(int, *partition.Lease) consumer.Handler {
			return func(ctx context.Context, m *transport.Message) error {
				if string(m.Payload) == "13/0" {
					panic(fmt.Sprintf("cannot handle %s", m.Payload))
				}
				return nil
			}
		})
		for range 3 {
			g.start()
		}
		g.settle()
		start := time.Now()
		const ids, each = 200, 3
		fillTasks(func(k string, p []byte) { log.Append(k, p) }, ids, each)
		waitFor(t, "every other task", func() bool { return g.count() == ids*each-1 })
		took := time.Since(start)
		st := g.stats()
		for w := range 3 {
			g.stop(w + 1)
		}
		tl := g.exactlyOnce(ids, each, "13")
		mu.Lock()
		defer mu.Unlock()
		if len(dead) != 1 || dead[0] != "13/0" {
			t.Fatalf("dead letters %q; want 13/0 once", dead)
		}
		var pe *consumer.PanicError
		if !errors.As(deadErrs[0], &pe) || !errors.Is(deadErrs[0], consumer.ErrPanicked) || !strings.Contains(deadErrs[0].Error(), "handler panicked: cannot handle 13/0") {
			t.Errorf("DeadLetter got %v; want a *PanicError saying the handler panicked with its value", deadErrs[0])
		} else if !strings.Contains(string(pe.Stack), "TestPanickingHandlerIsAFailedAttempt") {
			t.Errorf("the panic's stack does not show the handler:\n%s", pe.Stack)
		}
		if st.Panics != 3 || st.Failed != 3 || st.DeadLetters != 1 {
			t.Errorf("stats: %d panics, %d failed attempts, %d dead letters; want 3, 3, 1", st.Panics, st.Failed, st.DeadLetters)
		}
		// 13/1 and 13/2 run once each, after 13/0 was given up.
		g.mu.Lock()
		var after []int
		for _, d := range g.done {
			if d.key == "13" {
				after = append(after, d.seq)
			}
		}
		g.mu.Unlock()
		if fmt.Sprint(after) != "[1 2]" {
			t.Errorf("id 13 after its dead letter: seqs %v; want [1 2]", after)
		}
		t.Logf("figures: %d tasks done, %d repeats, every other task done in %v", g.count(), tl.repeats, took.Round(time.Millisecond))
	})
}

// A task that always fails under the default policy blocks its own id and
// nothing else: every other task is done once, the id's later tasks never
// run before it, and the bookkeeping of unfinished tasks stays within
// MaxPending however long it fails.
func TestAlwaysFailingTaskBlocksOnlyItsID(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		log := memory.NewLog(4)
		const maxPending = 16
		opts := consumer.Options{Concurrency: conc, MaxPending: maxPending, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond}
		g := newGroup(t, log.Source, opts, func(int, *partition.Lease) consumer.Handler {
			return func(ctx context.Context, m *transport.Message) error {
				if string(m.Payload) == "7/0" {
					return errors.New("the mail server refuses customer 7")
				}
				return nil
			}
		})
		for range 2 {
			g.start()
		}
		g.settle()
		const ids, each = 500, 4
		var peak atomic.Int64
		stopSampling := make(chan struct{})
		var sampling sync.WaitGroup
		sampling.Go(func() {
			for {
				for w := range 2 {
					if gw := g.worker(w + 1); gw != nil {
						if p := gw.c.Stats().Pending; p > peak.Load() {
							peak.Store(p)
						}
					}
				}
				select {
				case <-stopSampling:
					return
				case <-time.After(time.Millisecond):
				}
			}
		})
		start := time.Now()
		fillTasks(func(k string, p []byte) { log.Append(k, p) }, ids, each)
		waitFor(t, "every task but id 7's", func() bool { return g.count() == ids*each-each })
		took := time.Since(start)
		// Let it fail a while longer: nothing more may run, and the count of
		// unfinished tasks must not grow.
		failed := g.stats().Failed
		waitFor(t, "more failed attempts", func() bool { return g.stats().Failed > failed+20 })
		close(stopSampling)
		sampling.Wait()
		st := g.stats()
		var oldest time.Duration
		for w := range 2 {
			for _, d := range g.worker(w + 1).c.Stats().Oldest {
				oldest = max(oldest, d)
			}
		}
		for w := range 2 {
			g.stop(w + 1)
		}
		tl := g.exactlyOnce(ids, each, "7")
		if n := g.check(8, each).missing; n != each {
			t.Errorf("id 7: %d of its %d tasks missing; want all (7/0 never succeeds, so 7/1.. never run)", n, each)
		}
		if p := peak.Load(); p > maxPending {
			t.Errorf("a worker held %d unfinished tasks; want at most MaxPending (%d)", p, maxPending)
		}
		if st.Pending+st.Waiting != each || st.Pending != 1 {
			t.Errorf("unfinished tasks at the end: %d held whole, %d waiting light; want %d, id 7's: the failing one whole, the others light", st.Pending, st.Waiting, each)
		}
		if oldest < took/2 {
			t.Errorf("the oldest unfinished task's age is %v; want about the failing task's %v", oldest, took)
		}
		t.Logf("figures: %d tasks done, %d repeats, every other task in %v; %d failed attempts; peak unfinished %d",
			g.count(), tl.repeats, took.Round(time.Millisecond), st.Failed, peak.Load())
	})
}

// A handler that ignores its context and never returns (on the first
// attempt of one task), then a worker joins: the worker goes on without
// it, every task is done (the blocked one by its next owner), and every
// Run returns within ShutdownTimeout and a few intervals once cancelled.
func TestHandlerThatNeverReturnsDoesNotWedgeItsWorker(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		log := memory.NewLog(4)
		release := make(chan struct{})
		var blocked atomic.Bool
		blocking := make(chan struct{})
		const shutdown = time.Second
		opts := consumer.Options{Concurrency: conc, ShutdownTimeout: shutdown}
		g := newGroup(t, log.Source, opts, func(int, *partition.Lease) consumer.Handler {
			return func(ctx context.Context, m *transport.Message) error {
				if string(m.Payload) == "5/0" && blocked.CompareAndSwap(false, true) {
					close(blocking)
					<-release // ignores ctx
					return errors.New("released at the end of the test")
				}
				return nil
			}
		})
		defer func() {
			close(release)
			// The overdue goroutine returns now; give it a moment before goleak.
			time.Sleep(10 * time.Millisecond)
		}()
		for range 2 {
			g.start()
		}
		g.settle()
		start := time.Now()
		const ids, each = 200, 3
		fillTasks(func(k string, p []byte) { log.Append(k, p) }, ids, each)
		<-blocking
		g.start()
		waitFor(t, "every task", func() bool { return g.check(ids, each).missing == 0 })
		took := time.Since(start)
		// The stuck handler is detached (counted overdue) overdueGrace after
		// its term's end; its task's next holder may have done it already
		// (its lease starts a gap and a half after the old one's cap).
		var overdue int64
		waitFor(t, "the stuck handler counted overdue", func() bool {
			overdue = 0
			for w := range 3 {
				overdue += g.worker(w + 1).c.Stats().OverdueTotal
			}
			return overdue > 0
		})
		if overdue != 1 {
			t.Errorf("%d handlers counted overdue; want 1", overdue)
		}
		var returns []time.Duration
		for w := range 3 {
			returns = append(returns, g.stopWithin(w+1, shutdown+3*hostileInterval))
		}
		tl := g.exactlyOnce(ids, each)
		t.Logf("figures: every task done in %v, %d repeats; Run returned %v after cancellation", took.Round(time.Millisecond), tl.repeats, returns)
	})
}

// Shutdown with a handler that never returns: Run returns within
// ShutdownTimeout and leaves the handler counted as overdue until it
// returns.
func TestShutdownDoesNotWaitForAHandlerThatNeverReturns(t *testing.T) {
	log := memory.NewLog(1)
	release := make(chan struct{})
	started := make(chan struct{})
	var ctxEnded atomic.Bool
	h := func(ctx context.Context, m *transport.Message) error {
		close(started)
		<-release
		ctxEnded.Store(ctx.Err() != nil)
		return nil
	}
	const shutdown = 500 * time.Millisecond
	c, err := consumer.New(lease(t, server(t).Client()), log.Source(), h, consumer.Options{ShutdownTimeout: shutdown})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ret := make(chan error, 1)
	go func() { ret <- c.Run(ctx) }()
	log.Append("1", nil)
	<-started
	begin := time.Now()
	cancel()
	select {
	case err := <-ret:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(shutdown + 5*hostileInterval):
		t.Fatalf("Run had not returned %v after its context ended, with ShutdownTimeout %v", time.Since(begin), shutdown)
	}
	took := time.Since(begin)
	if took > shutdown+2*hostileInterval {
		t.Errorf("Run returned %v after its context ended; want about ShutdownTimeout (%v)", took, shutdown)
	}
	if st := c.Stats(); st.Overdue != 1 || st.InFlight != 1 || st.Handled != 0 {
		t.Errorf("after Run: %d overdue, %d in flight, %d handled; want 1, 1, 0", st.Overdue, st.InFlight, st.Handled)
	}
	close(release)
	waitFor(t, "the overdue handler to return", func() bool { return c.Stats().Overdue == 0 })
	if !ctxEnded.Load() {
		t.Errorf("the overdue handler's context had not ended")
	}
	if st := c.Stats(); st.Handled != 0 || st.InFlight != 0 {
		t.Errorf("after the overdue handler returned: %d handled, %d in flight; want 0, 0 (its task belongs to the next holder)", st.Handled, st.InFlight)
	}
	t.Logf("figures: Run returned %v after cancellation (ShutdownTimeout %v)", took.Round(time.Millisecond), shutdown)
}

// flakyOpen fails the first n Opens of a source: a broker blip at the
// start of every term.
type flakyOpen struct {
	transport.Source
	left atomic.Int64
}

func (f *flakyOpen) Open(ctx context.Context, from []transport.Position) (transport.Reader, error) {
	if f.left.Add(-1) >= 0 {
		return nil, errors.New("connection refused (injected)")
	}
	return f.Source.Open(ctx, from)
}

// A source whose Open fails the first three times in each worker: the held
// index is served anyway, every task done once, in seconds.
func TestSourceOpenFailuresAreRetriedWhileHeld(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		log := memory.NewLog(4)
		var sources []*flakyOpen
		var mu sync.Mutex
		src := func() transport.Source {
			f := &flakyOpen{Source: log.Source()}
			f.left.Store(3)
			mu.Lock()
			sources = append(sources, f)
			mu.Unlock()
			return f
		}
		g := newGroup(t, src, consumer.Options{Concurrency: conc}, func(int, *partition.Lease) consumer.Handler {
			return func(context.Context, *transport.Message) error { return nil }
		})
		const ids, each = 200, 5
		fillTasks(func(k string, p []byte) { log.Append(k, p) }, ids, each)
		start := time.Now()
		for range 3 {
			g.start()
		}
		waitFor(t, "every task", func() bool { return g.count() >= ids*each })
		took := time.Since(start)
		st := g.stats()
		for w := range 3 {
			g.stop(w + 1)
		}
		tl := g.exactlyOnce(ids, each)
		if st.OpenFailures != 9 {
			t.Errorf("%d open failures counted; want 9 (3 per worker)", st.OpenFailures)
		}
		t.Logf("figures: %d tasks done, %d repeats, all in %v from the start of 3 workers", g.count(), tl.repeats, took.Round(time.Millisecond))
	})
}

// A Redis stream entry without its id field cannot succeed: it is
// dead-lettered at once (one failed attempt, whatever MaxAttempts), with
// no DeadLetter into the group's dead-letter stream, where nandi dead list
// finds it, once; and nothing else is held back.
func TestUndecodableStreamEntryIsNotRetried(t *testing.T) {
	for _, withDL := range []bool{true, false} {
		t.Run(fmt.Sprintf("DeadLetter=%v", withDL), func(t *testing.T) {
			client := server(t).Client()
			stream := "outbox-" + strconv.FormatBool(withDL)
			ctx := context.Background()
			add := func(vals ...any) {
				if err := client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: vals}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			var dead []error
			var reported atomic.Int64
			opts := consumer.Options{Concurrency: 1 + 3*len(stream)%2, OnError: func(*transport.Message, int, error) { reported.Add(1) }}
			if withDL {
				opts.MaxAttempts = 5
				opts.DeadLetter = func(ctx context.Context, m *transport.Message, err error) error {
					mu.Lock()
					defer mu.Unlock()
					dead = append(dead, err)
					return nil
				}
			}
			src := func() transport.Source {
				s, err := redisstream.New(client, stream, redisstream.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			g := newGroup(t, src, opts, func(int, *partition.Lease) consumer.Handler {
				return func(context.Context, *transport.Message) error { return nil }
			})
			for range 2 {
				g.start()
			}
			g.settle()
			const ids, each = 100, 3
			half := false
			fillTasks(func(k string, p []byte) {
				if !half && k == "50" {
					add("payload", "no id here")
					half = true
				}
				add("id", k, "payload", p)
			}, ids, each)
			waitFor(t, "every task", func() bool { return g.count() == ids*each })
			waitFor(t, "the entry without an id to be dealt with", func() bool {
				st := g.stats()
				return st.DeadLetters+st.Skipped == 1
			})
			time.Sleep(100 * time.Millisecond) // a second letter, if any, would come now
			st := g.stats()
			for w := range 2 {
				g.stop(w + 1)
			}
			g.exactlyOnce(ids, each)
			if st.Failed != 1 || reported.Load() != 1 {
				t.Errorf("%d failed attempts, OnError called %d times; want 1 and 1 (no retry)", st.Failed, reported.Load())
			}
			if withDL {
				if len(dead) != 1 || !errors.Is(dead[0], consumer.ErrPermanent) || !strings.Contains(dead[0].Error(), `has no field "id"`) {
					t.Errorf("dead letters %v; want one permanent error naming the missing field", dead)
				}
			} else {
				if st.Skipped != 0 || st.DeadLetters != 1 {
					t.Errorf("%d skipped, %d dead-lettered; want 0 skipped, 1 in the group's dead-letter stream", st.Skipped, st.DeadLetters)
				}
				letters, err := deadletter.List(ctx, client, deadletter.Stream(g.name), "-", "+", 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(letters) != 1 || !strings.Contains(letters[0].Error, `has no field "id"`) || string(letters[0].Payload) != "no id here" || letters[0].Source != stream {
					t.Errorf("the group's dead-letter stream holds %+v; want one letter: the entry without an id, its error naming the field, from %s", letters, stream)
				}
			}
		})
	}
}

// Permanent marks an error through any wrapping; a handler that returns
// one skips the retries.
func TestPermanentErrorSkipsTheRetries(t *testing.T) {
	base := errors.New("customer 7 does not exist")
	err := fmt.Errorf("sending: %w", consumer.Permanent(base))
	if !errors.Is(err, consumer.ErrPermanent) || !errors.Is(err, base) || !consumer.IsPermanent(err) {
		t.Fatalf("%v: errors.Is ErrPermanent %v, base %v; want both", err, errors.Is(err, consumer.ErrPermanent), errors.Is(err, base))
	}
	if consumer.Permanent(nil) != nil || consumer.IsPermanent(base) {
		t.Fatal("Permanent(nil) must be nil, and an unmarked error not permanent")
	}
	log := memory.NewLog(1)
	var attempts atomic.Int64
	h := func(ctx context.Context, m *transport.Message) error {
		if m.Key == "7" {
			attempts.Add(1)
			return err
		}
		return nil
	}
	c, _ := consumer.New(lease(t, server(t).Client()), log.Source(), h, consumer.Options{MaxAttempts: 0})
	stop := run(t, c)
	log.Append("7", nil)
	log.Append("8", nil)
	waitFor(t, "both tasks dealt with", func() bool { st := c.Stats(); return st.Handled == 1 && st.DeadLetters == 1 })
	stop()
	if n := attempts.Load(); n != 1 {
		t.Errorf("a permanent failure was attempted %d times; want 1", n)
	}
}

// Discarding is a choice the user writes (DeadLetter: consumer.Discard):
// the task is dropped, counted and logged with its key, the consumer says
// once that it discards, and nothing is written to the dead-letter stream.
func TestDiscardIsSaidAndCounted(t *testing.T) {
	log := memory.NewLog(1)
	var buf syncBuffer
	l := lease(t, server(t).Client())
	c, _ := consumer.New(l, log.Source(), func(ctx context.Context, m *transport.Message) error {
		if m.Key == "7" {
			return consumer.Permanent(errors.New("no such customer"))
		}
		return nil
	}, consumer.Options{DeadLetter: consumer.Discard, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	stop := run(t, c)
	log.Append("7", nil)
	log.Append("8", nil)
	waitFor(t, "both tasks dealt with", func() bool { st := c.Stats(); return st.Handled == 1 && st.Skipped == 1 })
	stop()
	out := buf.String()
	if n := strings.Count(out, "permanent failures are discarded"); n != 1 {
		t.Errorf("the consumer said %d times that it discards; want once:\n%s", n, out)
	}
	if !strings.Contains(out, `msg="task discarded`) || !strings.Contains(out, "key=7") {
		t.Errorf("the discarded task is not logged with its key:\n%s", out)
	}
	if n, _ := server(t).Client().XLen(context.Background(), deadletter.Stream(l.Name())).Result(); n != 0 {
		t.Errorf("the dead-letter stream holds %d letters; want 0 (discarded)", n)
	}
}

// A panic in Options.ID, OnError or DeadLetter is recovered too: ID's makes
// the message a permanent failure; OnError's is logged; DeadLetter's is a
// failed dead letter, retried.
func TestPanicsInHooksAreRecovered(t *testing.T) {
	log := memory.NewLog(1)
	var dlCalls atomic.Int64
	var dead atomic.Value
	opts := consumer.Options{
		RetryMin: time.Millisecond, MaxAttempts: 1,
		ID: func(m *transport.Message) (uint64, error) {
			if m.Key == "bad" {
				panic("no id for you")
			}
			return consumer.ID(m.Key), nil
		},
		OnError: func(*transport.Message, int, error) { panic("OnError is broken too") },
		DeadLetter: func(ctx context.Context, m *transport.Message, err error) error {
			if dlCalls.Add(1) == 1 {
				panic("the dead-letter queue is down")
			}
			dead.Store(err)
			return nil
		},
	}
	h := func(ctx context.Context, m *transport.Message) error { return nil }
	c, _ := consumer.New(lease(t, server(t).Client()), log.Source(), h, opts)
	stop := run(t, c)
	log.Append("bad", nil)
	log.Append("1", nil)
	waitFor(t, "the bad message dead-lettered", func() bool { return c.Stats().DeadLetters == 1 })
	stop()
	err, _ := dead.Load().(error)
	var pe *consumer.PanicError
	if !errors.As(err, &pe) || pe.Func != "ID" || !consumer.IsPermanent(err) {
		t.Errorf("dead-lettered with %v; want a permanent *PanicError from ID", err)
	}
	if st := c.Stats(); st.Panics != 3 || st.Handled != 1 || dlCalls.Load() != 2 {
		t.Errorf("%d panics, %d handled, DeadLetter called %d times; want 3 (ID, OnError, DeadLetter), 1, 2", st.Panics, st.Handled, dlCalls.Load())
	}
}

// warnLog records the Warn lines a consumer logs.
type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *warnLog) WithGroup(string) slog.Handler            { return h }
func (h *warnLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.Key + "=" + a.Value.String()); return true })
		h.mu.Lock()
		h.msgs = append(h.msgs, b.String())
		h.mu.Unlock()
	}
	return nil
}

// Twenty handlers overdue at a shutdown are two Warn lines, not one per
// handler: that they are overdue (with their count, and every key and
// position: each of their tasks may run twice), and, once
// the last has returned, that they all have (count, failures, keys). On
// a busy machine a line per handler hid the rest of the log.
func TestOverdueHandlersAreTwoLinesNotOnePerHandler(t *testing.T) {
	const n = 20
	log := memory.NewLog(1)
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(n)
	h := func(ctx context.Context, m *transport.Message) error {
		started.Done()
		<-release
		if m.Key == "3" {
			return errors.New("late and failed")
		}
		return nil
	}
	rec := &warnLog{}
	c, err := consumer.New(lease(t, server(t).Client()), log.Source(), h, consumer.Options{Concurrency: n, ShutdownTimeout: 300 * time.Millisecond, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		log.Append(strconv.Itoa(i), nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ret := make(chan error, 1)
	go func() { ret <- c.Run(ctx) }()
	started.Wait()
	cancel()
	if err := <-ret; err != nil {
		t.Fatalf("Run = %v", err)
	}
	close(release)
	waitFor(t, "the overdue handlers to return", func() bool { return c.Stats().Overdue == 0 })
	waitFor(t, "the line saying they have", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.msgs) >= 2
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var overdue, returned int
	for _, m := range rec.msgs {
		switch {
		case strings.HasPrefix(m, "handlers overdue:") && strings.Contains(m, "count=20"):
			overdue++
			// Each may run twice: every one is named, by key and position.
			_, ps, _ := strings.Cut(m, "positions=[")
			ps, _, _ = strings.Cut(ps, "]")
			_, ks, _ := strings.Cut(m, "keys=[")
			ks, _, _ = strings.Cut(ks, "]")
			if len(strings.Fields(ps)) != n || len(strings.Fields(ks)) != n {
				t.Errorf("the overdue line names %d positions and %d keys; want all %d: %s", len(strings.Fields(ps)), len(strings.Fields(ks)), n, m)
			}
		case strings.HasPrefix(m, "overdue handlers returned:") && strings.Contains(m, "count=20") && strings.Contains(m, "failed=1"):
			returned++
		}
	}
	if overdue != 1 || returned != 1 || len(rec.msgs) != 2 {
		t.Errorf("Warn lines %q; want two: 20 handlers overdue, and 20 returned with 1 failed", rec.msgs)
	}
}

// syncBuffer is a buffer a logger can write from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The default dead-letter stream is bounded without losing anything:
// while it holds DefaultDeadLetterLimit letters a new letter is refused,
// counted and retried, its task kept (and the other ids flowing); once
// letters are deleted, it is written.
func TestAFullDeadLetterStreamKeepsTheTask(t *testing.T) {
	client := server(t).Client()
	ctx := context.Background()
	l := lease(t, client)
	stream := deadletter.Stream(l.Name())
	for n := 0; n < consumer.DefaultDeadLetterLimit; n += 10_000 {
		p := client.Pipeline()
		for range 10_000 {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"key", "old"}})
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	log := memory.NewLog(1)
	c, _ := consumer.New(l, log.Source(), func(ctx context.Context, m *transport.Message) error {
		if m.Key == "7" {
			return consumer.Permanent(errors.New("no such customer"))
		}
		return nil
	}, consumer.Options{RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond})
	stop := run(t, c)
	defer stop()
	log.Append("7", nil)
	log.Append("8", nil)
	waitFor(t, "the other id handled, and the letter refused", func() bool {
		st := c.Stats()
		return st.Handled == 1 && st.DeadLetterFailures >= 3
	})
	if st := c.Stats(); st.DeadLetters != 0 || st.Skipped != 0 {
		t.Fatalf("%d dead-lettered, %d skipped while the stream is full; want 0 and 0 (the task kept)", st.DeadLetters, st.Skipped)
	}
	if err := client.XTrimMaxLen(ctx, stream, consumer.DefaultDeadLetterLimit-10).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the letter written once there is room", func() bool { return c.Stats().DeadLetters == 1 })
	latest, err := deadletter.Latest(ctx, client, stream, 1)
	if err != nil || len(latest) != 1 || latest[0].Key != "7" {
		t.Fatalf("the newest letter is %+v (%v); want task 7's", latest, err)
	}
}
