package consumer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
)

// newRunner returns the runner of b's tasks: with workers 0, intake's
// goroutine (w0) is the one worker; otherwise that many goroutines.
// Concurrency 1 runs inline: a pool of one pays a goroutine hand-off
// whenever its worker runs out of ready tasks (BenchmarkOneWorkerDriving,
// 2026-12-07: 175-186 ns a task inline, 217-284 ns with a pool of one, in
// batches of 512; 40-110 ns more a task, a tenth to a fifth of what a
// message costs through the whole consumer at Concurrency 1).

// runner runs a term's tasks: intake gives it the owned messages of each
// batch as tasks (submit), its book (book.go) decides which may run, and
// workers run them (execute) and tell the book how each ended. With
// Concurrency above 1 the workers are that many goroutines and a timer
// goroutine that makes ids ready at their retry times. With Concurrency 1
// the one worker is intake's own goroutine (the fast path: a plain loop
// has no goroutine hand-off either): after each chunk it takes, and when a
// retry comes due, intake runs what is ready on the same book with the
// same code (runFrom) before it reads on.
//
// Intake's worker (w0) also runs Options.ID. A worker can be detached
// (drain) while user code it runs outlives the term: it then returns
// touching nothing.
type runner struct {
	exec  func(*worker, *task) (result, time.Duration) // attempts.execute: the result, and a retry's wait
	win   window                                       // the term's start window (window.go)
	spawn func(func())                                 // starts a goroutine the term joins (the window's opener)
	every int                                          // Options.CheckpointEvery
	flush chan<- struct{}                              // the writer's: CheckpointEvery tasks finished
	w0    *worker                                      // intake's

	mu   sync.Mutex // guards b and what follows
	b    *book
	work *sync.Cond // workers: an id is ready, or closed
	room *sync.Cond // submit: a task left, or halted
	idle int        // workers waiting on work
	// opening: a goroutine waits for the shut start window to open
	// (awaitWindow).
	opening bool
	halted  bool // submit takes nothing more (stopped is closed)
	closed  bool // nothing more starts; workers return

	stopped chan struct{}  // closed when halted
	wake    chan struct{}  // capacity 1: the earliest retry time changed (the timer goroutine's)
	done    chan struct{}  // closed by close
	workers []*worker      // the pool; none with Concurrency 1
	wg      sync.WaitGroup // the timer goroutine and every worker not detached
}

func newRunner(b *book, w0 *worker, workers int, newWorker func() *worker, exec func(*worker, *task) (result, time.Duration), win window, spawn func(func()), every int, flush chan<- struct{}) *runner {
	r := &runner{exec: exec, win: win, spawn: spawn, every: every, flush: flush, w0: w0, b: b, wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	r.work = sync.NewCond(&r.mu)
	r.room = sync.NewCond(&r.mu)
	if workers == 0 { // intake's goroutine is the one worker
		return r
	}
	r.wg.Add(1 + workers)
	go r.timers()
	for range workers {
		w := newWorker()
		r.workers = append(r.workers, w)
		go r.loop(w)
	}
	return r
}

// inline reports whether intake's goroutine is the one worker
// (Concurrency 1).
func (r *runner) inline() bool { return len(r.workers) == 0 }

// submit takes a batch's tasks (ts, in batch order; ms is the whole
// batch, at[i] the index in ms of ts[i]) into the book, in chunks that fit
// in the room there is, waiting for room: with the pool, for a worker to
// finish one; inline, running what is ready and what comes due. Reading
// passes a message only with the tasks before it. It returns false when
// the term stopped taking (the tasks not taken are handed back, the rest
// of the batch stays unread) or intake was detached.
func (r *runner) submit(ms []*transport.Message, ts []*task, at []int) (ok bool, handBack []*task) {
	read := 0 // messages reading has passed
	for i := 0; i < len(ts); {
		n, ok := r.reserve(len(ts) - i)
		if !ok {
			return false, nil
		}
		if n == 0 {
			return false, ts[i:]
		}
		upto := len(ms)
		if i+n < len(ts) {
			upto = at[i+n] // up to the next task not in this chunk
		}
		r.mu.Lock()
		ready := r.b.take(ts[i:i+n], ms[read:upto])
		r.wakeWorkers(ready)
		r.mu.Unlock()
		read, i = upto, i+n
		if r.inline() && !r.runReady() {
			return false, nil
		}
	}
	if read < len(ms) {
		r.mu.Lock()
		r.b.advance(ms[read:])
		r.mu.Unlock()
	}
	return true, nil
}

// tasks appends n tasks to ts: finished ones the book gives again
// (book.spares), new ones, in one allocation, for the rest.
func (r *runner) tasks(ts []*task, n int) []*task {
	r.mu.Lock()
	ts = r.b.spares(ts, n)
	r.mu.Unlock()
	if k := n - len(ts); k > 0 {
		slab := make([]task, k)
		for i := range slab {
			ts = append(ts, &slab[i])
		}
	}
	return ts
}

// reserve waits for room for at least one task and returns how many of k
// fit, 0 once the runner is halted. ok is false when intake (inline) was
// detached meanwhile.
func (r *runner) reserve(k int) (n int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.b.room() == 0 && !r.halted {
		if !r.inline() {
			r.room.Wait()
			continue
		}
		// Inline: what holds the room is shut out by the start window, parked
		// (nothing runs while intake waits), or left by a term that is
		// over; run them when the window opens, the parked as they come due.
		if r.b.shut {
			r.mu.Unlock()
			attached := r.runReady() // waits for the window, runs what it kept
			r.mu.Lock()
			if !attached {
				return 0, false
			}
			if r.b.shut { // still shut: the term stopped taking
				return 0, true
			}
			continue
		}
		due := r.b.nextDue()
		if due.IsZero() {
			return 0, true
		}
		r.mu.Unlock()
		attached := !r.sleepUntil(due) || r.runDue()
		r.mu.Lock()
		if !attached {
			return 0, false
		}
	}
	if r.halted {
		return 0, true
	}
	return min(k, r.b.room()), true
}

// sleepUntil waits until t, or until the runner is halted (false then).
func (r *runner) sleepUntil(t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-r.stopped:
		return false
	}
}

