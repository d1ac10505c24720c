package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// Retries of the consumer's own I/O (opening the ledger or the source,
// fetching) back off from retryFloor, doubling, to retryCeiling: quick
// after a blip, and at most one try a second against a source that is down.
const (
	retryFloor   = 10 * time.Millisecond
	retryCeiling = time.Second
)

// intake reads and dispatches until the term stops taking. It fetches
// only while work may start (not within DrainTimeout of a deadline the
// renewal has not moved yet). Checkpoints are written by the term's writer
// (checkpoint.go), never waited for here.
// With Concurrency 1 it also runs the tasks (takeInline) and the retries
// that come due (runDue). It runs on its own goroutine, which the drain
// detaches if user code it runs (a handler, or Options.ID) outlives the
// term; it then returns touching nothing.
func (c *Consumer) intake(tr *term, r transport.Reader) {
	defer close(tr.intakeDone)
	if tr.info.Log {
		c.intakePrefetched(tr, r)
		return
	}
	for {
		if tr.inline && !c.runDue(tr) {
			return
		}
		if !tr.mayStart() {
			return
		}
		// Fetch until intake must pause, and no longer than the next
		// retry is due: a source that is not a log loses what is read and
		// not taken, so nothing is read ahead.
		until := time.Unix(0, tr.pauseAt.Load())
		if tr.inline {
			if d := tr.s.nextDue(); !d.IsZero() {
				until = earliest(until, d)
			}
		}
		fctx, cancel := context.WithDeadline(tr.taking, until)
		ms, err := r.Fetch(fctx)
		cancel()
		if !c.fetched(tr, err) {
			return
		}
		if len(ms) > 0 && !c.takeBatch(tr, ms) {
			return
		}
	}
}

// intakePrefetched is intake for a log: a fetcher goroutine reads the next
// batch while intake runs the current one (a log keeps what is read and
// not taken: the checkpoint never passes it), so the transport's decoding
// and the handlers overlap, one batch ahead.
func (c *Consumer) intakePrefetched(tr *term, r transport.Reader) {
	batches := make(chan []*transport.Message, 1)
	tr.wg.Go(func() { c.fetcher(tr, r, batches) })
	var due *time.Timer
	for {
		if tr.inline && !c.runDue(tr) {
			return
		}
		if !tr.mayStart() {
			return
		}
		var dueC <-chan time.Time
		if tr.inline {
			if d := tr.s.nextDue(); !d.IsZero() {
				if due == nil {
					due = time.NewTimer(time.Until(d))
					defer due.Stop()
				} else {
					due.Reset(time.Until(d))
				}
				dueC = due.C
			}
		}
		select {
		case ms := <-batches:
			if !c.takeBatch(tr, ms) {
				return
			}
		case <-dueC:
		case <-tr.taking.Done():
			return
		}
	}
}

// fetcher reads batches for intakePrefetched until the term stops taking.
func (c *Consumer) fetcher(tr *term, r transport.Reader, out chan<- []*transport.Message) {
	for tr.taking.Err() == nil {
		ms, err := r.Fetch(tr.taking)
		if !c.fetched(tr, err) {
			return
		}
		if len(ms) == 0 {
			continue
		}
		select {
		case out <- ms:
		case <-tr.taking.Done():
			return
		}
	}
}

// fetched accounts for a fetch's error: a failure is counted, logged once
// per spell and waited out with backoff. It returns false when the term
// stopped taking meanwhile.
func (c *Consumer) fetched(tr *term, err error) bool {
	switch {
	case err == nil:
		tr.fetchBackoff = 0
		if n, lasted, ok := c.fetching.end(); ok {
			tr.log.Info("fetch recovered", "failures", n, "after", lasted)
		}
	case errors.Is(err, transport.ErrClosed):
		return false
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return tr.taking.Err() == nil
	default:
		c.stats.fetchFailures.Add(1)
		if c.fetching.fail() {
			tr.log.Warn("fetch failing; retrying", "err", err)
		}
		tr.fetchBackoff = min(max(2*tr.fetchBackoff, retryFloor), retryCeiling)
		return sleep(tr.taking, tr.fetchBackoff)
	}
	return true
}

