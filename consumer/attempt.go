package consumer

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// execute runs one attempt of t on worker w (a scheduler goroutine) and
// tells the scheduler what the task needs next.
func (c *Consumer) execute(w *worker, t *task) (verdict, time.Time) {
	// No attempt starts once the term stops taking, nor close to its
	// deadline before a renewal: a task queued under a term that has ended
	// is left for the next holder (it is not done, so no checkpoint passes
	// it).
	if !t.tr.mayStart() {
		return leave, time.Time{}
	}
	if t.m == nil { // held light behind its id's failing first task
		if v, at, ok := c.refill(t); !ok {
			return v, at
		}
	}
	out, attached := c.attempt(w, t)
	if !attached {
		return detached, time.Time{}
	}
	v := c.settle(t, out)
	if v == again {
		return again, time.Now().Add(t.backoff)
	}
	return v, time.Time{}
}

// attempt runs the handler once (or DeadLetter, once the failure policy
// has given up on the handler) and applies the failure policy. attached is
// false when the worker was detached while user code ran: the task is then
// no longer this goroutine's to touch.
func (c *Consumer) attempt(w *worker, t *task) (out outcome, attached bool) {
	if !t.dead {
		err := t.err
		if err == nil {
			if err, attached = c.invoke(w, t, callHandler); !attached {
				return 0, false
			}
			if err == errGateClosed {
				return outLeave, true
			}
			if err == nil {
				return outHandled, true
			}
		}
		return c.failed(w, t, err)
	}
	return c.deadLetter(w, t)
}

// failed applies the failure policy to a failed attempt of t: retry it,
// skip it, or send it to DeadLetter (now).
func (c *Consumer) failed(w *worker, t *task, err error) (out outcome, attached bool) {
	tr := t.tr
	if t.err == nil && tr.ctx.Err() != nil {
		return outLeave, true // cut off by the lease, not a failure of the task
	}
	t.attempts++
	t.lastErr = err
	c.stats.failed.Add(1)
	c.noteFailure(t, err)
	if c.opts.OnError != nil {
		if _, attached = c.invoke(w, t, callOnError); !attached {
			return 0, false
		}
	}
	if !IsPermanent(err) && (c.opts.MaxAttempts == 0 || t.attempts < c.opts.MaxAttempts) {
		t.backoff = c.nextBackoff(t.backoff)
		return outRetry, true
	}
	if c.opts.DeadLetter == nil { // only a permanent failure gets here
		tr.log.Warn("task skipped: it cannot succeed and there is no DeadLetter",
			"key", t.m.Key, "shard", t.m.Shard, "position", t.m.Position.String(), "err", err)
		return outSkipped, true
	}
	t.dead, t.backoff = true, 0
	return c.deadLetter(w, t)
}

// deadLetter gives t to DeadLetter; a failure of DeadLetter is retried.
func (c *Consumer) deadLetter(w *worker, t *task) (out outcome, attached bool) {
	tr := t.tr
	err, attached := c.invoke(w, t, callDeadLetter)
	if !attached {
		return 0, false
	}
	if err == errGateClosed || (err != nil && tr.ctx.Err() != nil) {
		return outLeave, true
	}
	if err != nil {
		if c.deadLettering.fail() {
			tr.log.Warn("dead letters failing; retrying", "key", t.m.Key, "err", err)
		}
		t.backoff = c.nextBackoff(t.backoff)
		return outRetry, true
	}
	if n, lasted, ok := c.deadLettering.end(); ok {
		tr.log.Info("dead letters recovered", "failures", n, "after", lasted)
	}
	tr.log.Info("task dead-lettered", "key", t.m.Key, "shard", t.m.Shard, "position", t.m.Position.String(),
		"attempts", t.attempts, "err", t.lastErr)
	return outDeadLettered, true
}

