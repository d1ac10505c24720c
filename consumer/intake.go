package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
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
// renewal has not moved yet), and writes the checkpoints of a log every
// CheckpointInterval, or sooner when CheckpointEvery tasks have finished.
func (c *Consumer) intake(tr *term, r transport.Reader) {
	lastWrite := time.Now()
	var backoff time.Duration
	for {
		if !tr.mayStart() {
			return
		}
		// Fetch until intake must pause, and no longer than the next
		// checkpoint is due, so an idle log still gets its writes.
		until := time.Unix(0, tr.pauseAt.Load())
		if tr.info.Log {
			until = earliest(until, lastWrite.Add(c.opts.CheckpointInterval))
		}
		fctx, cancel := context.WithDeadline(tr.taking, until)
		ms, err := r.Fetch(fctx)
		cancel()
		switch {
		case err == nil:
			backoff = 0
			if n, lasted, ok := c.fetching.end(); ok {
				tr.log.Info("fetch recovered", "failures", n, "after", lasted)
			}
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		default:
			c.stats.fetchFailures.Add(1)
			if c.fetching.fail() {
				tr.log.Warn("fetch failing; retrying", "err", err)
			}
			backoff = min(max(2*backoff, retryFloor), retryCeiling)
			if !sleep(tr.taking, backoff) {
				return
			}
		}
		if len(ms) > 0 && !c.take(tr, ms) {
			return
		}
		if tr.info.Log {
			due := !time.Now().Before(lastWrite.Add(c.opts.CheckpointInterval))
			select {
			case <-tr.flush:
				due = true
			default:
			}
			if due {
				err := c.writeCheckpoint(tr)
				lastWrite = time.Now()
				if errors.Is(err, checkpoint.ErrMoved) {
					tr.moved = true // the epoch changed under this term: open again
					return
				}
			}
		}
	}
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
	for i, m := range ms {
		if m.Shard < 0 || m.Shard >= len(tr.shards) {
			c.stats.badShard.Add(1)
			if c.badShard.fail() {
				tr.log.Warn("message from a shard the source did not describe; not taken (a transport bug)", "shard", m.Shard, "shards", len(tr.shards))
			}
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
		tasks = append(tasks, &task{m: m, id: id, err: err, tr: tr, taken: now})
		at = append(at, i)
	}
	c.stats.notOwned.Add(notOwned)
	c.stats.doneBefore.Add(doneBefore)

	read := 0 // messages the bookkeeping has passed
	advance := func(upto int) {
		if tr.info.Log {
			for ; read < upto; read++ {
				if m := ms[read]; m.Shard >= 0 && m.Shard < len(tr.shards) {
					tr.shards[m.Shard].next = m.Position.Next()
				}
			}
		}
	}
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
			tr.shards[t.m.Shard].add(t)
		}
		advance(upto)
		tr.mu.Unlock()
		tr.s.enqueue(chunk)
		i += n
	}
	if len(tasks) == 0 {
		tr.mu.Lock()
		advance(len(ms))
		tr.mu.Unlock()
	}
	clear(tasks)
	tr.batch, tr.batchAt = tasks[:0], at[:0]
	return ok
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