func (c *Consumer) takeBatch(tr *term, ms []*transport.Message) bool {
	if tr.inline {
		return c.takeInline(tr, ms)
	}
	return c.take(tr, ms)
}

// takeInline runs one batch as a plain loop would (Concurrency 1): for
// each message the id, the filter, and the handler, inside one gate entry
// for the batch; a task that succeeds at once costs no allocation and no
// bookkeeping. A task that fails, cannot become a task, or belongs to an id
// with tasks waiting goes the slow way (takeSlow). Reading is advanced
// over the batch at its end, in one lock. It returns false when the term
// stopped taking (the rest of the batch stays unread for the checkpoint)
// or intake was detached.
func (c *Consumer) takeInline(tr *term, ms []*transport.Message) bool {
	w := tr.w0
	tr.mu.Lock()
	tr.curBatch = ms
	tr.mu.Unlock()
	tr.batchDone.Store(0)
	if !c.enterBatch(tr) {
		return c.closeBatch(tr, ms, 0, false, false)
	}
	var handled, notOwned, doneBefore int64
	defer func() {
		c.stats.handled.Add(handled)
		c.stats.notOwned.Add(notOwned)
		c.stats.doneBefore.Add(doneBefore)
	}()
	for i, m := range ms {
		if m.Shard < 0 || m.Shard >= len(tr.shards) {
			c.noteBadShard(tr, m)
			tr.batchDone.Store(int64(i + 1))
			continue
		}
		id, intakeErr := c.taskID(m)
		if w.detached() {
			return c.detachedReturn()
		}
		if !tr.a.Owns(id) {
			notOwned++
			if m.Ack != nil {
				m.Ack()
			}
			tr.batchDone.Store(int64(i + 1))
			continue
		}
		if tr.st != nil && tr.st.Done(m.Shard, m.Position, id) {
			doneBefore++
			if m.Ack != nil {
				m.Ack()
			}
			tr.batchDone.Store(int64(i + 1))
			continue
		}
		started, ok := tr.mayStartAt()
		if !ok {
			if !tr.mayStart() {
				return c.closeBatch(tr, ms, i, true, false)
			}
			started = time.Since(tr.base)
		}
		var handlerErr error
		if intakeErr == nil && !tr.s.blocked(id) {
			handlerErr = c.callHandler(tr.ctx, m)
			c.handling.Observe(time.Since(tr.base) - started)
			if w.detached() {
				return c.detachedReturn()
			}
			if handlerErr == nil {
				handled++
				if m.Ack != nil {
					m.Ack()
				}
				tr.batchDone.Store(int64(i + 1))
				continue
			}
			if tr.ctx.Err() != nil { // cut off by the lease: the next holder does it
				c.stats.abandoned.Add(1)
				return c.closeBatch(tr, ms, i, true, false)
			}
		}
		// The slow way, outside the batch's gate entry.
		if !c.leaveBatch(tr) {
			return false
		}
		if !c.takeSlow(tr, m, id, intakeErr, handlerErr) {
			if w.detached() {
				return false
			}
			return c.closeBatch(tr, ms, i, false, false)
		}
		tr.batchDone.Store(int64(i + 1))
		if !c.enterBatch(tr) {
			return c.closeBatch(tr, ms, i+1, false, false)
		}
	}
	return c.closeBatch(tr, ms, len(ms), true, true)
}

// detachedReturn is how intake returns from user code after it was
// detached inside a batch: it gives back its counts and touches nothing
// else.
func (c *Consumer) detachedReturn() bool {
	c.running.Add(-1)
	c.overdue.Add(-1)
	return false
}

// enterBatch enters the gate for intake's inline work, as an attempt of
// intake's worker.
func (c *Consumer) enterBatch(tr *term) bool {
	tr.w0.begin(nil)
	if !tr.gate.Enter() {
		tr.w0.end()
		return false
	}
	c.running.Add(1)
	return true
}

// leaveBatch leaves the gate; false when intake was detached meanwhile.
func (c *Consumer) leaveBatch(tr *term) bool {
	c.running.Add(-1)
	tr.gate.Leave()
	if !tr.w0.end() {
		c.overdue.Add(-1)
		return false
	}
	return true
}

