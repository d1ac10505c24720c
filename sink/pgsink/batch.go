package pgsink

import (
	"context"
	"fmt"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// Group commit. Handlers queue their tasks; the first one to find no
// batch running leads one: it takes every queued task (up to MaxBatch)
// into one transaction, claims them all in one statement, runs their
// effects one after another (each in a savepoint of its own, sent with
// the effect's first statement), and commits. The moment its effects are
// done, before its commit, the first waiting handler leads the next
// batch, whose effects run while this one's commit reaches the disk.
//
// One batch runs effects at a time: two batches running effects at once
// each wait for rows the other holds until it commits, and deadlock
// (PostgreSQL waits deadlock_timeout, 1s, to find one). A batch whose
// effect (or claim) has run longer than BatchWindow no longer counts:
// the tasks that arrive meanwhile start a batch of their own, so a slow
// effect holds only the tasks of its batch. The sink has no goroutine of
// its own.

// request is one task waiting for its batch.
type request struct {
	ctx       context.Context
	m         *transport.Message
	fn        Func
	token     int64
	done      chan error    // its result, once
	promote   chan struct{} // try to lead: a batch before it ended its effects or its commit
	taken     bool          // a batch has it (Sink.mu)
	conflicts int           // times a deadlock rolled it back
}

// batch is a leading transaction's state that waiting handlers read
// (under Sink.mu).
type batch struct {
	tasks []*request
	busy  time.Time // when its running claim or effect began (zero: none)
	slow  bool      // it ran past BatchWindow and no longer counts as running
}

// do queues r and returns its result, leading a batch whenever r waits
// and takeLead gives it one.
func (s *Sink) do(r *request) error {
	s.mu.Lock()
	s.pending = append(s.pending, r)
	s.mu.Unlock()
	var tick *time.Ticker
	for {
		s.mu.Lock()
		var b *batch
		if !r.taken {
			b = s.takeLead(time.Now())
		}
		s.mu.Unlock()
		if b != nil {
			s.run(b)
			s.forget()
			continue
		}
		if tick == nil {
			tick = time.NewTicker(s.opts.BatchWindow)
			defer tick.Stop()
		}
		select {
		case err := <-r.done:
			return err
		case <-r.promote:
		case <-tick.C: // the running batch may have become slow
		}
	}
}

// takeLead returns a new batch of the queued tasks for the caller to
// lead, or nil: when a batch runs effects (and has not run one longer
// than BatchWindow), when s.parallel batches are running or committing,
// or when nothing is queued. A batch takes each key once: a task whose
// key it has already (an older term's task during a handover) waits for
// the next. Called with s.mu held.
func (s *Sink) takeLead(now time.Time) *batch {
	if r := s.running; r != nil {
		if r.busy.IsZero() || now.Sub(r.busy) < s.opts.BatchWindow {
			return nil
		}
		r.slow = true
		s.running = nil
		s.active--
	}
	if s.active >= s.parallel || len(s.pending) == 0 {
		return nil
	}
	b := &batch{busy: now}
	keys := make(map[string]bool, min(len(s.pending), s.opts.MaxBatch))
	left := s.pending[:0]
	for _, r := range s.pending {
		if len(b.tasks) == s.opts.MaxBatch || keys[r.m.Key] {
			left = append(left, r)
			continue
		}
		keys[r.m.Key] = true
		r.taken = true
		b.tasks = append(b.tasks, r)
	}
	clear(s.pending[len(left):])
	s.pending = left
	s.running = b
	s.active++
	return b
}

// step marks b busy with a claim or an effect from now (start), or
// between them.
func (s *Sink) step(b *batch, start bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if start {
		b.busy = time.Now()
	} else {
		b.busy = time.Time{}
	}
}

// effectsDone ends b's running: the next batch may start while b
// commits.
func (s *Sink) effectsDone(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.busy = time.Time{}
	if s.running == b {
		s.running = nil
	}
	s.wakeFirst()
}

// finished ends b: committed, rolled back or failed.
func (s *Sink) finished(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == b {
		s.running = nil
	}
	if !b.slow {
		s.active--
	}
	s.wakeFirst()
}

// wakeFirst tells the first queued task to try to lead. Called with s.mu
// held.
func (s *Sink) wakeFirst() {
	if len(s.pending) > 0 {
		select {
		case s.pending[0].promote <- struct{}{}:
		default:
		}
	}
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
	select {
	case r.promote <- struct{}{}:
	default:
	}
}

// maxConflicts is how many times a task rolled back by a deadlock or a
// serialization failure is run again before it fails (and the consumer
// retries it).
const maxConflicts = 5

func (s *Sink) fail(r *request, err error) {
	s.stats.failed.Add(1)
	r.done <- err
}

// run is one batch: one transaction for its tasks.
func (s *Sink) run(b *batch) {
	defer s.finished(b)
	(&txn{s: s, b: b}).run(b.tasks)
}
