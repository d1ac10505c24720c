package consumer

import "sync"

// sched runs tasks on a fixed number of goroutines, one id at a time, in
// the order they were pushed per id. Different ids run in parallel.
type sched struct {
	mu     sync.Mutex
	cond   *sync.Cond
	byID   map[uint64]*idQueue // ids with a task queued or running
	ready  []*idQueue          // ids whose first task may run now
	closed bool
	wg     sync.WaitGroup
}

type idQueue struct {
	tasks []*task
}

func newSched(workers int, run func(*task)) *sched {
	s := &sched{byID: map[uint64]*idQueue{}}
	s.cond = sync.NewCond(&s.mu)
	for range workers {
		s.wg.Go(func() { s.work(run) })
	}
	return s
}

func (s *sched) push(t *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.byID[t.id]; q != nil {
		q.tasks = append(q.tasks, t) // runs after the ones before it
		return
	}
	q := &idQueue{tasks: []*task{t}}
	s.byID[t.id] = q
	s.ready = append(s.ready, q)
	s.cond.Signal()
}

func (s *sched) work(run func(*task)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for len(s.ready) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.ready) == 0 {
			return
		}
		q := s.ready[0]
		s.ready[0] = nil
		s.ready = s.ready[1:]
		t := q.tasks[0]
		s.mu.Unlock()
		run(t)
		s.mu.Lock()
		q.tasks[0] = nil
		q.tasks = q.tasks[1:]
		if len(q.tasks) == 0 {
			delete(s.byID, t.id)
		} else {
			s.ready = append(s.ready, q)
			s.cond.Signal()
		}
	}
}

// close lets the workers return once every queued task has run.
func (s *sched) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
}