func (c *Consumer) nextBackoff(b time.Duration) time.Duration {
	if b == 0 {
		return c.opts.RetryMin
	}
	return min(2*b, c.opts.RetryMax)
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
func (c *Consumer) invoke(w *worker, t *task, what userCall) (err error, attached bool) {
	w.begin(t)
	tr := t.tr
	if !tr.gate.Enter() {
		if !w.end() {
			c.overdue.Add(-1)
			return nil, false
		}
		return errGateClosed, true
	}
	if isDone(tr.t.Done()) { // the term ended since mayStart: start nothing more
		tr.gate.Leave()
		if !w.end() {
			c.overdue.Add(-1)
			return nil, false
		}
		return errGateClosed, true
	}
	c.running.Add(1)
	switch what {
	case callHandler:
		start := time.Now()
		err = c.callHandler(tr.ctx, t.m)
		c.handling.Observe(time.Since(start))
	case callOnError:
		c.callOnError(t)
	case callDeadLetter:
		err = c.callDeadLetter(tr.ctx, t.m, t.lastErr)
	}
	c.running.Add(-1)
	tr.gate.Leave()
	if !w.end() {
		c.overdue.Add(-1)
		tr.log.Warn("overdue handler returned", "key", t.m.Key, "err", err)
		return nil, false
	}
	return err, true
}

func (c *Consumer) callHandler(ctx context.Context, m *transport.Message) (err error) {
	defer c.recoverInto(&err, "handler")
	return c.h(ctx, m)
}

func (c *Consumer) callDeadLetter(ctx context.Context, m *transport.Message, cause error) (err error) {
	defer c.recoverInto(&err, "DeadLetter")
	return c.opts.DeadLetter(ctx, m, cause)
}

func (c *Consumer) callOnError(t *task) {
	var err error
	defer func() {
		if err != nil {
			t.tr.log.Warn("OnError panicked", "key", t.m.Key, "err", err, "stack", string(err.(*PanicError).Stack))
		}
	}()
	defer c.recoverInto(&err, "OnError")
	c.opts.OnError(t.m, t.attempts, t.lastErr)
}

// callID returns the task id of m by Options.ID, recovering a panic.
func (c *Consumer) callID(m *transport.Message) (id uint64, err error) {
	defer c.recoverInto(&err, "ID")
	return c.opts.ID(m)
}

// recoverInto turns a panic of the calling function into a *PanicError in
// *err. It must be deferred directly.
func (c *Consumer) recoverInto(err *error, what string) {
	v := recover()
	if v == nil {
		return
	}
	c.stats.panics.Add(1)
	*err = &PanicError{Func: what, Value: v, Stack: debug.Stack()}
}

// noteFailure logs a task's failures once per spell: the first failure of
// a consumer with no other task failing is a Warn (an Error with the
// stack, for a panic); later failures, of this task or others, are not
// logged again until no task is failing. OnError sees every one.
func (c *Consumer) noteFailure(t *task, err error) {
	c.lastErr.Store(&lastError{msg: t.m.Key + ": " + err.Error(), at: time.Now()})
	if t.failing {
		return
	}
	t.failing = true
	if c.failingTasks.Add(1) != 1 {
		return
	}
	attrs := []any{"key", t.m.Key, "shard", t.m.Shard, "position", t.m.Position.String(), "attempt", t.attempts, "err", err}
	level, msg := slog.LevelWarn, "task failing"
	var pe *PanicError
	if errors.As(err, &pe) {
		level, msg = slog.LevelError, "task failing: handler panicked"
		attrs = append(attrs, "stack", string(pe.Stack))
	}
	t.tr.log.Log(context.Background(), level, msg, attrs...)
}

// notFailing ends a task's part in the failing spell.
func (c *Consumer) notFailing(t *task) {
	if !t.failing {
		return
	}
	t.failing = false
	if c.failingTasks.Add(-1) == 0 {
		t.tr.log.Info("no task failing")
	}
}
