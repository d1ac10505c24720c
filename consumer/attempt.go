package consumer

import (
	"errors"
	"log/slog"
	"time"

	"github.com/nandi-go/nandi/internal/backoff"
	"github.com/nandi-go/nandi/transport"
)

// execute runs one attempt of t on worker w (one of the runner's, or
// intake with Concurrency 1) and returns what the book is told.
func (tr *term) execute(w *worker, t *task) (result, time.Time) {
	// No attempt starts once the term stops taking, nor close to its
	// deadline before a renewal: a task queued under a term that has ended
	// is left for the next holder (it is not done, so no checkpoint passes
	// it).
	started := w.clock(tr.base) // also the handler's start
	if !tr.mayStartAt(started) {
		if !tr.mayStart() {
			return resLeave, time.Time{}
		}
		started = time.Since(tr.base)
	}
	if t.m == nil { // held light behind its id's failing first task
		if v, at, ok := tr.refill(t); !ok {
			return v, at
		}
		started = time.Since(tr.base)
	}
	if t.err == nil && (t.f == nil || !t.f.dead) && tr.limiter != nil { // the group's rate
		if !tr.admit() {
			return resLeave, time.Time{}
		}
		started = time.Since(tr.base)
	}
	w.started = started
	out, attached := tr.attempt(w, t)
	if !attached {
		return resDetached, time.Time{}
	}
	if out != resHandled {
		w.ended = -1 // OnError or DeadLetter may have run after the handler
	}
	tr.account(t, out)
	if out == resRetry {
		return resRetry, time.Now().Add(t.f.backoff)
	}
	return out, time.Time{}
}

// attempt runs the handler once (or DeadLetter, once the failure policy
// has given up on the handler) and applies the failure policy. attached is
// false when the worker was detached while user code ran: the task is then
// no longer this goroutine's to touch.
func (tr *term) attempt(w *worker, t *task) (out result, attached bool) {
	if t.f == nil || !t.f.dead {
		err := t.err
		if err == nil {
			if err, attached = tr.invoke(w, t, callHandler); !attached {
				return 0, false
			}
			if err == errGateClosed {
				return resLeave, true
			}
			if err == nil {
				return resHandled, true
			}
		}
		return tr.failed(w, t, err)
	}
	return tr.deadLetter(w, t)
}

// failed applies the failure policy to a failed attempt of t: retry it,
// skip it, or send it to DeadLetter (now).
func (tr *term) failed(w *worker, t *task, err error) (out result, attached bool) {
	if t.err == nil && tr.ctx.Err() != nil {
		return resLeave, true // cut off by the lease, not a failure of the task
	}
	f := t.failures()
	f.attempts++
	f.lastErr = err
	f.ctx = tr.ctx
	if t.err == nil { // the handler ran: report with what it said
		f.ctx = w.reported(tr.ctx)
	}
	tr.sh.stats.failed.Add(1)
	tr.noteFailure(t, err)
	if tr.sh.user.onError != nil {
		if _, attached = tr.invoke(w, t, callOnError); !attached {
			return 0, false
		}
	}
	if !IsPermanent(err) && (tr.sh.opts.MaxAttempts == 0 || f.attempts < tr.sh.opts.MaxAttempts) {
		f.backoff = tr.sh.user.retryDelay(f.attempts, err)
		return resRetry, true
	}
	if tr.sh.user.deadLetter == nil { // Discard, or a lease without a Redis for the default
		msg := "task discarded (Options.DeadLetter is consumer.Discard)"
		if !tr.sh.user.discard {
			msg = "task skipped: there is no DeadLetter, and the lease has no Redis for the default dead-letter stream"
		}
		tr.log.WarnContext(f.ctx, msg, "key", t.m.Key, "shard", t.shard, "position", t.pos.String(), "attempts", f.attempts, "err", err)
		return resSkipped, true
	}
	f.dead, f.backoff = true, 0
	return tr.deadLetter(w, t)
}

// deadLetter gives t to DeadLetter; a failure of DeadLetter is retried.
func (tr *term) deadLetter(w *worker, t *task) (out result, attached bool) {
	err, attached := tr.invoke(w, t, callDeadLetter)
	if !attached {
		return 0, false
	}
	if err == errGateClosed || (err != nil && tr.ctx.Err() != nil) {
		return resLeave, true
	}
	if err != nil {
		tr.sh.stats.deadLetterFailures.Add(1)
		if tr.sh.deadLettering.fail() {
			tr.log.WarnContext(t.f.ctx, "dead letters failing; retrying, the task kept", "key", t.m.Key, "err", err)
		}
		t.f.dlTries++
		t.f.backoff = backoff.Delay(t.f.dlTries, tr.sh.opts.RetryMin, tr.sh.opts.RetryMax)
		return resRetry, true
	}
	if n, lasted, ok := tr.sh.deadLettering.end(); ok {
		tr.log.InfoContext(t.f.ctx, "dead letters recovered", "failures", n, "after", lasted)
	}
	tr.log.InfoContext(t.f.ctx, "task dead-lettered", "key", t.m.Key, "shard", t.shard, "position", t.pos.String(),
		"attempts", t.f.attempts, "err", t.f.lastErr)
	return resDeadLettered, true
}

