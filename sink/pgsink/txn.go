package pgsink

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// txn is one transaction of a batch: the tasks whose effects it applied
// so far, which await its commit.
type txn struct {
	s       *Sink
	b       *batch
	ctx     context.Context
	cancel  context.CancelFunc
	tx      pgx.Tx
	applied []*request
}

// outcome is what a task's claim found.
type outcome uint8

const (
	applied     outcome = iota + 1 // recorded now: its effect runs
	alreadyDone                    // recorded before (or below the watermark)
	fenced                         // a newer term holds its key
)

const savepoint = "nandi_task"

// run runs tasks (distinct keys) in one transaction: one statement claims
// them all, then each effect runs in a savepoint of its own, then the
// transaction commits. A task's own failure rolls back its savepoint and
// its record and fails it (or requeues it after a deadlock) without
// touching the others.
func (t *txn) run(tasks []*request) {
	s := t.s
	t.ctx, t.cancel = context.WithTimeout(context.Background(), s.opts.BatchTimeout)
	defer t.close()
	outs, err := t.begin(tasks)
	if err != nil {
		t.claimFailed(tasks, err)
		return
	}
	var effects []*request
	for i, r := range tasks { // the refused are answered at once
		switch outs[i] {
		case fenced:
			s.stats.fenced.Add(1)
			r.done <- nil
		case alreadyDone:
			s.stats.alreadyDone.Add(1)
			r.done <- nil
		case applied:
			effects = append(effects, r)
		}
	}
	for i, r := range effects {
		if err := t.effect(r); err != nil {
			// it and the tasks not run yet fail with the transaction
			t.applied = append(t.applied, effects[i:]...)
			t.lost(err)
			return
		}
	}
	s.effectsDone(t.b)
	t.commit()
}

// begin begins the transaction and, in the same round trip, takes each
// task's key for its term (the fence row, locked to the end of the
// transaction; refused when a newer token holds it) and records each task
// as done unless it is below the watermark or recorded already: one
// statement for the batch.
func (t *txn) begin(tasks []*request) ([]outcome, error) {
	s := t.s
	s.step(t.b, true)
	defer s.step(t.b, false)
	keys := make([]string, len(tasks))
	tokens := make([]int64, len(tasks))
	shards := make([]int32, len(tasks))
	his := make([]int64, len(tasks))
	los := make([]int64, len(tasks))
	for i, r := range tasks {
		p := positionOf(r.m)
		keys[i], tokens[i], shards[i], his[i], los[i] = r.m.Key, r.token, int32(r.m.Shard), p.hi, p.lo
	}
	bt := &pgx.Batch{}
	bt.BeginTx(pgx.TxOptions{})
	bt.Queue(s.q.claim, s.opts.Group, keys, tokens, shards, his, los)
	br := s.pool.SendBatch(t.ctx, bt)
	t.tx = br.Tx()
	outs := make([]outcome, 0, len(tasks))
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			var notFenced, recorded bool
			_, err = pgx.ForEachRow(rows, []any{&notFenced, &recorded}, func() error {
				switch {
				case !notFenced:
					outs = append(outs, fenced)
				case !recorded:
					outs = append(outs, alreadyDone)
				default:
					outs = append(outs, applied)
				}
				return nil
			})
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && len(outs) != len(tasks) {
		err = fmt.Errorf("pgsink: the claim of %d tasks returned %d rows", len(tasks), len(outs))
	}
	return outs, err
}

// claimFailed settles tasks whose claim statement failed: the
// transaction's error (the connection, the deadline) fails them all;
// a deadlock runs them again; a task's own (a key PostgreSQL cannot
// store) is found by claiming each in a transaction of its own.
func (t *txn) claimFailed(tasks []*request, err error) {
	var pe *pgconn.PgError
	switch {
	case !errors.As(err, &pe) || t.ctx.Err() != nil:
		t.applied = tasks
		t.lost(err)
	case conflict(err):
		t.close()
		for _, r := range tasks {
			t.s.requeue(r, err)
		}
	case len(tasks) == 1:
		r := tasks[0]
		t.s.fail(r, fmt.Errorf("pgsink: recording %s (shard %d, %v) as done: %w", r.m.Key, r.m.Shard, r.m.Position, err))
	default:
		t.close()
		for _, r := range tasks {
			(&txn{s: t.s, b: t.b}).run([]*request{r})
		}
	}
}

// effect runs r's effect in a savepoint of its own. Failed (an error, a
// panic, or a statement's error swallowed so that the transaction is
// aborted), r's savepoint and record are rolled back and r fails, or runs
// again after a deadlock; an error returned is the transaction's.
func (t *txn) effect(r *request) error {
	s := t.s
	s.step(t.b, true)
	defer s.step(t.b, false)
	// fn runs with the task's context values (its term) but not its
	// cancellation: the batch's statements run to its own deadline, and
	// a task whose term ends meanwhile is still safe (the fence row it
	// holds keeps any newer term's claim waiting until this commits).
	deadline, _ := t.ctx.Deadline()
	fctx, fcancel := context.WithDeadline(context.WithoutCancel(r.ctx), deadline)
	et := &effectTx{Tx: t.tx, ctx: t.ctx}
	ferr := callFn(fctx, et, r)
	fcancel()
	if ferr == nil && t.tx.Conn().PgConn().TxStatus() == 'E' {
		ferr = fmt.Errorf("pgsink: the effect of %s returned nil, but a statement of it failed and aborted the transaction: return that statement's error (the task was rolled back)", r.m.Key)
	}
	if ferr == nil {
		t.applied = append(t.applied, r)
		return nil
	}
	if t.ctx.Err() != nil {
		return ferr // the batch's deadline: the transaction's error
	}
	// Two round trips: an aborted transaction refuses a batch's prepare.
	if et.saved {
		if _, err := t.tx.Exec(t.ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
			return err
		}
	}
	p := positionOf(r.m)
	if _, err := t.tx.Exec(t.ctx, s.q.unrecord, s.opts.Group, r.m.Shard, p.hi, p.lo); err != nil {
		return err
	}
	if conflict(ferr) {
		s.requeue(r, ferr)
	} else {
		s.fail(r, ferr)
	}
	return nil
}

// commit commits the applied tasks (a transaction with none rolls back).
// Refused at COMMIT (a deferred constraint, a trigger), a transaction of
// several applied tasks runs them again one per transaction, so that
// only the one that caused it fails; a lone task is the culprit itself.
func (t *txn) commit() {
	s := t.s
	if len(t.applied) == 0 {
		return
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
	case refused && len(t.applied) == 1:
		r := t.applied[0]
		s.fail(r, fmt.Errorf("pgsink: committing %s: %w", r.m.Key, err))
	case refused:
		s.stats.isolated.Add(1)
		s.log.Warn("a batch was refused at COMMIT; its tasks run again one per transaction to find the one that caused it", "tasks", len(t.applied), "err", err)
		for _, r := range t.applied {
			(&txn{s: s, b: t.b}).run([]*request{r})
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
		t.tx = nil
	}
	if t.cancel != nil {
		t.cancel()
	}
}

// conflict reports whether err aborted the work for another transaction's
// sake (deadlock_detected, serialization_failure): running it again may
// succeed.
func conflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
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
