package consumer

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// verdict is what an attempt leaves its task.
type verdict uint8

const (
	// finished: handled, dead-lettered or skipped. The id's next task may
	// run.
	finished verdict = iota
	// again: failed; the task runs again at the retry time and its id waits
	// until then. No goroutine waits with it.
	again
	// leave: the term is over for this task. It stays unfinished, and so do
	// the later tasks of its id (per-id order); join hands them back.
	leave
	// detached: the worker was detached while user code ran (overdue). It
	// touches nothing of the scheduler any more.
	detached
)

// sched holds a term's tasks that wait for their turn: one id at a time,
// in the order pushed per id; different ids in parallel. A task that must
// wait before its next attempt parks its id, and nothing else, until its
// retry time. It holds at most capacity tasks whole (queued, running or
// parked).
//
// A task waiting behind an id whose first task has failed is held light
// when the source can read it again (reread): its message is dropped and
// it no longer counts toward capacity, so that a failing id's backlog
// never stops the other ids; at most maxWaiting tasks are light at once.
// A light task is read again (Consumer.refill) when it comes first.
//
// With Concurrency above 1 it runs its tasks on that many worker
// goroutines, each taking a few ready ids per lock. With Concurrency 1 it
// has no goroutine of its own: intake runs tasks inline, and only the ids
// of failed tasks (and their later tasks) live here, run by intake when
// their retry time comes (due).
type sched struct {
	run func(w *worker, t *task) (verdict, time.Time)

	mu       sync.Mutex
	work     *sync.Cond // workers: an id is ready, or closed
	room     *sync.Cond // reserve: a task left, or halted
	byID     map[uint64]*idQueue
	ready    fifo     // ids whose first task may run now, in order
	parked   parkHeap // ids waiting for a retry time
	free     []*idQueue
	held     int
	capacity int
	halted   bool // reserve refuses
	closed   bool // nothing more starts; workers return

	reread     bool         // tasks behind a failing id may be held light
	maxWaiting int          // the most light tasks
	waiting    int          // light tasks (not counted in held)
	waitingN   atomic.Int64 // waiting, for Stats

	wake    chan struct{} // capacity 1: the earliest retry time changed
	done    chan struct{} // closed by close
	workers []*worker
	wg      sync.WaitGroup // the timer goroutine and every worker not detached
}

type idQueue struct {
	id      uint64
	buf     []*task // tasks are buf[head:]; the first is running, parked, ready or left
	head    int
	retryAt time.Time
	slot    int  // index in parked; -1 when not parked
	failing bool // its first task has failed: the tasks behind it are held light
}

func (q *idQueue) first() *task { return q.buf[q.head] }
func (q *idQueue) len() int     { return len(q.buf) - q.head }
func (q *idQueue) push(t *task) { q.buf = append(q.buf, t) }
func (q *idQueue) pop() {
	q.buf[q.head] = nil
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
}

// worker is one goroutine that runs user code for a term: a scheduler
// worker, or intake itself. While it runs user code it can be detached:
// the term stops waiting for it, and when the user code returns the
// goroutine ends without touching anything.
type worker struct {
	state atomic.Int32
	task  atomic.Pointer[task] // the task of the attempt in progress (nil inline)
}

const (
	workerIdle     = iota // in the consumer's own code
	workerAttempt         // in an attempt: user code may run
	workerDetached        // detached during an attempt; its WaitGroup count given back
	workerExited
)

// begin marks the start of an attempt of t (before the gate is entered).
func (w *worker) begin(t *task) {
	w.task.Store(t)
	w.state.Store(workerAttempt)
}

// end marks the end of an attempt; false means the worker was detached
// meanwhile and must return without touching the task or the scheduler.
func (w *worker) end() bool {
	return w.state.CompareAndSwap(workerAttempt, workerIdle)
}

// detached reports whether the worker was detached (cheap: one load).
func (w *worker) detached() bool { return w.state.Load() == workerDetached }

// detach detaches the worker if it is in an attempt, counting it in
// overdue first (so that its return, which takes it off, never runs ahead
// of the count). It reports whether it did.
func (w *worker) detach(overdue *atomic.Int64) bool {
	overdue.Add(1)
	if w.state.CompareAndSwap(workerAttempt, workerDetached) {
		return true
	}
	overdue.Add(-1)
	return false
}