// errGateClosed says the term's drain began before the call could enter:
// nothing ran.
var errGateClosed = errors.New("consumer: the term is draining")

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
func (tr *term) invoke(w *worker, t *task, what userCall) (err error, attached bool) {
	w.begin(t)
	if !tr.gate.Enter() {
		if !w.end() {
			tr.lateReturn(t.m.Key, nil)
			return nil, false
		}
		return errGateClosed, true
	}
	if isDone(tr.t.Done()) { // the term ended since mayStart: start nothing more
		tr.gate.Leave()
		if !w.end() {
			tr.lateReturn(t.m.Key, nil)
			return nil, false
		}
		return errGateClosed, true
	}
	tr.sh.running.Add(1)
	shard, pos := t.shard, t.pos // t is not this goroutine's once it is detached
	// Counted as running first, then the pause read: whoever sees the
	// pause (Stats().Paused) and then nothing running knows no handler
	// call begins until the resume; one that passed mayStart before the
	// pause waits here, outside the gate, for the resume.
	for what == callHandler && tr.sh.pause.on.Load() {
		tr.sh.running.Add(-1)
		tr.gate.Leave()
		ok := tr.mayStart() && tr.gate.Enter()
		if ok && isDone(tr.t.Done()) {
			tr.gate.Leave()
			ok = false
		}
		if !ok {
			if !w.end() {
				tr.lateReturn(t.m.Key, nil)
				return nil, false
			}
			return errGateClosed, true
		}
		tr.sh.running.Add(1)
	}
	switch what {
	case callHandler:
		err = tr.sh.callHandler(w, t.m)
		w.ended = time.Since(tr.base) // the next task's start, if runFrom runs one at once
		tr.sh.handling.Observe(w.ended - w.started)
	case callOnError:
		tr.callOnError(t)
	case callDeadLetter:
		err = tr.sh.user.deadLetter(withFailure(tr.ctx, Failure{Attempts: t.f.attempts, Worker: tr.sh.workerID,
			System: tr.info.System, Source: tr.info.Destination(t.m.Shard)}), t.m, t.f.lastErr)
	}
	tr.sh.running.Add(-1)
	tr.gate.Leave()
	if !w.end() {
		if err == nil && what != callOnError {
			tr.rec.late(shard, pos) // done after its term: not again by this worker
		}
		tr.lateReturn(t.m.Key, err)
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
func (tr *term) callOnError(t *task) {
	if err := tr.sh.user.onError(t.f.ctx, t.m, t.f.attempts, t.f.lastErr); err != nil {
		tr.log.WarnContext(t.f.ctx, "OnError panicked", "key", t.m.Key, "err", err, "stack", string(err.(*PanicError).Stack))
	}
}

// noteFailure logs a task's failures once per spell: the first failure of
// a consumer with no other task failing is a Warn (an Error with the
// stack, for a panic); later failures, of this task or others, are not
// logged again until no task is failing. OnError sees every one.
func (tr *term) noteFailure(t *task, err error) {
	tr.sh.lastErr.Store(&lastError{msg: t.m.Key + ": " + err.Error(), at: time.Now()})
	f := t.failures()
	if f.failing {
		return
	}
	f.failing = true
	if tr.sh.failingTasks.Add(1) != 1 {
		return
	}
	attrs := []any{"key", t.m.Key, "shard", t.shard, "position", t.pos.String(), "attempt", f.attempts, "err", err}
	level, msg := slog.LevelWarn, "task failing"
	var pe *PanicError
	if errors.As(err, &pe) {
		level, msg = slog.LevelError, "task failing: handler panicked"
		attrs = append(attrs, "stack", string(pe.Stack))
	}
	tr.log.Log(f.ctx, level, msg, attrs...)
}

// notFailing ends a task's part in the failing spell.
func (tr *term) notFailing(t *task) {
	if t.f == nil || !t.f.failing {
		return
	}
	t.f.failing = false
	if tr.sh.failingTasks.Add(-1) == 0 {
		tr.log.InfoContext(t.f.ctx, "no task failing")
	}
}