// wakeWorkers wakes up to n idle workers for n ids made ready (under mu).
func (r *runner) wakeWorkers(n int) {
	for i := 0; i < min(n, r.idle); i++ {
		r.work.Signal()
	}
}

// next returns a ready task, if anything may start (under mu).
func (r *runner) next() *task {
	if r.closed {
		return nil
	}
	return r.b.next()
}

// runFrom runs t on w and then, while one is ready, the next task: per
// task one lock, to tell the book and take the next. It returns false when
// w was detached (it then touches nothing more).
func (r *runner) runFrom(w *worker, t *task) bool {
	w.ended = -1 // no reading to start the first task with: it may have waited
	for t != nil {
		v, wait := r.exec(w, t)
		if v == resDetached {
			return false
		}
		var at time.Time
		if v == resRetry {
			at = time.Now().Add(wait)
		}
		r.mu.Lock()
		if r.b.settle(t, v, at) {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
		if v == resNotNow {
			if !r.opening && !r.inline() { // inline, intake waits itself (runReady)
				r.opening = true
				r.spawn(r.awaitWindow)
			}
		}
		r.room.Signal() // a task finished, or the ones behind a failed one went light
		if v.finished() {
			if r.b.finished >= r.every {
				select {
				case r.flush <- struct{}{}:
				default:
				}
			}
		}
		t = r.next()
		r.mu.Unlock()
	}
	return true
}

// runReady runs what is ready on intake's goroutine (inline); false when
// intake was detached. When an attempt meets a shut start window, intake,
// the one worker, waits for it to open and runs what it kept: it returns
// with the book's window shut only once the term stops taking (a return
// to reading then would leave the kept tasks to a batch that may never
// come).
func (r *runner) runReady() bool {
	for {
		r.mu.Lock()
		t := r.next()
		r.mu.Unlock()
		if !r.runFrom(r.w0, t) {
			return false
		}
		r.mu.Lock()
		shut := r.b.shut
		r.mu.Unlock()
		if !shut || !r.mayStart() {
			return true
		}
	}
}

// runDue runs, inline, the tasks whose retry time has come, and what is
// ready with them (what a shut start window kept, once it opens). False
// when intake was detached. With the pool it does nothing: the timer
// goroutine makes due ids ready for the workers.
func (r *runner) runDue() bool {
	if !r.inline() {
		return true
	}
	r.mu.Lock()
	r.b.due(time.Now())
	ready := r.b.startable() // the due, and what a shut window kept
	r.mu.Unlock()
	return !ready || r.runReady()
}

// nextDue is the earliest retry time intake must run (zero when nothing
// is parked, and always with the pool, whose timer goroutine runs them).
func (r *runner) nextDue() time.Time {
	if !r.inline() {
		return time.Time{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.nextDue()
}

// window is what the runner asks of the term's start window.
type window interface {
	// mayStart reports whether work may start now, waiting while the
	// window is shut; false once the term stops taking.
	mayStart() bool
}

// mayStart waits for the start window to be open (false: the term stopped
// taking) and opens the book's, if an attempt found it shut.
func (r *runner) mayStart() bool {
	if !r.win.mayStart() {
		return false
	}
	r.openWindow()
	return true
}

// awaitWindow waits for the start window an attempt found shut to open,
// then opens the book's and wakes the workers (the pool); it returns at
// once when the term stops taking (the runner is closing). One runs at a
// time.
func (r *runner) awaitWindow() {
	open := r.win.mayStart()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opening = false
	if open {
		r.openLocked()
	}
}

// openWindow opens the book's start window.
func (r *runner) openWindow() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.openLocked()
}

// openLocked opens the book's start window and wakes a worker for each
// id ready (under mu).
func (r *runner) openLocked() {
	if !r.b.shut {
		return
	}
	r.b.openWindow()
	r.wakeWorkers(r.b.ready.len())
}

func (r *runner) loop(w *worker) {
	defer func() {
		if w.state.CompareAndSwap(workerIdle, workerExited) {
			r.wg.Done()
		}
	}()
	for {
		r.mu.Lock()
		for !r.b.startable() && !r.closed {
			r.idle++
			r.work.Wait()
			r.idle--
		}
		t := r.next()
		r.mu.Unlock()
		if t == nil || !r.runFrom(w, t) {
			return
		}
	}
}

// timers makes parked ids ready at their retry times (the pool).
func (r *runner) timers() {
	defer r.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		r.mu.Lock()
		now := time.Now()
		r.wakeWorkers(r.b.due(now))
		if d := r.b.nextDue(); !d.IsZero() {
			timer.Reset(d.Sub(now))
		}
		r.mu.Unlock()
		select {
		case <-timer.C:
		case <-r.wake:
			timer.Stop()
		case <-r.done:
			timer.Stop()
			return
		}
	}
}

// view calls f with the book, under the lock.
func (r *runner) view(f func(b *book)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r.b)
}