// closeBatch ends an inline batch whose first n messages are behind
// intake: it leaves the gate if inside, advances reading over them, and
// returns ok (false when intake was detached on leaving).
func (c *Consumer) closeBatch(tr *term, ms []*transport.Message, n int, inside, ok bool) bool {
	if inside && !c.leaveBatch(tr) {
		return false
	}
	tr.mu.Lock()
	tr.advance(ms, n)
	tr.curBatch = nil
	tr.mu.Unlock()
	return ok
}

// advance moves reading past the first n messages of ms (under mu).
func (tr *term) advance(ms []*transport.Message, n int) {
	if !tr.info.Log {
		return
	}
	for _, m := range ms[:n] {
		if m.Shard >= 0 && m.Shard < len(tr.shards) {
			tr.shards[m.Shard].next = m.Position.Next()
		}
	}
}

// takeSlow takes an owned message that cannot simply run (Concurrency 1):
// it failed inline (err from the handler), cannot become a task (a
// permanent err from intake), or belongs to an id with tasks waiting. It
// becomes a task recorded as unfinished, and its failure goes through the
// policy; a task to retry, or to wait behind its id, is held by the
// scheduler, for which it waits for room (running what comes due). It
// returns false when the term stopped taking or intake was detached.
func (c *Consumer) takeSlow(tr *term, m *transport.Message, id uint64, intakeErr, handlerErr error) bool {
	t := newTask(tr, m, id, intakeErr, c.firstTaken(m.Shard, m.Position, time.Now()))
	if !c.reserveInline(tr) {
		return false
	}
	tr.mu.Lock()
	tr.shards[m.Shard].add(t)
	tr.mu.Unlock()
	if tr.s.blocked(id) {
		tr.s.enqueueBehind(t)
		return true
	}
	var out outcome
	var attached bool
	if handlerErr != nil {
		out, attached = c.failed(tr.w0, t, handlerErr)
	} else {
		out, attached = c.attempt(tr.w0, t)
	}
	if !attached {
		return false
	}
	switch v := c.settle(t, out); v {
	case finished:
		tr.s.release()
	case again:
		tr.s.park(t, time.Now().Add(t.backoff))
	default: // leave: the term is over
		tr.s.release()
		return false
	}
	return true
}

// reserveInline reserves room in the scheduler for one task (Concurrency
// 1): while it is full, intake runs the retries that come due, and waits
// for the next one.
func (c *Consumer) reserveInline(tr *term) bool {
	for !tr.s.tryReserve() {
		if !c.runDue(tr) || !tr.mayStart() {
			return false
		}
		if tr.s.tryReserve() {
			return true
		}
		d := tr.s.nextDue()
		if d.IsZero() || !sleep(tr.taking, time.Until(d)) {
			return false
		}
	}
	return true
}

// runDue runs, on intake's goroutine (Concurrency 1), the tasks whose
// retry time has come and then the tasks waiting behind them, as long as
// each id's first task finishes. It returns false when intake was
// detached.
func (c *Consumer) runDue(tr *term) bool {
	if d := tr.s.nextDue(); d.IsZero() || d.After(time.Now()) {
		return true
	}
	tr.dueBuf = tr.s.due(time.Now(), tr.dueBuf[:0])
	for _, q := range tr.dueBuf {
		for {
			v, at := c.execute(tr.w0, tr.s.first(q))
			if v == detached {
				return false
			}
			more := tr.s.afterInline(q, v, at)
			if !more {
				break
			}
		}
	}
	clear(tr.dueBuf)
	return true
}

