package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/leasecheck"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
)

// group runs leases in this process against real Redis and samples every
// worker's Current() every millisecond, checking at each sample that no two
// workers hold one index and that one value of replicas is live.
type group struct {
	t      *testing.T
	opts   partition.Options
	client func(t *testing.T) redis.UniversalClient

	mu   sync.Mutex
	ws   map[int]*worker
	next int
	bad  []string
	n    int // samples taken

	stop chan struct{}
	wg   sync.WaitGroup
}

type worker struct {
	id     int
	l      *partition.Lease
	cancel context.CancelFunc
	done   chan error
}

func newGroup(t *testing.T, opts partition.Options, client func(t *testing.T) redis.UniversalClient) *group {
	g := &group{t: t, opts: opts, client: client, ws: map[int]*worker{}, stop: make(chan struct{})}
	g.wg.Add(1)
	go g.sampler()
	t.Cleanup(g.close)
	return g
}

// settledGroup starts n workers and waits until they hold a complete
// partition.
func settledGroup(t *testing.T, opts partition.Options, client func(t *testing.T) redis.UniversalClient, n int) *group {
	g := newGroup(t, opts, client)
	for range n {
		g.join()
	}
	g.waitSettled(6)
	return g
}

func (g *group) join() *worker { return g.joinWith(g.opts, g.client(g.t)) }

func (g *group) joinWith(opts partition.Options, c redis.UniversalClient) *worker {
	l, err := partition.New(c, opts)
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.mu.Lock()
	g.next++
	w := &worker{id: g.next, l: l, cancel: cancel, done: make(chan error, 1)}
	g.ws[w.id] = w
	g.mu.Unlock()
	go func() { w.done <- l.Run(ctx) }()
	return w
}

// leave stops a worker and requires Run to return within a second.
func (g *group) leave(w *worker) {
	g.t.Helper()
	w.cancel()
	select {
	case err := <-w.done:
		if err != nil {
			g.t.Errorf("worker %d: Run: %v", w.id, err)
		}
	case <-time.After(time.Second):
		g.t.Fatalf("worker %d: Run did not return within a second of its context ending", w.id)
	}
	g.mu.Lock()
	delete(g.ws, w.id)
	g.mu.Unlock()
}

func (g *group) workers() []*worker {
	g.mu.Lock()
	defer g.mu.Unlock()
	ws := make([]*worker, 0, len(g.ws))
	for _, w := range g.ws {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].id < ws[j].id })
	return ws
}

func (g *group) sampler() {
	defer g.wg.Done()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-tick.C:
		}
		for _, bad := range leasecheck.Exclusive(g.held()) {
			g.fail("at %s %s", time.Now().Format("15:04:05.000"), bad)
		}
		g.mu.Lock()
		g.n++
		g.mu.Unlock()
	}
}

func (g *group) fail(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.bad) < 20 {
		g.bad = append(g.bad, fmt.Sprintf(format, args...))
	}
}

func (g *group) held() []leasecheck.Held {
	var out []leasecheck.Held
	for _, w := range g.workers() {
		a, ok := w.l.Current()
		out = append(out, leasecheck.Held{Worker: w.id, Index: a.Index, Replicas: a.Replicas, OK: ok})
	}
	return out
}

// terms returns every worker's live term (nil where none).
func (g *group) terms() []*partition.Term {
	var out []*partition.Term
	for _, w := range g.workers() {
		out = append(out, w.l.Term())
	}
	return out
}

// settledErr is nil when the live workers hold a complete partition.
func (g *group) settledErr() error { return leasecheck.Complete(g.held()) }

// waitSettled waits until the group holds a complete partition, failing
// after the given number of intervals.
func (g *group) waitSettled(intervals float64) time.Duration {
	g.t.Helper()
	start := time.Now()
	deadline := start.Add(time.Duration(intervals * raceSlowdown * float64(g.opts.Interval)))
	for {
		err := g.settledErr()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("the group did not settle within %g intervals: %v", intervals*raceSlowdown, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func (g *group) snapshot() map[int]partition.Assignment {
	out := map[int]partition.Assignment{}
	for _, w := range g.workers() {
		if a, ok := w.l.Current(); ok {
			out[w.id] = a
		}
	}
	return out
}

// verify fails the test with every violation the sampler saw.
func (g *group) verify() {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.bad) > 0 {
		g.t.Fatalf("%d violations in %d samples:\n%s", len(g.bad), g.n, strings.Join(g.bad, "\n"))
	}
	if g.n == 0 {
		g.t.Fatalf("the sampler took no sample")
	}
	g.t.Logf("%d samples of %d workers, no overlap", g.n, len(g.ws))
}

func (g *group) close() {
	for _, w := range g.workers() {
		g.leave(w)
	}
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	g.wg.Wait()
}

// clientOf returns a function making plain clients of srv.
func clientOf(srv *redistest.Server, opts ...func(*redis.Options)) func(t *testing.T) redis.UniversalClient {
	return func(t *testing.T) redis.UniversalClient { return srv.Client(opts...) }
}

func groupName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
}
