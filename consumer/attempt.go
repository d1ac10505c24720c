package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nandi-go/nandi/drain"
	"github.com/nandi-go/nandi/transport"
	"golang.org/x/time/rate"
)

// attempts is the running of a term's tasks, one attempt at a time per
// worker: whether it may start (the term's start window, the group's
// rate), a light task's refill, the calls into user code inside the drain
// gate, and what the failure policy decides about a failed attempt. It
// returns each attempt's result to the runner, which has the book apply
// it; it schedules nothing itself. The term's drain closes its gate and
// counts its overdue calls (overdue.go).
type attempts struct {
	sh     *shared
	info   transport.Info
	log    *slog.Logger
	ctx    context.Context // the handlers': ends when the lease runs out
	taking context.Context // ends when the term stops taking
	win    *startWindow
	policy failurePolicy

	gate    drain.Gate    // the calls into user code running: the drain waits for them
	limiter *rate.Limiter // this worker's share of Options.GroupRate (nil: no limit)
	late    lateReturns   // the overdue calls' returns, logged as one line

	// refills (refill.go)
	book     func(func(*book))                       // the runner's book, under its lock
	reread   ioBackoff                               // reading waiting tasks again (under rereadMu)
	rereadMu sync.Mutex                              // guards reread
	doneLate func(shard int, pos transport.Position) // a task done after its term (recorder.late)
}

// execute runs one attempt of t on worker w (one of the runner's, or
// intake with Concurrency 1) and returns what the book is told: the
// result, and for a retry the wait before it is due.
func (a *attempts) execute(w *worker, t *task) (result, time.Duration) {
	// No attempt starts outside the term's start window: once the term
	// stops taking, a task is left for the next holder (it is not done, so
	// no checkpoint passes it); while the group is paused, or close to a
	// deadline before its renewal, it goes back to the book, which gives
	// nothing until the window opens (resNotNow). The check is made again
	// after anything that waits (a refill's read, the group's rate).
	started := w.clock(a.win.base) // also the handler's start
	if !a.win.mayStartAt(started) {
		return a.notNow()
	}
	waited := false
	if t.m == nil { // held light behind its id's failing first task
		if v, wait, ok := a.refill(t); !ok {
			return v, wait
		}
		waited = true
	}
	if t.err == nil && (t.f == nil || !t.f.dead) && a.limiter != nil { // the group's rate
		if !a.admit() {
			return resLeave, 0
		}
		waited = true
	}
	if waited {
		if started = a.win.since(); !a.win.mayStartAt(started) {
			return a.notNow()
		}
	}
	w.started = started
	out, wait, attached := a.attempt(w, t)
	if !attached {
		return resDetached, 0
	}
	if out != resHandled {
		w.ended = -1 // OnError or DeadLetter may have run after the handler
	}
	a.account(t, out)
	return out, wait
}

// notNow is what an attempt that found the start window shut returns:
// resLeave when it is shut for good (the term stopped taking, or ended),
// else resNotNow.
func (a *attempts) notNow() (result, time.Duration) {
	if a.win.over.Load() || a.win.ended() {
		return resLeave, 0
	}
	return resNotNow, 0
}

// attempt runs the handler once (or DeadLetter, for a task the failure
// policy has sent there) and returns what follows. attached is false when
// the worker was detached while user code ran: the task is then no longer
// this goroutine's to touch.
func (a *attempts) attempt(w *worker, t *task) (out result, wait time.Duration, attached bool) {
	if t.f != nil && t.f.dead {
		return a.deadLetter(w, t)
	}
	err := t.err
	if err == nil {
		if err, attached = a.invoke(w, t, callHandler); !attached {
			return 0, 0, false
		}
		switch err {
		case nil:
			return resHandled, 0, true
		case errGateClosed:
			return resLeave, 0, true
		case errPaused:
			return resNotNow, 0, true
		}
	}
	return a.failed(w, t, err)
}

