package consumer

import (
	"context"
	"sync/atomic"
	"time"
)

// worker is one goroutine that runs user code for a term: one of the
// runner's, or intake itself. While it runs user code it can be detached:
// the term stops waiting for it, and when the user code returns the
// goroutine ends without touching anything.
type worker struct {
	state atomic.Int32
	task  atomic.Pointer[task] // the task of the attempt in progress (nil in Options.ID)

	// ctx is the context of the worker's handler calls: the term's, and
	// the worker, for SetTaskContext; made once per term.
	ctx context.Context
	// taskCtx is what the current handler call gave SetTaskContext, if
	// anything (reset at each call).
	taskCtx atomic.Pointer[context.Context]
	// started is when the current attempt may start (time since the
	// start window's base, read by attempts.execute): the handler's start, for its
	// duration.
	started time.Duration
	// ended is the clock reading at the end of its last handler call, while
	// runFrom runs tasks back to back (negative otherwise): the next task's
	// start, so that a message costs one clock reading, not two. It is
	// earlier than the true start by a settle and a lock, which a pause
	// boundary (MinTaskTime and more before the deadline) does not notice.
	ended time.Duration
}

// clock returns the time since base: the reading w made at the end of the
// handler call it has just returned from (ended), else a new one.
func (w *worker) clock(base time.Time) time.Duration {
	if d := w.ended; d >= 0 {
		w.ended = -1
		return d
	}
	return time.Since(base)
}

func newWorker(termCtx context.Context) *worker {
	w := &worker{ended: -1}
	w.ctx = &handlerCtx{Context: termCtx, w: w}
	return w
}

// reported returns the context to report the worker's last handler call
// with: what it gave SetTaskContext, else def.
func (w *worker) reported(def context.Context) context.Context {
	if p := w.taskCtx.Load(); p != nil {
		return *p
	}
	return def
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
// meanwhile and must return without touching the task or the book.
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
