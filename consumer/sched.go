package consumer

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"
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
	// the later tasks of its id (per-id order); close hands them back.
	leave
	// detached: the worker was detached while user code ran (overdue). It
	// touches nothing of the scheduler any more.
	detached
)

// sched runs one term's tasks on a fixed set of worker goroutines: one id
// at a time, in the order pushed per id; different ids in parallel. A task
// that must wait before its next attempt parks its id, and nothing else,
// until its retry time. It holds at most capacity tasks (queued, running or
// parked); push blocks beyond that.
type sched struct {
	run func(w *worker, t *task) (verdict, time.Time)

	mu       sync.Mutex
	work     *sync.Cond // workers: an id is ready, or closed
	room     *sync.Cond // push: a task left, or halted
	byID     map[uint64]*idQueue
	ready    fifo       // ids whose first task may run now, in order
	parked   parkHeap   // ids waiting for a retry time
	free     []*idQueue // reusable queues
	held     int
	capacity int
	halted   bool // push refuses
	closed   bool // nothing more starts; workers return

	wake    chan struct{} // capacity 1: the earliest retry time changed
	done    chan struct{} // closed by close
	workers []*worker
	wg      sync.WaitGroup // the timer goroutine and every worker not detached
}

type idQueue struct {
	id      uint64
	tasks   []*task // the first is running, parked, ready or left
	retryAt time.Time
	slot    int // index in parked; -1 when not parked
}

// worker is one of the scheduler's goroutines. While it runs user code it
// can be detached: the scheduler stops waiting for it, and when the user
// code returns the goroutine ends without touching anything.
type worker struct {
	s     *sched
	state atomic.Int32
	task  atomic.Pointer[task] // the task of the attempt in progress
}

const (
	workerIdle     = iota // in the scheduler's own code
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

func newSched(workers, capacity int, run func(*worker, *task) (verdict, time.Time)) *sched {
	s := &sched{
		run:      run,
		byID:     make(map[uint64]*idQueue, capacity),
		capacity: capacity,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	s.work = sync.NewCond(&s.mu)
	s.room = sync.NewCond(&s.mu)
	s.wg.Add(1 + workers)
	go s.timers()
	for range workers {
		w := &worker{s: s}
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

// enqueue queues reserved tasks, each behind the earlier tasks of its id.
func (s *sched) enqueue(ts []*task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		if q := s.byID[t.id]; q != nil {
			q.tasks = append(q.tasks, t) // runs after the ones before it
			continue
		}
		var q *idQueue
		if n := len(s.free); n > 0 {
			q, s.free = s.free[n-1], s.free[:n-1]
		} else {
			q = &idQueue{slot: -1}
		}
		q.id = t.id
		q.tasks = append(q.tasks, t)
		s.byID[t.id] = q
		s.ready.push(q)
		s.work.Signal()
	}
}

func (s *sched) loop(w *worker) {
	defer func() {
		if w.state.CompareAndSwap(workerIdle, workerExited) {
			s.wg.Done()
		}
	}()
	s.mu.Lock()
	for {
		for s.ready.len() == 0 && !s.closed {
			s.work.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		q := s.ready.pop()
		t := q.tasks[0]
		s.mu.Unlock()

		v, at := s.run(w, t)
		if v == detached {
			return
		}

		s.mu.Lock()
		switch v {
		case finished:
			q.tasks[0] = nil
			q.tasks = q.tasks[1:]
			s.held--
			s.room.Signal()
			if len(q.tasks) == 0 {
				delete(s.byID, q.id)
				q.tasks = q.tasks[:0:0]
				s.free = append(s.free, q)
			} else {
				s.ready.push(q) // behind the ids already waiting
			}
		case again:
			q.retryAt = at
			heap.Push(&s.parked, q)
			if q.slot == 0 {
				select {
				case s.wake <- struct{}{}:
				default:
				}
			}
		case leave:
			// Not ready and not parked: its tasks stay until close.
		}
	}
}

// timers moves parked ids back to ready at their retry times.
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

// halt makes push refuse from now on, waking a push that waits for room.
func (s *sched) halt() {
	s.mu.Lock()
	s.halted = true
	s.room.Broadcast()
	s.mu.Unlock()
}

// close stops the scheduler: push refuses, nothing more starts, idle
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
// returns their tasks: user code that has outlived its term. Each is
// counted in overdue before it is detached, so that its return (which
// takes it off) never runs ahead of the count. Only after close.
func (s *sched) detach(overdue *atomic.Int64) []*task {
	var out []*task
	for _, w := range s.workers {
		t := w.task.Load()
		overdue.Add(1)
		if w.state.CompareAndSwap(workerAttempt, workerDetached) {
			s.wg.Done()
			out = append(out, t)
		} else {
			overdue.Add(-1)
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
		out = append(out, q.tasks...)
	}
	clear(s.byID)
	s.ready, s.parked, s.held = fifo{}, nil, 0
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