// failed reports a failed attempt of t (the log, OnError) and returns the
// failure policy's decision: retry it, skip it, or give it to DeadLetter.
func (a *attempts) failed(w *worker, t *task, err error) (out result, wait time.Duration, attached bool) {
	if t.err == nil && a.ctx.Err() != nil {
		return resLeave, 0, true // cut off by the lease, not a failure of the task
	}
	f := t.failures()
	f.attempts++
	f.lastErr = err
	f.ctx = a.ctx
	if t.err == nil { // the handler ran: report with what it said
		f.ctx = w.reported(a.ctx)
	}
	a.sh.stats.failed.Add(1)
	a.noteFailure(t, err)
	if a.sh.user.onError != nil {
		if _, attached = a.invoke(w, t, callOnError); !attached {
			return 0, 0, false
		}
	}
	out, wait = a.policy.afterFailure(f.attempts, err)
	if out == resSkipped { // Discard, or a lease without a Redis for the default
		msg := "task discarded (Options.DeadLetter is consumer.Discard)"
		if !a.sh.user.discard {
			msg = "task skipped: there is no DeadLetter, and the lease has no Redis for the default dead-letter stream"
		}
		a.log.WarnContext(f.ctx, msg, "key", t.m.Key, "shard", t.shard, "position", t.pos.String(), "attempts", f.attempts, "err", err)
	}
	return out, wait, true
}

// deadLetter gives t to DeadLetter; a failure of DeadLetter is retried
// (the policy's backoff), never given up on.
func (a *attempts) deadLetter(w *worker, t *task) (out result, wait time.Duration, attached bool) {
	err, attached := a.invoke(w, t, callDeadLetter)
	if !attached {
		return 0, 0, false
	}
	if err == errGateClosed || (err != nil && a.ctx.Err() != nil) {
		return resLeave, 0, true
	}
	if err != nil {
		a.sh.stats.deadLetterFailures.Add(1)
		if a.sh.deadLettering.fail() {
			a.log.WarnContext(t.f.ctx, "dead letters failing; retrying, the task kept", "key", t.m.Key, "err", err)
		}
		t.f.dlTries++
		return resRetry, a.policy.afterDeadLetterFailure(t.f.dlTries), true
	}
	if n, lasted, ok := a.sh.deadLettering.end(); ok {
		a.log.InfoContext(t.f.ctx, "dead letters recovered", "failures", n, "after", lasted)
	}
	a.log.InfoContext(t.f.ctx, "task dead-lettered", "key", t.m.Key, "shard", t.shard, "position", t.pos.String(),
		"attempts", t.f.attempts, "err", t.f.lastErr)
	return resDeadLettered, 0, true
}

// errGateClosed says the term's drain began before the call could enter:
// nothing ran.
var errGateClosed = errors.New("consumer: the term is draining")

// errPaused says the group was paused before the handler could be called:
// nothing ran.
var errPaused = errors.New("consumer: the group is paused")

type userCall uint8

const (
	callHandler userCall = iota
	callOnError
	callDeadLetter
)

// invoke makes one call into user code for t inside the term's gate (so
// the drain waits for it, up to the deadline), recovering a panic into a
// *PanicError. attached is false when the worker was detached meanwhile
// (the call outlived its term): the caller must return without touching t.
func (a *attempts) invoke(w *worker, t *task, what userCall) (err error, attached bool) {
	w.begin(t)
	if !a.gate.Enter() {
		if !w.end() {
			a.lateReturn(t.m.Key, nil)
			return nil, false
		}
		return errGateClosed, true
	}
	if a.win.ended() { // the term ended since mayStart: start nothing more
		a.gate.Leave()
		if !w.end() {
			a.lateReturn(t.m.Key, nil)
			return nil, false
		}
		return errGateClosed, true
	}
	a.sh.running.Add(1)
	shard, pos := t.shard, t.pos // t is not this goroutine's once it is detached
	// Counted as running first, then the pause read: whoever sees the
	// pause (Stats().Paused) and then nothing running knows no handler
	// call begins until the resume; one that passed the start window
	// before the pause goes back to the book (errPaused: resNotNow).
	if what == callHandler && a.sh.pause.on.Load() {
		a.sh.running.Add(-1)
		a.gate.Leave()
		if !w.end() {
			a.lateReturn(t.m.Key, nil)
			return nil, false
		}
		return errPaused, true
	}
	switch what {
	case callHandler:
		err = a.sh.callHandler(w, t.m)
		w.ended = a.win.since() // the next task's start, if runFrom runs one at once
		a.sh.handling.Observe(w.ended - w.started)
	case callOnError:
		a.callOnError(t)
	case callDeadLetter:
		err = a.sh.user.deadLetter(withFailure(a.ctx, Failure{Attempts: t.f.attempts, Worker: a.sh.workerID,
			System: a.info.System, Source: a.info.Destination(t.m.Shard)}), t.m, t.f.lastErr)
	}
	a.sh.running.Add(-1)
	a.gate.Leave()
	if !w.end() {
		if err == nil && what != callOnError {
			a.doneLate(shard, pos) // done after its term: not again by this worker
		}
		a.lateReturn(t.m.Key, err)
		return nil, false
	}
	return err, true
}