func newSched(workers, capacity int, reread bool, maxWaiting int, run func(*worker, *task) (verdict, time.Time)) *sched {
	s := &sched{
		run:        run,
		byID:       make(map[uint64]*idQueue),
		capacity:   capacity,
		reread:     reread,
		maxWaiting: maxWaiting,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	s.work = sync.NewCond(&s.mu)
	s.room = sync.NewCond(&s.mu)
	if workers == 0 {
		return s
	}
	s.wg.Add(1 + workers)
	go s.timers()
	for range workers {
		w := &worker{}
		s.workers = append(s.workers, w)
		go s.loop(w)
	}
	return s
}

// reserve waits for room for at least one task and reserves room for up
// to k; it returns how many were reserved, 0 once the scheduler is halted.
// Every reserved task must then be queued with enqueue.
func (s *sched) reserve(k int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.held >= s.capacity && !s.halted {
		s.room.Wait()
	}
	if s.halted {
		return 0
	}
	n := min(k, s.capacity-s.held)
	s.held += n
	return n
}

// tryReserve reserves room for one task without waiting.
func (s *sched) tryReserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.halted || s.held >= s.capacity {
		return false
	}
	s.held++
	return true
}

func (s *sched) queue(id uint64) *idQueue {
	var q *idQueue
	if n := len(s.free); n > 0 {
		q, s.free = s.free[n-1], s.free[:n-1]
	} else {
		q = &idQueue{slot: -1}
	}
	q.id, q.failing = id, false
	s.byID[id] = q
	return q
}

// enqueue queues reserved tasks, each behind the earlier tasks of its id.
func (s *sched) enqueue(ts []*task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		if q := s.byID[t.id]; q != nil {
			q.push(t) // runs after the ones before it
			if q.failing {
				s.lighten(t)
			}
			continue
		}
		q := s.queue(t.id)
		q.push(t)
		s.ready.push(q)
		s.work.Signal()
	}
}

// blocked reports whether id has tasks here (then a new task of id must
// wait behind them). Without a lock: only with Concurrency 1, where intake
// is the only goroutine that changes the scheduler.
func (s *sched) blocked(id uint64) bool {
	return len(s.byID) > 0 && s.byID[id] != nil
}

// park holds a reserved task that failed inline until at, its id blocked.
func (s *sched) park(t *task, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue(t.id)
	q.push(t)
	q.retryAt = at
	q.failing = true
	heap.Push(&s.parked, q)
}

// enqueueBehind queues a reserved task behind the tasks of its id, which
// has some (Concurrency 1).
func (s *sched) enqueueBehind(t *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.byID[t.id]
	q.push(t)
	if q.failing {
		s.lighten(t)
	}
}

// lighten holds t light, if it may be: its message is dropped (it is read
// again when its turn comes) and its room given back. Under the lock.
func (s *sched) lighten(t *task) bool {
	if !s.reread || t.m == nil || t.m.Ack != nil || s.waiting >= s.maxWaiting {
		return false
	}
	t.m = nil
	s.held--
	s.waiting++
	s.waitingN.Store(int64(s.waiting))
	s.room.Signal()
	return true
}

// demote holds light every task waiting behind q's first, which has just
// failed. Under the lock.
func (s *sched) demote(q *idQueue) {
	q.failing = true
	for _, t := range q.buf[q.head+1:] {
		if t.m != nil && !s.lighten(t) && s.waiting >= s.maxWaiting {
			return
		}
	}
}

// lightRun returns t (first of its id, light) and the light tasks right
// behind it in the same shard, up to max and to the room there is (at
// least t): the tasks Consumer.refill reads again in one call.
func (s *sched) lightRun(t *task, max int) []*task {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.byID[t.id]
	n := min(max, s.capacity-s.held)
	out := []*task{t}
	for _, u := range q.buf[q.head+1:] {
		if len(out) >= n || u.m != nil || u.shard != t.shard {
			break
		}
		out = append(out, u)
	}
	return out
}

// refilled gives light tasks their messages read again; they count toward
// capacity again.
func (s *sched) refilled(ts []*task, ms []*transport.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range ts {
		t.m = ms[i]
		s.held++
		s.waiting--
	}
	s.waitingN.Store(int64(s.waiting))
}

// release gives back the room of a reserved task that never entered.
func (s *sched) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held--
	s.room.Signal()
}

// afterInline settles q's first task (Concurrency 1, where no worker takes
// ready ids) and reports whether the id's next task may run now.
func (s *sched) afterInline(q *idQueue, v verdict, at time.Time) (more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v {
	case finished:
		q.pop()
		s.held--
		q.failing = false
		if q.len() == 0 {
			delete(s.byID, q.id)
			s.free = append(s.free, q)
			return false
		}
		return true
	case again:
		q.retryAt = at
		s.demote(q)
		heap.Push(&s.parked, q)
	}
	return false
}

// first returns q's first task, under the lock.
func (s *sched) first(q *idQueue) *task {
	s.mu.Lock()
	defer s.mu.Unlock()
	return q.first()
}

// nextDue is the earliest retry time (zero when nothing is parked).
func (s *sched) nextDue() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parked) == 0 {
		return time.Time{}
	}
	return s.parked[0].retryAt
}

// due pops the ids whose retry time has come (Concurrency 1: intake runs
// them).
func (s *sched) due(now time.Time, out []*idQueue) []*idQueue {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.parked) > 0 && !s.parked[0].retryAt.After(now) {
		out = append(out, heap.Pop(&s.parked).(*idQueue))
	}
	return out
}

