package consumer_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// group runs workers of one group on the package's redis-server, each with
// its own lease and consumer as separate processes would have, and records
// every successful handler call.
type group struct {
	t       *testing.T
	name    string
	opts    consumer.Options
	src     func() transport.Source
	handler func(w int, l *partition.Lease) consumer.Handler

	mu      sync.Mutex
	done    []done
	workers map[int]*gworker
	next    int
}

// done is one task a handler finished.
type done struct {
	worker  int
	key     string
	seq     int
	at      time.Time
	held    partition.Assignment
	holding bool
}

type gworker struct {
	c      *consumer.Consumer
	l      *partition.Lease
	cancel context.CancelFunc
	ret    chan error
}

func newGroup(t *testing.T, src func() transport.Source, opts consumer.Options, h func(w int, l *partition.Lease) consumer.Handler) *group {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	g := &group{t: t, name: name, opts: opts, src: src, handler: h, workers: map[int]*gworker{}}
	t.Cleanup(func() {
		for w := range g.workers {
			g.stop(w)
		}
	})
	return g
}

// record wraps a handler: a nil return is a finished task, recorded with
// the term its call began under (what the consumer guarantees: a call
// begins only under a live term that owns its task; on a stalled machine
// the term can run out while a call runs, and its context ends then). The
// term is the call's own (AssignmentFromContext), live while its context
// is: the lease's Current is another thing during a fenced handoff, the
// next mapping's provisional term, not yet held, while this one serves
// until it releases.
func (g *group) record(w int, h consumer.Handler) consumer.Handler {
	return func(ctx context.Context, m *transport.Message) error {
		a, ok := consumer.AssignmentFromContext(ctx)
		ok = ok && ctx.Err() == nil
		err := h(ctx, m)
		if err == nil {
			seq, _ := strconv.Atoi(strings.TrimPrefix(string(m.Payload), m.Key+"/"))
			g.mu.Lock()
			g.done = append(g.done, done{worker: w, key: m.Key, seq: seq, at: time.Now(), held: a, holding: ok})
			g.mu.Unlock()
		}
		return err
	}
}

func (g *group) start() int {
	g.t.Helper()
	g.next++
	w := g.next
	l, err := partition.New(server(g.t).Client(), partition.Options{Name: g.name, Interval: 200 * time.Millisecond})
	if err != nil {
		g.t.Fatal(err)
	}
	c, err := consumer.New(l, g.src(), g.record(w, g.handler(w, l)), g.opts)
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gw := &gworker{c: c, l: l, cancel: cancel, ret: make(chan error, 1)}
	go func() { gw.ret <- c.Run(ctx) }()
	g.mu.Lock()
	g.workers[w] = gw
	g.mu.Unlock()
	return w
}

// stop cancels worker w's Run and returns how long Run took to return;
// it fails the test if Run returned an error or took longer than limit
// (0: no limit).
func (g *group) stopWithin(w int, limit time.Duration) time.Duration {
	g.t.Helper()
	g.mu.Lock()
	gw := g.workers[w]
	delete(g.workers, w)
	g.mu.Unlock()
	if gw == nil {
		return 0
	}
	start := time.Now()
	gw.cancel()
	var err error
	select {
	case err = <-gw.ret:
	case <-time.After(limit + 30*time.Second):
		g.t.Fatalf("worker %d: Run had not returned %v after its context ended", w, time.Since(start))
	}
	took := time.Since(start)
	if err != nil {
		g.t.Errorf("worker %d: Run = %v", w, err)
	}
	if limit > 0 && took > limit {
		g.t.Errorf("worker %d: Run returned %v after its context ended; want within %v", w, took, limit)
	}
	return took
}

func (g *group) stop(w int) time.Duration { return g.stopWithin(w, 0) }

func (g *group) worker(w int) *gworker {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.workers[w]
}

// settle waits until every running worker holds a share of a mapping with
// their number as replicas.
func (g *group) settle() {
	g.t.Helper()
	waitFor(g.t, "the group to settle", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		seen := map[int]bool{}
		for _, gw := range g.workers {
			a, ok := gw.l.Current()
			if !ok || a.Replicas != len(g.workers) || seen[a.Index] {
				return false
			}
			seen[a.Index] = true
		}
		return true
	})
}

func (g *group) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.done)
}

// countKey counts the tasks of key done.
func (g *group) countKey(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, d := range g.done {
		if d.key == key {
			n++
		}
	}
	return n
}

