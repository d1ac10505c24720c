package consumer

import (
	"container/heap"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// workerBatch is how many ready ids a worker takes per lock.
const workerBatch = 8

// submitPool queues a batch's offers for the pool, in chunks that fit in
// the room there is (waiting for room): per chunk one lock for the
// bookkeeping and one for the queues. Reading advances past a message only
// once the tasks before it are in the bookkeeping, so a checkpoint never
// passes a task that is not.
func (s *sched) submitPool(ms []*transport.Message, offers []offer) bool {
	tr := s.tr
	now := monoNow()
	tasks := s.batch[:0]
	slab := make([]task, len(offers)) // one allocation for the batch's tasks
	for i, o := range offers {
		tr.initTask(&slab[i], o.m, o.id, o.err, now)
		tasks = append(tasks, &slab[i])
	}
	read := 0 // messages the bookkeeping has passed
	ok := true
	for i := 0; i < len(tasks); {
		n := s.reserve(len(tasks) - i)
		if n == 0 {
			tr.abandon(tasks[i:])
			ok = false
			break
		}
		chunk := tasks[i : i+n]
		upto := len(ms)
		if i+n < len(tasks) {
			upto = offers[i+n].i // up to the next task not in this chunk
		}
		tr.mu.Lock()
		for _, t := range chunk {
			tr.shards[t.shard].add(t)
		}
		tr.advance(ms[read:], upto-read)
		read = upto
		tr.mu.Unlock()
		s.enqueue(chunk)
		i += n
	}
	if len(tasks) == 0 {
		tr.mu.Lock()
		tr.advance(ms, len(ms))
		tr.mu.Unlock()
	}
	clear(tasks)
	s.batch = tasks[:0]
	return ok
}

func (s *sched) loop(w *worker) {
	defer func() {
		if w.state.CompareAndSwap(workerIdle, workerExited) {
			s.wg.Done()
		}
	}()
	var qs [workerBatch]*idQueue
	var ts [workerBatch]*task
	var vs [workerBatch]verdict
	var ats [workerBatch]time.Time
	s.mu.Lock()
	for {
		for s.ready.len() == 0 && !s.closed {
			s.work.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		// A share of what is ready, so that the other workers get theirs.
		n := min(workerBatch, max(1, s.ready.len()/len(s.workers)))
		for i := range n {
			qs[i] = s.ready.pop()
			ts[i] = qs[i].first() // under the lock: intake appends to the queue
		}
		s.mu.Unlock()
		for i := range n {
			vs[i], ats[i] = s.tr.execute(w, ts[i])
			if vs[i] == detached {
				return
			}
		}
		s.mu.Lock()
		for i := range n {
			s.afterLocked(qs[i], vs[i], ats[i])
			qs[i], ts[i] = nil, nil
		}
	}
}

// timers moves parked ids back to ready at their retry times (Concurrency
// above 1).
func (s *sched) timers() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		for len(s.parked) > 0 && !s.parked[0].retryAt.After(now) {
			s.ready.push(heap.Pop(&s.parked).(*idQueue))
			s.work.Signal()
		}
		if len(s.parked) > 0 {
			timer.Reset(s.parked[0].retryAt.Sub(now))
		}
		s.mu.Unlock()
		select {
		case <-timer.C:
		case <-s.wake:
			timer.Stop()
		case <-s.done:
			timer.Stop()
			return
		}
	}
}