func (s *sched) afterLocked(q *idQueue, v verdict, at time.Time) {
	switch v {
	case finished:
		q.pop()
		s.held--
		q.failing = false
		s.room.Signal()
		if q.len() == 0 {
			delete(s.byID, q.id)
			s.free = append(s.free, q)
		} else if !s.closed {
			s.ready.push(q) // behind the ids already waiting
			s.work.Signal()
		}
	case again:
		q.retryAt = at
		s.demote(q)
		heap.Push(&s.parked, q)
		if q.slot == 0 {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	case leave:
		// Not ready and not parked: its tasks stay until join.
	}
}

// workerBatch is how many ready ids a worker takes per lock.
const workerBatch = 8

func (s *sched) loop(w *worker) {
	defer func() {
		if w.state.CompareAndSwap(workerIdle, workerExited) {
			s.wg.Done()
		}
	}()
	var qs [workerBatch]*idQueue
	var ts [workerBatch]*task
	var vs [workerBatch]verdict
	var ats [workerBatch]time.Time
	s.mu.Lock()
	for {
		for s.ready.len() == 0 && !s.closed {
			s.work.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		// A share of what is ready, so that the other workers get theirs.
		n := min(workerBatch, max(1, s.ready.len()/len(s.workers)))
		for i := range n {
			qs[i] = s.ready.pop()
			ts[i] = qs[i].first() // under the lock: intake appends to the queue
		}
		s.mu.Unlock()
		for i := range n {
			vs[i], ats[i] = s.run(w, ts[i])
			if vs[i] == detached {
				return
			}
		}
		s.mu.Lock()
		for i := range n {
			s.afterLocked(qs[i], vs[i], ats[i])
			qs[i], ts[i] = nil, nil
		}
	}
}

// timers moves parked ids back to ready at their retry times (Concurrency
// above 1).
func (s *sched) timers() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		for len(s.parked) > 0 && !s.parked[0].retryAt.After(now) {
			s.ready.push(heap.Pop(&s.parked).(*idQueue))
			s.work.Signal()
		}
		if len(s.parked) > 0 {
			timer.Reset(s.parked[0].retryAt.Sub(now))
		}
		s.mu.Unlock()
		select {
		case <-timer.C:
		case <-s.wake:
			timer.Stop()
		case <-s.done:
			timer.Stop()
			return
		}
	}
}

// halt makes reserve refuse from now on, waking one that waits for room.
func (s *sched) halt() {
	s.mu.Lock()
	s.halted = true
	s.room.Broadcast()
	s.mu.Unlock()
}

// close stops the scheduler: reserve refuses, nothing more starts, idle
// workers return. Workers in an attempt return when it ends (or never
// touch anything again, once detached). Call join after it.
func (s *sched) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.halted, s.closed = true, true
	s.work.Broadcast()
	s.room.Broadcast()
	s.mu.Unlock()
	close(s.done)
}

// detach stops waiting for the workers that are in an attempt now, and
// returns their tasks: user code that has outlived its term. Only after
// close.
func (s *sched) detach(overdue *atomic.Int64) []*task {
	var out []*task
	for _, w := range s.workers {
		t := w.task.Load()
		if w.detach(overdue) {
			s.wg.Done()
			out = append(out, t)
		}
	}
	return out
}

// join waits for the timer goroutine and every worker not detached, and
// returns the tasks that never finished (queued, parked, left, and those
// of detached workers), in no particular order.
func (s *sched) join() []*task {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*task
	for _, q := range s.byID {
		out = append(out, q.buf[q.head:]...)
	}
	clear(s.byID)
	s.ready, s.parked, s.held, s.waiting = fifo{}, nil, 0, 0
	s.waitingN.Store(0)
	return out
}

// parkHeap orders parked ids by retry time.
type parkHeap []*idQueue

func (h parkHeap) Len() int           { return len(h) }
func (h parkHeap) Less(i, j int) bool { return h[i].retryAt.Before(h[j].retryAt) }
func (h parkHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = i, j
}
func (h *parkHeap) Push(x any) {
	q := x.(*idQueue)
	q.slot = len(*h)
	*h = append(*h, q)
}
func (h *parkHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.slot = -1
	return q
}

// fifo is a queue of ids that reuses its array.
type fifo struct {
	q    []*idQueue
	head int
}

func (f *fifo) len() int { return len(f.q) - f.head }

func (f *fifo) push(q *idQueue) {
	if f.head > 0 && len(f.q) == cap(f.q) { // full: move to the front instead of growing
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	f.q = append(f.q, q)
}

func (f *fifo) pop() *idQueue {
	q := f.q[f.head]
	f.q[f.head] = nil
	f.head++
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	}
	return q
}
