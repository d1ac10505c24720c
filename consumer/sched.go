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

// sched is a term's scheduler: intake hands it the owned messages of each
// batch (submit), and it alone decides how each runs. With Concurrency
// above 1 it queues them for that many worker goroutines (the pool), each
// taking a few ready ids per lock. With Concurrency 1 it has no goroutine
// of its own: it runs each task on intake's goroutine at once, as a plain
// loop would (inline.go), and queues only the ids of failed tasks (and
// their later tasks), which intake runs when their retry time comes
// (runDue).
//
// Queued tasks wait for their turn: one id at a time, in the order
// submitted per id; different ids in parallel. A task that must wait
// before its next attempt parks its id, and nothing else, until its retry
// time. It holds at most capacity tasks whole (queued, running or parked).
//
// A task waiting behind an id whose first task has failed is held light
// when the source can read it again (reread): its message is dropped and
// it no longer counts toward capacity, so that a failing id's backlog
// never stops the other ids; at most maxWaiting tasks are light at once.
// A light task is read again (term.refill) when it comes first.
type sched struct {
	tr *term
	w0 *worker // intake's: it runs Options.ID, and tasks inline

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

	wake    chan struct{}  // capacity 1: the earliest retry time changed
	done    chan struct{}  // closed by close
	workers []*worker      // the pool; none with Concurrency 1
	wg      sync.WaitGroup // the timer goroutine and every worker not detached

	batch  []*task    // submitPool's scratch
	dueBuf []*idQueue // runDue's scratch
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

func newSched(tr *term, concurrency, capacity int, reread bool, maxWaiting int) *sched {
	s := &sched{
		tr:         tr,
		w0:         newWorker(tr.ctx),
		byID:       make(map[uint64]*idQueue),
		capacity:   capacity,
		reread:     reread,
		maxWaiting: maxWaiting,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	s.work = sync.NewCond(&s.mu)
	s.room = sync.NewCond(&s.mu)
	if concurrency == 1 {
		return s
	}
	s.wg.Add(1 + concurrency)
	go s.timers()
	for range concurrency {
		w := newWorker(tr.ctx)
		s.workers = append(s.workers, w)
		go s.loop(w)
	}
	return s
}

// inline reports whether tasks run on intake's goroutine (Concurrency 1).
func (s *sched) inline() bool { return len(s.workers) == 0 }

// submit takes the owned messages of a batch (offers, in batch order; ms
// is the whole batch): inline, it runs them now (runInline); otherwise it
// queues them for the pool (submitPool). Either way reading moves past a
// message only once it is behind intake: done, another index's, or in the
// bookkeeping as unfinished. It returns false when the term stopped
// taking (the rest of the batch stays unread) or intake was detached.
func (s *sched) submit(ms []*transport.Message, offers []offer) bool {
	if s.inline() {
		return s.runInline(ms, offers)
	}
	return s.submitPool(ms, offers)
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
	woke := 0
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
		// Wake a worker per few ready ids (each takes up to workerBatch
		// per lock), not one per id: a wake-up is a futex call.
		if woke < len(s.workers) && s.ready.len() > woke*workerBatch {
			s.work.Signal()
			woke++
		}
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

// detach stops waiting for the workers that are in an attempt now (intake
// among them, in Options.ID or in a task it runs inline), and returns
// their tasks, and whether intake was: user code that has outlived its
// term. Only after close.
func (s *sched) detach(overdue *atomic.Int64) (late []*task, intake bool) {
	for _, w := range s.workers {
		t := w.task.Load()
		if w.detach(overdue) {
			s.wg.Done()
			late = append(late, t)
		}
	}
	return late, s.w0.detach(overdue)
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
