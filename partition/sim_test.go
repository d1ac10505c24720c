package partition

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nandi-go/nandi/internal/leasecheck"
)

// sim runs a group of leases on a memStore inside a synctest bubble, records
// every holding exactly (from the leases' own trace) and samples every
// worker's Current() as time advances, checking the invariants at each
// sample.
type sim struct {
	t     testing.TB
	st    *memStore
	opts  Options
	seed  uint64
	mu    sync.Mutex
	holds []*holding
	open  map[int]*holding
	ws    map[int]*simWorker
	next  int
	bad   []string
	step  time.Duration
}

type simWorker struct {
	id      int
	l       *Lease
	k       *link
	cancel  context.CancelFunc
	done    chan error
	started time.Time
}

type holding struct {
	worker     int
	a          Assignment
	start, end time.Time
	deadline   time.Time
	closed     bool
	why        error
}

func newSim(t testing.TB, opts Options, seed uint64) *sim {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, st: newMemStore(), opts: opts, seed: seed, open: map[int]*holding{}, ws: map[int]*simWorker{}, step: opts.Interval / 50}
}

func (s *sim) record(id int, ev traceEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.open[id]
	switch ev.kind {
	case traceAcquired:
		if h != nil {
			s.bad = append(s.bad, fmt.Sprintf("worker %d acquired %+v while holding %+v", id, ev.a, h.a))
		}
		h = &holding{worker: id, a: ev.a, start: ev.at, deadline: ev.deadline}
		s.open[id] = h
		s.holds = append(s.holds, h)
	case traceRenewed:
		if h == nil || h.a != ev.a {
			s.bad = append(s.bad, fmt.Sprintf("worker %d renewed %+v without holding it", id, ev.a))
			return
		}
		if ev.at.After(h.deadline) {
			s.bad = append(s.bad, fmt.Sprintf("worker %d renewed %+v at %v after its deadline %v", id, ev.a, ev.at, h.deadline))
		}
		h.deadline = ev.deadline
	case traceLost:
		if h == nil {
			s.bad = append(s.bad, fmt.Sprintf("worker %d lost %+v without holding it", id, ev.a))
			return
		}
		h.end, h.closed, h.why = ev.at, true, ev.err
		if h.deadline.Before(h.end) {
			h.end = h.deadline
		}
		delete(s.open, id)
	}
}

func (s *sim) start(opts Options) *simWorker { return s.startLinked(opts, nil) }

// startLinked starts a worker whose link setup has set up before its first
// call.
func (s *sim) startLinked(opts Options, setup func(*link)) *simWorker {
	s.next++
	id := s.next
	iv := opts.Interval.Microseconds()
	k := &link{s: s.st, iv: iv, ppm: gapPPM(opts.Gap), rnd: rand.New(rand.NewPCG(s.seed^0x9e3779b97f4a7c15, uint64(id)))}
	if setup != nil {
		setup(k)
	}
	l := newLease(k, opts)
	l.rnd = rand.New(rand.NewPCG(s.seed, uint64(id)))
	l.trace = func(ev traceEvent) { s.record(id, ev) }
	ctx, cancel := context.WithCancel(context.Background())
	w := &simWorker{id: id, l: l, k: k, cancel: cancel, done: make(chan error, 1), started: time.Now()}
	go func() { w.done <- l.Run(ctx) }()
	s.ws[id] = w
	return w
}

func (s *sim) join() *simWorker { return s.start(s.opts) }

// stop cancels a worker and requires Run to have returned before any time
// passes, whatever its link is doing.
func (s *sim) stop(w *simWorker) error {
	w.cancel()
	synctest.Wait()
	select {
	case err := <-w.done:
		delete(s.ws, w.id)
		return err
	default:
		s.t.Fatalf("worker %d: Run did not return when its context ended", w.id)
		return nil
	}
}

// advance moves fake time forward by d in small steps, sampling every
// worker's Current() at each step.
func (s *sim) advance(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		time.Sleep(min(s.step, time.Until(end)))
		synctest.Wait()
		s.sample()
	}
}

func (s *sim) sample() {
	for _, bad := range leasecheck.Exclusive(s.held()) {
		s.fail("at %v %s", time.Now().Format("15:04:05.000"), bad)
	}
}

// held is what each worker holds by the lease's timing: a provisional
// term (the fenced handoff) is its user's ledger's to fence, not counted.
func (s *sim) held() []leasecheck.Held {
	var out []leasecheck.Held
	for _, w := range s.sorted() {
		a, ok := w.l.Current()
		if t := w.l.Term(); ok && t != nil && t.Provisional() {
			ok = false
		}
		out = append(out, leasecheck.Held{Worker: w.id, Index: a.Index, Replicas: a.Replicas, OK: ok})
	}
	return out
}

func (s *sim) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) < 20 {
		s.bad = append(s.bad, fmt.Sprintf(format, args...))
	}
}

func (s *sim) sorted() []*simWorker {
	ws := make([]*simWorker, 0, len(s.ws))
	for _, w := range s.ws {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].id < ws[j].id })
	return ws
}

// overlaps checks the recorded holdings: no two workers hold one index at
// one moment, and no two values of replicas are live at once.
func (s *sim) overlaps() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	hs := make([]leasecheck.Holding, 0, len(s.holds))
	for _, h := range s.holds {
		end := earliest(h.deadline, now)
		if h.closed {
			end = h.end
		}
		hs = append(hs, leasecheck.Holding{Worker: h.worker, Index: h.a.Index, Replicas: h.a.Replicas, Start: h.start.UnixNano(), End: end.UnixNano()})
	}
	return leasecheck.Overlaps(hs)
}

// settled asserts that the live workers hold a complete partition: n
// workers hold indexes 0..n-1 of n.
// keepsItsTerms advances n intervals and requires every worker to end them
// holding the very term it held before: no reshuffle, the same token.
func (s *sim) keepsItsTerms(n int) {
	held := map[int]Assignment{}
	for _, w := range s.sorted() {
		held[w.id], _ = w.l.Current()
	}
	s.advance(time.Duration(n) * s.opts.Interval)
	for _, w := range s.sorted() {
		if a, _ := w.l.Current(); a != held[w.id] {
			s.t.Errorf("worker %d holds %+v after %d intervals; want %+v (no reshuffle, same token)", w.id, a, n, held[w.id])
		}
	}
}

func (s *sim) settled() error { return leasecheck.Complete(s.held()) }

func (s *sim) verify() {
	s.t.Helper()
	bad := append(s.overlaps(), s.bad...)
	if len(bad) > 0 {
		s.t.Fatalf("%d violations:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

func (s *sim) stopAll() {
	for _, w := range s.sorted() {
		if err := s.stop(w); err != nil {
			s.t.Errorf("worker %d: Run: %v", w.id, err)
		}
	}
}

// firstAcquired is when worker id first held anything.
func (s *sim) firstAcquired(id int) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.holds {
		if h.worker == id {
			return h.start, true
		}
	}
	return time.Time{}, false
}

func (s *sim) lostCount() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, h := range s.holds {
		if h.closed {
			out[h.why.Error()]++
		}
	}
	return out
}

var simOpts = Options{Name: "sim", Interval: 200 * time.Millisecond, Gap: 0.125}
