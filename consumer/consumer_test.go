package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var srv *redistest.Server

// server starts one redis-server for the package's tests.
func server(t testing.TB) *redistest.Server {
	t.Helper()
	if srv == nil {
		srv = redistest.Start(t)
		t.Cleanup(func() { srv = nil })
	}
	return srv
}

func lease(t *testing.T, c redis.UniversalClient) *partition.Lease {
	t.Helper()
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	l, err := partition.New(c, partition.Options{Name: name, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// run runs c until stop is closed, and fails the test if Run fails.
func run(t *testing.T, c *consumer.Consumer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !waitUntil(10*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitUntil polls cond until it holds (true) or limit has passed (false).
func waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func TestNewRefusesBadOptions(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer cl.Close()
	l, err := partition.New(cl, partition.Options{Name: "x", Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src := memory.NewLog(1).Source()
	h := func(context.Context, *transport.Message) error { return nil }
	for _, tc := range []struct {
		opts consumer.Options
		want string
	}{
		{consumer.Options{Concurrency: -1}, "Concurrency"},
		{consumer.Options{MinTaskTime: 600 * time.Millisecond}, "MinTaskTime"},
		{consumer.Options{MinTaskTime: -time.Second}, "MinTaskTime"},
		{consumer.Options{MaxAttempts: -1}, "MaxAttempts"},
		{consumer.Options{RetryMin: time.Second, RetryMax: time.Millisecond}, "RetryMax"},
	} {
		_, err := consumer.New(l, src, h, tc.opts)
		if !errors.Is(err, consumer.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want ErrInvalidOptions naming %s", tc.opts, err, tc.want)
		}
	}
	if _, err := consumer.New(l, src, nil, consumer.Options{}); !errors.Is(err, consumer.ErrInvalidOptions) {
		t.Errorf("New with a nil handler = %v; want ErrInvalidOptions", err)
	}
}

func TestIDIsTheDecimalOrTheFNV1aHash(t *testing.T) {
	for key, want := range map[string]uint64{
		"42":                   42,
		"0042":                 42,
		"18446744073709551615": 18446744073709551615,
		"abc":                  0xe71fa2190541574b, // FNV-1a 64 of "abc"
		"":                     0xcbf29ce484222325, // the offset basis
		"-1":                   0x07d00b07b497d12b, // not a uint64: hashed
	} {
		if got := consumer.ID(key); got != want {
			t.Errorf("ID(%q) = %#x; want %#x", key, got, want)
		}
	}
}

// One worker, Concurrency 8: ids run in parallel, one id never twice at
// once, and each id's tasks in the order of the log.
func TestPerIDOrderWithConcurrency(t *testing.T) {
	s := server(t)
	log := memory.NewLog(3)
	const ids, each = 200, 20
	var mu sync.Mutex
	next := map[int]int{}
	running := map[int]bool{}
	var now, peak atomic.Int64
	var handled atomic.Int64
	h := func(ctx context.Context, m *transport.Message) error {
		x, _ := strconv.Atoi(m.Key)
		seq, _ := strconv.Atoi(string(m.Payload))
		mu.Lock()
		if running[x] {
			t.Errorf("id %d runs twice at once", x)
		}
		if next[x] != seq {
			t.Errorf("id %d: seq %d handled when %d was due", x, seq, next[x])
		}
		running[x] = true
		mu.Unlock()
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(time.Millisecond)
		now.Add(-1)
		mu.Lock()
		running[x] = false
		next[x] = seq + 1
		mu.Unlock()
		handled.Add(1)
		return nil
	}
	c, err := consumer.New(lease(t, s.Client()), log.Source(), h, consumer.Options{Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	for seq := range each {
		for x := range ids {
			log.Append(strconv.Itoa(x), []byte(strconv.Itoa(seq)))
		}
	}
	waitFor(t, "every task", func() bool { return handled.Load() == ids*each })
	stop()
	if p := peak.Load(); p < 2 || p > 8 {
		t.Errorf("at most %d handlers ran at once; want between 2 and Concurrency (8)", p)
	}
}

// A failing task is retried, blocks the tasks of its id behind it, and is
// never skipped; other ids go on.
func TestFailingTaskIsRetriedInOrderNeverSkipped(t *testing.T) {
	s := server(t)
	log := memory.NewLog(1)
	var mu sync.Mutex
	var order []string
	fails := 0
	var reported atomic.Int64
	h := func(ctx context.Context, m *transport.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if string(m.Payload) == "7/0" && fails < 3 {
			fails++
			return fmt.Errorf("attempt %d fails", fails)
		}
		order = append(order, string(m.Payload))
		return nil
	}
	c, err := consumer.New(lease(t, s.Client()), log.Source(), h, consumer.Options{
		Concurrency: 4, RetryMin: time.Millisecond,
		OnError: func(m *transport.Message, attempt int, err error) { reported.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	for _, p := range []string{"7/0", "8/0", "7/1", "8/1"} {
		log.Append(strings.Split(p, "/")[0], []byte(p))
	}
	waitFor(t, "four tasks", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 4 })
	stop()
	pos := map[string]int{}
	for i, p := range order {
		pos[p] = i
	}
	if pos["7/1"] < pos["7/0"] {
		t.Errorf("order %v: 7/1 ran before the failing 7/0 succeeded", order)
	}
	if n := reported.Load(); n != 3 {
		t.Errorf("OnError called %d times; want 3", n)
	}
	if st := c.Stats(); st.Failed != 3 || st.Handled != 4 {
		t.Errorf("Stats = %+v; want 3 failed attempts, 4 handled", st)
	}
}

func TestDeadLetterAfterMaxAttempts(t *testing.T) {
	s := server(t)
	log := memory.NewLog(1)
	var dead []string
	var mu sync.Mutex
	var handled atomic.Int64
	h := func(ctx context.Context, m *transport.Message) error {
		if m.Key == "13" {
			return errors.New("always fails")
		}
		handled.Add(1)
		return nil
	}
	c, err := consumer.New(lease(t, s.Client()), log.Source(), h, consumer.Options{
		MaxAttempts: 2, RetryMin: time.Millisecond,
		DeadLetter: func(ctx context.Context, m *transport.Message, err error) error {
			mu.Lock()
			defer mu.Unlock()
			dead = append(dead, m.Key+": "+err.Error())
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	log.Append("13", nil)
	log.Append("14", nil)
	waitFor(t, "the next task and the dead letter", func() bool { return handled.Load() == 1 && c.Stats().DeadLetters == 1 })
	stop()
	if len(dead) != 1 || dead[0] != "13: always fails" {
		t.Errorf("dead letters %q; want the failing task once, with its error", dead)
	}
	if st := c.Stats(); st.Failed != 2 || st.DeadLetters != 1 {
		t.Errorf("Stats = %+v; want 2 failed attempts, 1 dead letter", st)
	}
}

// Shutdown finishes the work in flight while the lease is held, writes the
// checkpoint, and a restarted worker does not do the work again.
func TestShutdownDrainsAndTheNextRunDoesNotRepeat(t *testing.T) {
	s := server(t)
	log := memory.NewLog(2)
	var mu sync.Mutex
	count := map[string]int{}
	started := make(chan struct{}, 1)
	h := func(ctx context.Context, m *transport.Message) error {
		if m.Key == "slow" {
			select {
			case started <- struct{}{}:
			default:
			}
			select {
			case <-time.After(150 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		count[m.Key]++
		mu.Unlock()
		return nil
	}
	for i := range 50 {
		log.Append(strconv.Itoa(i), nil)
	}
	log.Append("slow", nil)
	l := lease(t, s.Client())
	c, _ := consumer.New(l, log.Source(), h, consumer.Options{Concurrency: 4})
	stop := run(t, c)
	<-started
	stop()
	if count["slow"] != 1 {
		t.Fatalf("the task in flight at shutdown was handled %d times; want 1 (drained, not cancelled)", count["slow"])
	}
	c2, _ := consumer.New(lease(t, s.Client()), log.Source(), h, consumer.Options{})
	stop = run(t, c2)
	log.Append("after", nil)
	waitFor(t, "the new task", func() bool { mu.Lock(); defer mu.Unlock(); return count["after"] == 1 })
	stop()
	for k, n := range count {
		if n != 1 {
			t.Errorf("task %s handled %d times; want exactly once across the restart", k, n)
		}
	}
}

// A handler's context ends when the lease runs out: here the worker's link
// to Redis holds every byte, so no renewal comes.
func TestHandlerContextEndsWhenTheLeaseRunsOut(t *testing.T) {
	s := server(t)
	p := redistest.NewLink(t, s.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer client.Close()
	l := lease(t, client)
	log := memory.NewLog(1)
	type ended struct {
		held bool
		at   time.Time
	}
	out := make(chan ended, 1)
	var first atomic.Bool
	h := func(ctx context.Context, m *transport.Message) error {
		if !first.CompareAndSwap(false, true) {
			return nil // done again by the next term, once the link is back
		}
		<-ctx.Done()
		_, held := l.Current()
		out <- ended{held: held, at: time.Now()}
		return ctx.Err()
	}
	c, _ := consumer.New(l, log.Source(), h, consumer.Options{})
	stop := run(t, c)
	defer stop()
	if _, err := l.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	log.Append("1", nil)
	time.Sleep(50 * time.Millisecond)
	p.Hold()
	select {
	case e := <-out:
		if e.held {
			t.Errorf("the handler's context ended while the lease was still held")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end after the lease lost its store")
	}
	p.Release()
	waitFor(t, "the task done again by the next term", func() bool { st := c.Stats(); return st.Abandoned == 1 && st.Handled == 1 })
}

// A lease the group refuses (other settings) ends Run with its error, every
// time: the error must not be lost to a race with the loop's own end.
func TestRunReturnsTheLeaseError(t *testing.T) {
	s := server(t)
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	first, _ := partition.New(s.Client(), partition.Options{Name: name, Interval: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	if _, err := first.Next(ctx); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		other, _ := partition.New(s.Client(), partition.Options{Name: name, Interval: 300 * time.Millisecond})
		c, _ := consumer.New(other, memory.NewLog(1).Source(), func(context.Context, *transport.Message) error { return nil }, consumer.Options{})
		if err := c.Run(context.Background()); !errors.Is(err, partition.ErrSettingsMismatch) {
			t.Fatalf("Run with a refused lease = %v; want ErrSettingsMismatch", err)
		}
	}
	cancel()
	<-done
}