// keyExactlyOnceInOrder fails the test unless key's tasks key/0 ..
// key/n-1 were each done once, in that order, by a worker holding them.
func (g *group) keyExactlyOnceInOrder(key string, n int) {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	x, _ := strconv.ParseUint(key, 10, 64)
	next := 0
	var problems []string
	for _, d := range g.done {
		if d.key != key {
			continue
		}
		if d.seq != next && len(problems) < 10 {
			problems = append(problems, fmt.Sprintf("%s/%d done when %s/%d was due", key, d.seq, key, next))
		}
		if (!d.holding || !d.held.Owns(x)) && len(problems) < 10 {
			problems = append(problems, fmt.Sprintf("worker %d did %s/%d holding %+v", d.worker, key, d.seq, d.held))
		}
		next = d.seq + 1
	}
	if next != n || len(problems) > 0 {
		g.t.Errorf("%s: last done %d of %d; problems: %q", key, next-1, n, problems)
	}
}

// stats sums the running workers' stats.
func (g *group) stats() consumer.Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	var s consumer.Stats
	for _, gw := range g.workers {
		x := gw.c.Stats()
		s.Handled += x.Handled
		s.Failed += x.Failed
		s.DeadLetters += x.DeadLetters
		s.Skipped += x.Skipped
		s.Abandoned += x.Abandoned
		s.Panics += x.Panics
		s.OpenFailures += x.OpenFailures
		s.OverdueTotal += x.OverdueTotal
		s.Overdue += x.Overdue
		s.Pending += x.Pending
		s.Waiting += x.Waiting
	}
	return s
}

// tally is what the record says of tasks key/seq for ids 0..ids-1 and
// seqs 0..each-1.
type tally struct {
	missing, repeats, disorder, unowned int
	firstProblems                       []string
}

func (tl *tally) problem(format string, args ...any) {
	if len(tl.firstProblems) < 10 {
		tl.firstProblems = append(tl.firstProblems, fmt.Sprintf(format, args...))
	}
}

// check tallies the record: every task done once, in order per id, by a
// worker that held it; except the keys in except, which are not checked.
func (g *group) check(ids, each int, except ...string) tally {
	g.mu.Lock()
	defer g.mu.Unlock()
	skip := map[string]bool{}
	for _, k := range except {
		skip[k] = true
	}
	var tl tally
	seen := map[string]int{}
	last := map[string]int{}
	for _, d := range g.done {
		if skip[d.key] {
			continue
		}
		x, _ := strconv.ParseUint(d.key, 10, 64)
		if !d.holding || !d.held.Owns(x) {
			tl.unowned++
			tl.problem("worker %d did %s/%d holding %+v (held %v)", d.worker, d.key, d.seq, d.held, d.holding)
		}
		k := d.key + "/" + strconv.Itoa(d.seq)
		if seen[k]++; seen[k] > 1 {
			tl.repeats++
			tl.problem("%s done %d times", k, seen[k])
		}
		if p, ok := last[d.key]; ok && d.seq < p {
			tl.disorder++
			tl.problem("%s/%d done after %s/%d", d.key, d.seq, d.key, p)
		}
		last[d.key] = d.seq
	}
	for x := range ids {
		key := strconv.Itoa(x)
		if skip[key] {
			continue
		}
		for s := range each {
			if seen[key+"/"+strconv.Itoa(s)] == 0 {
				tl.missing++
				tl.problem("%s/%d never done", key, s)
			}
		}
	}
	return tl
}

// exactlyOnce fails the test unless check found nothing.
func (g *group) exactlyOnce(ids, each int, except ...string) tally {
	g.t.Helper()
	tl := g.check(ids, each, except...)
	if tl.missing+tl.repeats+tl.disorder+tl.unowned > 0 {
		g.t.Errorf("%d missing, %d repeats, %d out of order, %d by a worker not holding them; first: %q",
			tl.missing, tl.repeats, tl.disorder, tl.unowned, tl.firstProblems)
	}
	return tl
}

// fill appends ids x each tasks "id" -> "id/seq", seq by seq.
func fillTasks(appendTask func(key string, payload []byte), ids, each int) {
	for s := range each {
		for x := range ids {
			appendTask(strconv.Itoa(x), fmt.Appendf(nil, "%d/%d", x, s))
		}
	}
}