// callHandler calls the handler on m with w's context.
func (sh *shared) callHandler(w *worker, m *transport.Message) error {
	if w.taskCtx.Load() != nil { // a plain load on the per-message path; a store only after SetTaskContext
		w.taskCtx.Store(nil)
	}
	return sh.user.handler(w.ctx, m)
}

// callOnError reports t's last failure (userCode.onError), logging a panic.
func (a *attempts) callOnError(t *task) {
	if err := a.sh.user.onError(t.f.ctx, t.m, t.f.attempts, t.f.lastErr); err != nil {
		a.log.WarnContext(t.f.ctx, "OnError panicked", "key", t.m.Key, "err", err, "stack", string(err.(*PanicError).Stack))
	}
}

// noteFailure logs a task's failures once per spell: the first failure of
// a consumer with no other task failing is a Warn (an Error with the
// stack, for a panic); later failures, of this task or others, are not
// logged again until no task is failing. OnError sees every one.
func (a *attempts) noteFailure(t *task, err error) {
	a.sh.lastErr.Store(&lastError{msg: t.m.Key + ": " + err.Error(), at: time.Now()})
	f := t.failures()
	if f.failing {
		return
	}
	f.failing = true
	if a.sh.failingTasks.Add(1) != 1 {
		return
	}
	attrs := []any{"key", t.m.Key, "shard", t.shard, "position", t.pos.String(), "attempt", f.attempts, "err", err}
	level, msg := slog.LevelWarn, "task failing"
	var pe *PanicError
	if errors.As(err, &pe) {
		level, msg = slog.LevelError, "task failing: handler panicked"
		attrs = append(attrs, "stack", string(pe.Stack))
	}
	a.log.Log(f.ctx, level, msg, attrs...)
}

// notFailing ends a task's part in the failing spell.
func (a *attempts) notFailing(t *task) {
	if t.f == nil || !t.f.failing {
		return
	}
	t.f.failing = false
	if a.sh.failingTasks.Add(-1) == 0 {
		a.log.InfoContext(t.f.ctx, "no task failing")
	}
}

// enterIntake enters the gate for intake's own calls into user code
// (Options.ID), as an attempt of intake's worker.
func (a *attempts) enterIntake(w0 *worker) bool {
	w0.begin(nil)
	if !a.gate.Enter() {
		if !w0.end() {
			a.lateReturn("", nil) // detached meanwhile: the drain counted it
		}
		return false
	}
	a.sh.running.Add(1)
	return true
}

// leaveIntake leaves the gate; false when intake was detached meanwhile.
func (a *attempts) leaveIntake(w0 *worker) bool {
	a.sh.running.Add(-1)
	a.gate.Leave()
	if !w0.end() {
		a.lateReturn("", nil)
		return false
	}
	return true
}

// detachedReturn is how intake returns from Options.ID after it was
// detached: it gives back its counts and touches nothing else.
func (a *attempts) detachedReturn() bool {
	a.sh.running.Add(-1)
	a.lateReturn("", nil)
	return false
}
