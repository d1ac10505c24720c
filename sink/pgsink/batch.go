package pgsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nandi-go/nandi/transport"
)

// Group commit. Handlers queue their tasks; one of them leads a batch: it
// opens a transaction, takes queued tasks one at a time (each in a
// savepoint of its own: the claim, then the effect), and commits when the
// queue is empty, the batch is full or BatchWindow has passed; the tasks
// that arrive meanwhile wait for the next batch. A batch whose effect (or
// commit) runs longer than BatchWindow stops taking tasks and the next
// waiting handler leads a batch of its own, so a slow effect holds only
// the tasks before it in its batch. The sink has no goroutine of its own.

// request is one task waiting for its batch.
type request struct {
	ctx       context.Context
	m         *transport.Message
	fn        Func
	token     int64
	done      chan error    // its result, once
	promote   chan struct{} // try to lead: the batch before ended
	taken     bool          // a batch has it (Sink.mu)
	conflicts int           // times a deadlock rolled it back
}

// batch is the leading transaction's state that waiting handlers read.
type batch struct {
	opened time.Time
	busy   time.Time // when its running claim, effect or commit began (zero: none); Sink.mu
	closed bool      // it takes no more tasks; Sink.mu
}

// do queues r and returns its result, leading batches while it waits
// whenever none leads or the leading one has been busy longer than
// BatchWindow.
func (s *Sink) do(r *request) error {
	s.mu.Lock()
	s.pending = append(s.pending, r)
	b := s.takeLead(time.Now())
	s.mu.Unlock()
	tick := time.NewTicker(s.opts.BatchWindow)
	defer tick.Stop()
	for {
		if b != nil {
			s.lead(b, r)
			b = nil
		}
		select {
		case err := <-r.done:
			return err
		case <-r.promote:
		case <-tick.C:
		}
		s.mu.Lock()
		if !r.taken {
			b = s.takeLead(time.Now())
		}
		s.mu.Unlock()
	}
}

// takeLead returns a new batch for the caller to lead, or nil when a
// batch that takes tasks is between them (it will take the caller's) or
// as many as the pool has connections take tasks already. A batch busy
// longer than BatchWindow (a slow effect, a commit) takes no more tasks.
// Called with s.mu held.
func (s *Sink) takeLead(now time.Time) *batch {
	s.leaders = slices.DeleteFunc(s.leaders, func(l *batch) bool {
		stuck := !l.busy.IsZero() && now.Sub(l.busy) >= s.opts.BatchWindow
		l.closed = l.closed || stuck
		return stuck
	})
	idle := slices.ContainsFunc(s.leaders, func(l *batch) bool { return l.busy.IsZero() })
	if idle || len(s.leaders) >= s.parallel {
		return nil
	}
	b := &batch{opened: now}
	s.leaders = append(s.leaders, b)
	return b
}

// stopTaking removes b from the batches that take tasks. Called with
// s.mu held.
func (s *Sink) stopTaking(b *batch) {
	b.closed = true
	s.leaders = slices.DeleteFunc(s.leaders, func(l *batch) bool { return l == b })
}

// lead runs b, and further batches while own is still queued; then, if
// tasks wait, it wakes the first of them to lead.
func (s *Sink) lead(b *batch, own *request) {
	for b != nil {
		s.run(b)
		s.forget()
		s.mu.Lock()
		b = nil
		if len(s.pending) > 0 {
			if !own.taken {
				b = s.takeLead(time.Now())
			} else {
				select {
				case s.pending[0].promote <- struct{}{}:
				default:
				}
			}
		}
		s.mu.Unlock()
	}
}

// next takes the next queued task into b, or closes b: when b was
// overtaken, is full (n tasks taken) or past its window, or none waits.
func (s *Sink) next(b *batch, n int) *request {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if b.closed || n >= s.opts.MaxBatch || len(s.pending) == 0 || (n > 0 && now.Sub(b.opened) >= s.opts.BatchWindow) {
		s.stopTaking(b)
		b.busy = now // its commit
		return nil
	}
	r := s.pending[0]
	s.pending = s.pending[1:]
	r.taken = true
	b.busy = now
	return r
}

// idle marks b between tasks, or done.
func (s *Sink) idle(b *batch) {
	s.mu.Lock()
	b.busy = time.Time{}
	s.mu.Unlock()
}

