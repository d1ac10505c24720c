package consumer

import (
	"container/heap"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// The scheduler with Concurrency 1: no goroutine of its own. Intake runs
// each task itself, as a plain loop would, with no goroutine hand-off and
// no bookkeeping for a task that succeeds at once; only failed tasks, and
// the tasks of their ids behind them, are queued here, and intake runs
// them when their retry time comes (runDue). Intake's worker (w0) can be
// detached, as a pool worker can, when user code it runs outlives the
// term: it then returns touching nothing.

// runInline runs a batch's offers on intake's goroutine, inside one gate
// entry for the batch: for each, the handler at once unless its id has
// tasks waiting; a task that succeeds at once costs no allocation. One
// that fails, cannot become a task, or must wait behind its id goes to
// the queues (takeSlow). Reading advances over the batch as it goes
// (batchDone, which a checkpoint write and a drain that detaches intake
// read) and at its end.
func (s *sched) runInline(ms []*transport.Message, offers []offer) bool {
	tr, w := s.tr, s.w0
	tr.mu.Lock()
	tr.curBatch = ms
	tr.mu.Unlock()
	behind := len(ms) // everything before the first offer is behind intake
	if len(offers) > 0 {
		behind = offers[0].i
	}
	tr.batchDone.Store(int64(behind))
	if !s.enterIntake() {
		return s.closeBatch(ms, behind, false, false)
	}
	var handled int64
	defer func() { tr.stats.handled.Add(handled) }()
	for k, o := range offers {
		next := len(ms) // what is behind intake once o is
		if k+1 < len(offers) {
			next = offers[k+1].i
		}
		started, ok := tr.mayStartAt()
		if !ok {
			if !tr.mayStart() {
				return s.closeBatch(ms, o.i, true, false)
			}
			started = time.Since(tr.base)
		}
		var handlerErr error
		if o.err == nil && !s.blocked(o.id) {
			if tr.limiter != nil { // the group's rate
				if !tr.admit() {
					return s.closeBatch(ms, o.i, true, false)
				}
				started = time.Since(tr.base)
			}
			handlerErr = tr.callHandler(w, o.m)
			tr.handling.Observe(time.Since(tr.base) - started)
			if w.detached() {
				return s.detachedReturn()
			}
			if handlerErr == nil {
				handled++
				if o.m.Ack != nil {
					o.m.Ack()
				}
				tr.batchDone.Store(int64(next))
				continue
			}
			if tr.ctx.Err() != nil { // cut off by the lease: the next holder does it
				tr.stats.abandoned.Add(1)
				return s.closeBatch(ms, o.i, true, false)
			}
		}
		// The slow way, outside the batch's gate entry.
		if !s.leaveIntake() {
			return false
		}
		if !s.takeSlow(o, handlerErr) {
			if w.detached() {
				return false
			}
			return s.closeBatch(ms, o.i, false, false)
		}
		tr.batchDone.Store(int64(next))
		if !s.enterIntake() {
			return s.closeBatch(ms, next, false, false)
		}
	}
	return s.closeBatch(ms, len(ms), true, true)
}

// enterIntake enters the gate for intake's own calls into user code
// (Options.ID, tasks run inline), as an attempt of intake's worker.
func (s *sched) enterIntake() bool {
	s.w0.begin(nil)
	if !s.tr.gate.Enter() {
		s.w0.end()
		return false
	}
	s.tr.running.Add(1)
	return true
}

// leaveIntake leaves the gate; false when intake was detached meanwhile.
func (s *sched) leaveIntake() bool {
	s.tr.running.Add(-1)
	s.tr.gate.Leave()
	if !s.w0.end() {
		s.tr.overdue.Add(-1)
		return false
	}
	return true
}

// detachedReturn is how intake returns from user code after it was
// detached inside a batch: it gives back its counts and touches nothing
// else.
func (s *sched) detachedReturn() bool {
	s.tr.running.Add(-1)
	s.tr.overdue.Add(-1)
	return false
}

// closeBatch ends an inline batch whose first n messages are behind
// intake: it leaves the gate if inside, advances reading over them, and
// returns ok (false when intake was detached on leaving).
func (s *sched) closeBatch(ms []*transport.Message, n int, inside, ok bool) bool {
	if inside && !s.leaveIntake() {
		return false
	}
	tr := s.tr
	tr.mu.Lock()
	tr.advance(ms, n)
	tr.curBatch = nil
	tr.mu.Unlock()
	return ok
}

// takeSlow queues an offer that cannot simply run: it failed inline
// (handlerErr), cannot become a task (a permanent error from intake), or
// belongs to an id with tasks waiting. It becomes a task recorded as
// unfinished, and its failure goes through the policy; a task to retry,
// or to wait behind its id, is held here, for which intake waits for room
// (running what comes due). It returns false when the term stopped taking
// or intake was detached.
func (s *sched) takeSlow(o offer, handlerErr error) bool {
	tr := s.tr
	t := tr.newTask(o.m, o.id, o.err, monoNow())
	if !s.reserveInline() {
		return false
	}
	tr.mu.Lock()
	tr.shards[t.shard].add(t)
	tr.mu.Unlock()
	if s.blocked(t.id) {
		s.enqueueBehind(t)
		return true
	}
	var out outcome
	var attached bool
	if handlerErr != nil {
		out, attached = tr.failed(s.w0, t, handlerErr)
	} else {
		out, attached = tr.attempt(s.w0, t)
	}
	if !attached {
		return false
	}
	switch v := tr.settle(t, out); v {
	case finished:
		s.release()
	case again:
		s.park(t, time.Now().Add(t.f.backoff))
	default: // leave: the term is over
		s.release()
		return false
	}
	return true
}

// reserveInline reserves room for one task: while there is none, intake
// runs the retries that come due, and waits for the next one.
func (s *sched) reserveInline() bool {
	for !s.tryReserve() {
		if !s.runDue() || !s.tr.mayStart() {
			return false
		}
		if s.tryReserve() {
			return true
		}
		d := s.nextDue()
		if d.IsZero() || !sleep(s.tr.taking, time.Until(d)) {
			return false
		}
	}
	return true
}

// runDue runs, on intake's goroutine (Concurrency 1), the tasks whose
// retry time has come and then the tasks waiting behind them, as long as
// each id's first task finishes. It returns false when intake was
// detached. With the pool it does nothing: its timer goroutine makes due
// ids ready for the workers.
func (s *sched) runDue() bool {
	if !s.inline() {
		return true
	}
	if d := s.nextDue(); d.IsZero() || d.After(time.Now()) {
		return true
	}
	s.dueBuf = s.due(time.Now(), s.dueBuf[:0])
	for _, q := range s.dueBuf {
		for {
			v, at := s.tr.execute(s.w0, s.first(q))
			if v == detached {
				return false
			}
			if !s.afterInline(q, v, at) {
				break
			}
		}
	}
	clear(s.dueBuf)
	return true
}

// tryReserve reserves room for one task without waiting.
func (s *sched) tryReserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.halted || s.held >= s.capacity {
		return false
	}
	s.held++
	return true
}