// marks returns the marks to write (book.marks): those that moved, or
// with all every shard's.
func (r *runner) marks(all bool, keep func(s int, m checkpoint.Mark) checkpoint.Mark) map[int]checkpoint.Mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.marks(all, keep)
}

// halt makes submit refuse from now on, waking it if it waits for room.
func (r *runner) halt() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.haltLocked()
}

func (r *runner) haltLocked() {
	if !r.halted {
		r.halted = true
		close(r.stopped)
	}
	r.room.Broadcast()
}

// close stops the runner: submit refuses, nothing more starts, idle
// workers return. Workers in an attempt return when it ends (or never
// touch anything again, once detached). Call join after it.
func (r *runner) close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.haltLocked()
	r.closed = true
	r.work.Broadcast()
	r.mu.Unlock()
	close(r.done)
}

// detach stops waiting for the workers that are in an attempt now (intake
// among them, in Options.ID or in a task it runs): user code that has
// outlived its term. It returns their tasks, how many workers it
// detached, and whether intake was one. Only after close.
func (r *runner) detach(overdue *atomic.Int64) (late []*task, n int, intake bool) {
	for _, w := range append([]*worker{r.w0}, r.workers...) {
		if !w.detach(overdue) {
			continue
		}
		// Read after the detach: the attempt it caught is the one whose
		// begin stored its task (read before, it could be the last
		// attempt's, finished and its task given again).
		t := w.task.Load()
		n++
		if w == r.w0 {
			intake = true
		} else {
			r.wg.Done()
		}
		if t != nil {
			late = append(late, t)
		}
	}
	return late, n, intake
}

// join waits for the timer goroutine and every worker not detached, and
// hands back the tasks that never finished (book.handBack).
func (r *runner) join() []*task {
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.handBack()
}