// requeue puts r back at the head of the queue after a deadlock rolled it
// back (its effect runs again), or fails it after maxConflicts.
func (s *Sink) requeue(r *request, err error) {
	s.stats.conflicts.Add(1)
	if r.conflicts++; r.conflicts > maxConflicts {
		s.fail(r, fmt.Errorf("pgsink: %s rolled back by %d deadlocks or serialization failures in a row: %w", r.m.Key, maxConflicts+1, err))
		return
	}
	s.mu.Lock()
	r.taken = false
	s.pending = append([]*request{r}, s.pending...)
	s.mu.Unlock()
}

// maxConflicts is how many times a task rolled back by a deadlock or a
// serialization failure is run again before it fails (and the consumer
// retries it).
const maxConflicts = 5

// conflict reports whether err aborted the work for another transaction's
// sake (deadlock_detected, serialization_failure): running it again may
// succeed.
func conflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// aborted reports whether err says the transaction was already aborted
// (in_failed_sql_transaction).
func aborted(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "25P02"
}

type outcome uint8

const (
	applied outcome = iota + 1
	alreadyDone
	fenced
)

func (s *Sink) fail(r *request, err error) {
	s.stats.failed.Add(1)
	r.done <- err
}

// run is one batch: one transaction, the tasks that next gives it.
func (s *Sink) run(b *batch) {
	defer func() {
		s.mu.Lock()
		s.stopTaking(b)
		b.busy = time.Time{}
		s.mu.Unlock()
	}()
	t := &txn{s: s}
	defer t.close()
	for r := s.next(b, len(t.applied)); r != nil; r = s.next(b, len(t.applied)) {
		if err := t.add(r); err != nil {
			t.lost(err)
			return
		}
		s.idle(b)
	}
	t.commit(false)
}

// solo runs r in a transaction of its own: to find which task of a batch
// refused at COMMIT caused it.
func (s *Sink) solo(r *request) {
	t := &txn{s: s}
	defer t.close()
	if err := t.add(r); err != nil {
		t.lost(err)
		return
	}
	t.commit(true)
}

// txn is a batch's transaction: the tasks applied in it so far (each
// awaits the commit), and whether the last one's effect may have left it
// aborted (an error it swallowed).
type txn struct {
	s        *Sink
	ctx      context.Context
	cancel   context.CancelFunc
	tx       pgx.Tx
	applied  []*request
	unproven bool
}

const savepoint = "nandi_task"

// add runs r in a savepoint: its claim (the key's fence and the task's
// record), then its effect. A failure of r's own rolls back to the
// savepoint and fails r (or requeues it after a deadlock) without
// touching the others; an error returned is the transaction's.
func (t *txn) add(r *request) error {
	s := t.s
	if t.tx == nil {
		t.ctx, t.cancel = context.WithTimeout(context.Background(), s.opts.BatchTimeout)
		tx, err := s.pool.Begin(t.ctx)
		if err != nil {
			t.applied = append(t.applied, r) // fails with the transaction
			return err
		}
		t.tx = tx
	}
	out, err := t.claim(r)
	if err != nil {
		t.applied = append(t.applied, r)
		return err
	}
	switch out {
	case fenced:
		s.stats.fenced.Add(1)
		r.done <- nil
		return nil
	case alreadyDone:
		s.stats.alreadyDone.Add(1)
		r.done <- nil
		return nil
	case 0: // refused, rolled back
		return nil
	}
	// fn runs with the task's context values (its term) but not its
	// cancellation: the batch's statements run to its own deadline, and
	// a task whose term ends meanwhile is still safe (the fence row it
	// holds keeps any newer term's claim waiting until this commits).
	deadline, _ := t.ctx.Deadline()
	fctx, fcancel := context.WithDeadline(context.WithoutCancel(r.ctx), deadline)
	ferr := callFn(fctx, t.tx, r)
	fcancel()
	if ferr == nil {
		t.applied = append(t.applied, r)
		t.unproven = true
		return nil
	}
	if _, err := t.tx.Exec(t.ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
		t.applied = append(t.applied, r)
		return err
	}
	if conflict(ferr) {
		s.requeue(r, ferr)
	} else {
		s.fail(r, ferr)
	}
	return nil
}