// blocked reports whether id has tasks here (then a new task of id must
// wait behind them). Without a lock: only with Concurrency 1, where intake
// is the only goroutine that changes the scheduler.
func (s *sched) blocked(id uint64) bool {
	return len(s.byID) > 0 && s.byID[id] != nil
}

// park holds a reserved task that failed inline until at, its id blocked.
func (s *sched) park(t *task, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue(t.id)
	q.push(t)
	q.retryAt = at
	q.failing = true
	heap.Push(&s.parked, q)
}

// enqueueBehind queues a reserved task behind the tasks of its id, which
// has some (Concurrency 1).
func (s *sched) enqueueBehind(t *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.byID[t.id]
	q.push(t)
	if q.failing {
		s.lighten(t)
	}
}

// release gives back the room of a reserved task that never entered.
func (s *sched) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held--
	s.room.Signal()
}

// afterInline settles q's first task (Concurrency 1, where no worker takes
// ready ids) and reports whether the id's next task may run now.
func (s *sched) afterInline(q *idQueue, v verdict, at time.Time) (more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v {
	case finished:
		q.pop()
		s.held--
		q.failing = false
		if q.len() == 0 {
			delete(s.byID, q.id)
			s.free = append(s.free, q)
			return false
		}
		return true
	case again:
		q.retryAt = at
		s.demote(q)
		heap.Push(&s.parked, q)
	}
	return false
}

// first returns q's first task, under the lock.
func (s *sched) first(q *idQueue) *task {
	s.mu.Lock()
	defer s.mu.Unlock()
	return q.first()
}

// nextDue is the earliest retry time intake must run (zero when nothing
// is parked, and always with the pool, whose timer goroutine runs them).
func (s *sched) nextDue() time.Time {
	if !s.inline() {
		return time.Time{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parked) == 0 {
		return time.Time{}
	}
	return s.parked[0].retryAt
}

// due pops the ids whose retry time has come (Concurrency 1: intake runs
// them).
func (s *sched) due(now time.Time, out []*idQueue) []*idQueue {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.parked) > 0 && !s.parked[0].retryAt.After(now) {
		out = append(out, heap.Pop(&s.parked).(*idQueue))
	}
	return out
}