// take filters one batch and hands the owned tasks to the scheduler, in
// chunks that fit in MaxPending (waiting for room): per chunk one lock for
// the bookkeeping and one for the scheduler. Reading advances past a
// message only once the tasks before it are in the bookkeeping, so a
// checkpoint never passes a task that is not. It returns false when the
// term stopped taking before the whole batch was queued; the rest stays
// unfinished (a log reads it again from the checkpoint; other sources give
// it up).
func (c *Consumer) take(tr *term, ms []*transport.Message) bool {
	now := time.Now()
	tasks, at := tr.batch[:0], tr.batchAt[:0]
	var notOwned, doneBefore int64
	// Options.ID is user code: called inside the gate, as intake's
	// attempt, so that one that never returns is detached like a handler.
	if c.opts.ID != nil && !c.enterBatch(tr) {
		return false
	}
	for i, m := range ms {
		if m.Shard < 0 || m.Shard >= len(tr.shards) {
			c.noteBadShard(tr, m)
			continue
		}
		id, err := c.taskID(m)
		if !tr.a.Owns(id) {
			notOwned++
			if m.Ack != nil {
				m.Ack()
			}
			continue
		}
		if tr.st != nil && tr.st.Done(m.Shard, m.Position, id) {
			doneBefore++
			if m.Ack != nil {
				m.Ack()
			}
			continue
		}
		tasks = append(tasks, newTask(tr, m, id, err, c.firstTaken(m.Shard, m.Position, now)))
		at = append(at, i)
	}
	if c.opts.ID != nil && !c.leaveBatch(tr) {
		return false
	}
	c.stats.notOwned.Add(notOwned)
	c.stats.doneBefore.Add(doneBefore)

	read := 0 // messages the bookkeeping has passed
	ok := true
	for i := 0; i < len(tasks); {
		n := tr.s.reserve(len(tasks) - i)
		if n == 0 {
			c.abandon(tasks[i:])
			ok = false
			break
		}
		chunk := tasks[i : i+n]
		upto := len(ms)
		if i+n < len(tasks) {
			upto = at[i+n] // up to the next task not in this chunk
		}
		tr.mu.Lock()
		for _, t := range chunk {
			tr.shards[t.shard].add(t)
		}
		tr.advance(ms[read:], upto-read)
		read = upto
		tr.mu.Unlock()
		tr.s.enqueue(chunk)
		i += n
	}
	if len(tasks) == 0 {
		tr.mu.Lock()
		tr.advance(ms, len(ms))
		tr.mu.Unlock()
	}
	clear(tasks)
	tr.batch, tr.batchAt = tasks[:0], at[:0]
	return ok
}

func (c *Consumer) noteBadShard(tr *term, m *transport.Message) {
	c.stats.badShard.Add(1)
	if c.badShard.fail() {
		tr.log.Warn("message from a shard the source did not describe; not taken (a transport bug)", "shard", m.Shard, "shards", len(tr.shards))
	}
}

// taskID returns the task id of m and, when m cannot become a task (the
// source said so, or Options.ID failed or panicked), a permanent error;
// its owner is then ID(m.Key).
func (c *Consumer) taskID(m *transport.Message) (uint64, error) {
	if m.Err != nil {
		return ID(m.Key), Permanent(m.Err)
	}
	if c.opts.ID == nil {
		return ID(m.Key), nil
	}
	id, err := c.callID(m)
	if err != nil {
		return ID(m.Key), Permanent(err)
	}
	return id, nil
}

// discard reads a source that is not a log while this worker holds
// nothing, counting (and acknowledging) what it reads as Unowned, until a
// term is held. Leaving those messages in the subscription instead would
// have them handled later, under a mapping they did not arrive in, by a
// worker that may not have owned them when another one did.
func (c *Consumer) discard(ctx context.Context, r transport.Reader) (*partition.Term, error) {
	var backoff time.Duration
	for {
		changed := c.lease.Changed()
		if t := c.lease.Term(); t != nil && t.Held() {
			return t, nil
		}
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			select {
			case <-changed:
				cancel()
			case <-fctx.Done():
			}
		})
		ms, err := r.Fetch(fctx)
		cancel()
		wg.Wait()
		for _, m := range ms {
			c.stats.unowned.Add(1)
			if m.Ack != nil {
				m.Ack()
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			c.stats.fetchFailures.Add(1)
			if c.fetching.fail() {
				c.log.Warn("fetch failing; retrying", "err", err)
			}
			backoff = min(max(2*backoff, retryFloor), retryCeiling)
			if !sleep(ctx, backoff) {
				return nil, ctx.Err()
			}
		} else if err == nil {
			backoff = 0
			if n, lasted, ok := c.fetching.end(); ok {
				c.log.Info("fetch recovered", "failures", n, "after", lasted)
			}
		}
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