// claim opens r's savepoint and claims r in one round trip. Its outcome
// is 0 when r was rolled back (failed or requeued); an error returned is
// the transaction's. A savepoint refused because the transaction is
// aborted convicts the task before: its effect swallowed a statement's
// error.
func (t *txn) claim(r *request) (outcome, error) {
	s := t.s
	p := positionOf(r.m)
	for {
		bt := &pgx.Batch{}
		bt.Queue("SAVEPOINT " + savepoint)
		bt.Queue(s.q.claim, s.opts.Group, r.m.Key, r.token, r.m.Shard, p.hi, p.lo)
		br := t.tx.SendBatch(t.ctx, bt)
		_, spErr := br.Exec()
		var notFenced, recorded bool
		claimErr := br.QueryRow().Scan(&notFenced, &recorded)
		closeErr := br.Close()
		switch {
		case spErr != nil && aborted(spErr) && t.unproven:
			if err := t.convictLast(); err != nil {
				return 0, err
			}
			continue
		case spErr != nil:
			return 0, spErr
		}
		t.unproven = false // the task before left the transaction sound
		switch {
		case claimErr != nil:
			var pe *pgconn.PgError
			if !errors.As(claimErr, &pe) || t.ctx.Err() != nil {
				return 0, claimErr // the connection, the deadline
			}
			if _, err := t.tx.Exec(t.ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
				return 0, err
			}
			if conflict(claimErr) {
				s.requeue(r, claimErr)
			} else {
				s.fail(r, fmt.Errorf("pgsink: recording %s (shard %d, %v) as done: %w", r.m.Key, r.m.Shard, r.m.Position, claimErr))
			}
			return 0, nil
		case closeErr != nil:
			return 0, closeErr
		case !notFenced:
			return fenced, nil
		case !recorded:
			return alreadyDone, nil
		}
		return applied, nil
	}
}

// convictLast rolls back the last applied task, whose effect returned nil
// but left the transaction aborted, and fails it.
func (t *txn) convictLast() error {
	t.unproven = false
	if _, err := t.tx.Exec(t.ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
		return err
	}
	last := t.applied[len(t.applied)-1]
	t.applied = t.applied[:len(t.applied)-1]
	t.s.fail(last, fmt.Errorf("pgsink: the effect of %s returned nil, but a statement of it failed and aborted the transaction: return that statement's error (the task was rolled back)", last.m.Key))
	return nil
}

// commit commits the applied tasks. Refused at COMMIT (a deferred
// constraint, a trigger), a batch of several applied tasks runs them again
// one per transaction, so that only the one that caused it fails (solo:
// this is that run); a lone task is the culprit itself.
func (t *txn) commit(solo bool) {
	s := t.s
	if t.tx == nil {
		return
	}
	if t.unproven {
		if _, err := t.tx.Exec(t.ctx, "RELEASE SAVEPOINT "+savepoint); err != nil {
			if !aborted(err) {
				t.lost(err)
				return
			}
			if err := t.convictLast(); err != nil {
				t.lost(err)
				return
			}
		}
	}
	err := t.tx.Commit(t.ctx)
	if err == nil {
		s.stats.commits.Add(1)
		for _, r := range t.applied {
			s.stats.applied.Add(1)
			r.done <- nil
		}
		return
	}
	var pe *pgconn.PgError
	refused := errors.As(err, &pe) || errors.Is(err, pgx.ErrTxCommitRollback)
	switch {
	case conflict(err):
		for _, r := range t.applied {
			s.requeue(r, err)
		}
	case refused && (solo || len(t.applied) <= 1):
		// the culprit is known: the one task applied (none when every task
		// was refused or failed before)
		for _, r := range t.applied {
			s.fail(r, fmt.Errorf("pgsink: committing %s: %w", r.m.Key, err))
		}
	case refused:
		s.stats.isolated.Add(1)
		s.log.Warn("a batch was refused at COMMIT; its tasks run again one per transaction to find the one that caused it", "tasks", len(t.applied), "err", err)
		for _, r := range t.applied {
			s.solo(r)
		}
	default:
		t.lost(err)
	}
}

// lost fails every task applied in the transaction with err, the
// transaction's (a lost connection, the deadline): none of them
// committed, or none is known to have (the consumer retries them, and
// their records make a retry safe).
func (t *txn) lost(err error) {
	s := t.s
	s.stats.batchErrors.Add(1)
	s.log.Warn("a batch failed; its tasks are retried", "tasks", len(t.applied), "err", err)
	for _, r := range t.applied {
		r.done <- fmt.Errorf("pgsink: %w", err)
	}
	t.applied = nil
}

// close rolls back what did not commit.
func (t *txn) close() {
	if t.tx != nil {
		_ = t.tx.Rollback(context.WithoutCancel(t.ctx))
	}
	if t.cancel != nil {
		t.cancel()
	}
}

// callFn calls the task's fn, recovering a panic into an error (a failed
// task, as the consumer treats a handler's).
func callFn(ctx context.Context, tx pgx.Tx, r *request) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pgsink: the effect of %s panicked: %v", r.m.Key, v)
		}
	}()
	return r.fn(ctx, tx, r.m)
}
