package consumer

import (
	"container/heap"
	"slices"
	"time"

	"github.com/kamstrup/intmap"
	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
)

// book is a term's task book: every task the term has taken and not
// finished, and where reading has got to. It is plain data, with no
// goroutine, no I/O, no clock (callers pass the time) and no lock (the
// runner holds its lock around every call), so that its rules are tested
// on their own (book_test.go) as etcd's raft tests its state machine.
//
// Its rules:
//   - per id, one task at a time, in the order taken; different ids in
//     any order. An id is in exactly one state: ready (its first task may
//     run), running (next returned it, settle has not been told), parked
//     (until a retry time) or left (its first task was cut off by the
//     term's end: it and the tasks behind it stay until handBack);
//   - at most capacity tasks are held whole (queued, running or parked);
//     take is given no more than room;
//   - a task behind an id whose first task has failed is held light when
//     the source can read it again (reread): its message is dropped and it
//     leaves capacity, at most maxWaiting at once, so that a failing id's
//     backlog never stops the others;
//   - per shard, the unfinished tasks in position order and the position
//     after the last message read: the mark a checkpoint records. Reading
//     passes a message only once its task is in its shard's list.
type book struct {
	shards []*shardTrack // per shard of the source; nil where the term reads nothing
	log    bool          // reading positions are kept (a log)

	byID   *intmap.Map[uint64, *idQueue] // the ids with tasks in the book
	ready  fifo                          // ids whose first task may run now, in order
	shut   bool                          // the start window is shut: next gives nothing until openWindow
	parked parkHeap                      // ids waiting for a retry time
	free   []*idQueue
	spare  []*task // finished tasks, for take to be given again (spares)

	held, capacity      int
	reread              bool // tasks behind a failing id may be held light
	maxWaiting, waiting int  // the most light tasks, and how many there are
	finished            int  // tasks finished since marks last ran
}

// result is how an attempt ended, and what it leaves its task: the one
// result type of the consumer (the attempt returns it, the term counts
// it, the book applies it).
type result uint8

const (
	// resHandled, resDeadLettered, resSkipped: finished. The id's next task
	// may run.
	resHandled result = iota
	resDeadLettered
	resSkipped
	// resRetry: failed; the task runs again at the retry time and its id
	// waits until then. No goroutine waits with it.
	resRetry
	// resDeadLetter: failed for good (the failure policy gave up on the
	// handler): DeadLetter is what runs next for the task, as soon as a
	// worker takes it; its id's later tasks wait behind it until then.
	resDeadLetter
	// resNotNow: nothing started, the start window being shut (the group
	// is paused, or the term is within MinTaskTime of a deadline no renewal
	// has moved yet). The task goes back first in line, and the book gives
	// nothing until the window opens (openWindow): no worker waits holding
	// a task.
	resNotNow
	// resLeave: the term is over for this task. It stays unfinished, and so
	// do the later tasks of its id (per-id order); handBack returns them.
	resLeave
	// resDetached: the worker was detached while user code ran (overdue).
	// It touches nothing of the term any more; the book is never told.
	resDetached
)

// finished reports whether r finishes its task (handled, dead-lettered or
// skipped).
func (r result) finished() bool { return r <= resSkipped }

func newBook(capacity, maxWaiting int, reread bool) *book {
	// Sized for the tasks held whole: the tasks held light (up to
	// maxWaiting, 100,000 by default) grow it when a failing id makes them
	// wait, and a term's book is not allocated, nor cleared, at their size.
	return &book{byID: intmap.New[uint64, *idQueue](capacity), capacity: capacity, maxWaiting: maxWaiting, reread: reread}
}

// open gives the book the shards the term reads (nil entries: not read);
// log says whether reading positions are kept.
func (b *book) open(shards []*shardTrack, log bool) {
	b.shards, b.log = shards, log
}

// room is how many more tasks may be taken whole.
func (b *book) room() int { return max(b.capacity-b.held, 0) }

// take takes tasks in, in the order read (at most room): each joins its
// shard's unfinished list and queues behind the earlier tasks of its id
// (light, if the id is failing and it may be). Then reading passes ms,
// the messages read up to the next task not taken. It returns how many
// ids became ready.
func (b *book) take(ts []*task, ms []*transport.Message) (ready int) {
	b.held += len(ts)
	for _, t := range ts {
		b.shards[t.shard].add(t)
		if q, _ := b.byID.Get(t.id); q != nil {
			t.q = q
			q.push(t) // runs after the ones before it
			if q.failing {
				b.lighten(t)
			}
			continue
		}
		q := b.queue(t.id)
		t.q = q
		q.push(t)
		b.ready.push(q)
		ready++
	}
	b.advance(ms)
	return ready
}

// advance moves reading past ms.
func (b *book) advance(ms []*transport.Message) {
	if !b.log {
		return
	}
	for _, m := range ms {
		if m.Shard >= 0 && m.Shard < len(b.shards) && b.shards[m.Shard] != nil {
			b.shards[m.Shard].next = m.Position.Next()
		}
	}
}

// next returns the first task of the id ready longest, which is running
// until settle; nil when no id is ready.
func (b *book) next() *task {
	if b.shut || b.ready.len() == 0 {
		return nil
	}
	return b.ready.pop().first()
}

// startable reports whether next would give a task.
func (b *book) startable() bool { return !b.shut && b.ready.len() > 0 }

// openWindow ends a shut start window (resNotNow): next gives tasks
// again. The task that met the shut window is given first.
func (b *book) openWindow() { b.shut = false }

// settle records how the attempt of t, returned by next, ended (v, with
// the retry time at for resRetry). Finished: t leaves its shard's list and
// its id, whose next task is ready behind the ids already waiting.
// resRetry: its id is parked until at and the tasks behind it are held
// light, if they may be; parkedFirst says at is now the earliest retry
// time. resNotNow: t's id goes back first in line and the book gives
// nothing until openWindow. resDeadLetter: t is marked for DeadLetter and its id is ready
// again at once, behind the ids already waiting, the tasks behind it held
// light as for a retry. resLeave: t and its id stay as they are.
func (b *book) settle(t *task, v result, at time.Time) (parkedFirst bool) {
	q := t.q
	switch v {
	case resHandled, resDeadLettered, resSkipped:
		if sh := b.shards[t.shard]; sh != nil {
			sh.remove(t)
		}
		b.finished++
		b.spare = append(b.spare, t)
		q.pop()
		b.held--
		q.failing = false
		if q.len() == 0 {
			b.byID.Del(q.id)
			b.free = append(b.free, q)
		} else {
			b.ready.push(q)
		}
	case resRetry:
		q.retryAt = at
		b.demote(q)
		heap.Push(&b.parked, q)
		return q.slot == 0
	case resDeadLetter:
		t.failures().dead = true
		b.demote(q)
		b.ready.push(q)
	case resNotNow:
		b.ready.pushFront(q)
		b.shut = true
	}
	return false
}

// spares appends to ts up to n tasks that have finished, cleared, to be
// taken again (a term allocates tasks only until its first ones finish),
// and returns ts. A finished task is referenced by nothing: user code sees only its
// message, and the worker that ran it has told settle it is done.
func (b *book) spares(ts []*task, n int) []*task {
	k := max(len(b.spare)-n, 0)
	for i, t := range b.spare[k:] {
		*t = task{}
		ts = append(ts, t)
		b.spare[k+i] = nil
	}
	b.spare = b.spare[:k]
	return ts
}

// due makes ready the parked ids whose retry time is at or before now, and
// returns how many.
func (b *book) due(now time.Time) (n int) {
	for len(b.parked) > 0 && !b.parked[0].retryAt.After(now) {
		b.ready.push(heap.Pop(&b.parked).(*idQueue))
		n++
	}
	return n
}

// nextDue is the earliest retry time (zero when nothing is parked).
func (b *book) nextDue() time.Time {
	if len(b.parked) == 0 {
		return time.Time{}
	}
	return b.parked[0].retryAt
}

// handBack empties the queues at the term's end and returns the tasks
// that never finished (queued, parked, left, running on a detached
// worker), in no particular order. They stay in their shards' lists: the
// last marks say they are not done.
func (b *book) handBack() []*task {
	var out []*task
	for _, q := range b.byID.All() {
		out = append(out, q.buf[q.head:]...)
	}
	// A new map, not Clear: Clear zeroes the whole table, as large as the
	// most ids the term ever held, at every term's end.
	b.byID = intmap.New[uint64, *idQueue](b.capacity)
	b.ready, b.parked, b.held, b.waiting = fifo{}, nil, 0, 0
	return out
}

func (b *book) queue(id uint64) *idQueue {
	var q *idQueue
	if n := len(b.free); n > 0 {
		q, b.free = b.free[n-1], b.free[:n-1]
	} else {
		q = &idQueue{slot: -1}
	}
	q.id, q.failing = id, false
	b.byID.Put(id, q)
	return q
}

// lighten holds t light, if it may be: its message is dropped (it is read
// again when its turn comes) and its room given back.
func (b *book) lighten(t *task) bool {
	if !b.reread || t.m == nil || t.m.Ack != nil || b.waiting >= b.maxWaiting {
		return false
	}
	t.m = nil
	b.held--
	b.waiting++
	return true
}

// demote holds light every task waiting behind q's first, which has just
// failed.
func (b *book) demote(q *idQueue) {
	q.failing = true
	for _, t := range q.buf[q.head+1:] {
		if t.m != nil && !b.lighten(t) && b.waiting >= b.maxWaiting {
			return
		}
	}
}

// lightRun returns t (first of its id, light) and the light tasks right
// behind it in the same shard, up to max and to the room there is (at
// least t): the tasks attempts.refill reads again in one call.
func (b *book) lightRun(t *task, max int) []*task {
	q := t.q
	n := min(max, b.capacity-b.held)
	out := []*task{t}
	for _, u := range q.buf[q.head+1:] {
		if len(out) >= n || u.m != nil || u.shard != t.shard {
			break
		}
		out = append(out, u)
	}
	return out
}

// refilled gives light tasks their messages read again; they count toward
// capacity again.
func (b *book) refilled(ts []*task, ms []*transport.Message) {
	for i, t := range ts {
		t.m = ms[i]
		b.held++
		b.waiting--
	}
}

// marks returns the mark of every shard read whose mark differs from the
// one last written (wrote), or with all of every shard read, each passed
// through keep first (what the ledger keeps beyond it), and restarts the
// count of tasks finished.
func (b *book) marks(all bool, keep func(s int, m checkpoint.Mark) checkpoint.Mark) map[int]checkpoint.Mark {
	out := map[int]checkpoint.Mark{}
	for s, sh := range b.shards {
		if sh == nil {
			continue // not read: the index has no mark there
		}
		m := keep(s, sh.mark())
		if all || !sameMark(m, sh.written) {
			out[s] = m
		}
	}
	b.finished = 0
	return out
}

// wrote records marks as written.
func (b *book) wrote(marks map[int]checkpoint.Mark) {
	for s, m := range marks {
		b.shards[s].written = m
	}
}

// pending is how many tasks are unfinished (whole and light).
func (b *book) pending() int {
	n := 0
	for _, sh := range b.shards {
		if sh != nil {
			n += sh.n
		}
	}
	return n
}

type idQueue struct {
	id      uint64
	buf     []*task // tasks are buf[head:]; the first is running, parked, ready or left
	head    int
	retryAt time.Time
	slot    int  // index in parked; -1 when not parked
	failing bool // its first task has failed: the tasks behind it are held light
}

func (q *idQueue) first() *task { return q.buf[q.head] }
func (q *idQueue) len() int     { return len(q.buf) - q.head }
func (q *idQueue) push(t *task) { q.buf = append(q.buf, t) }
func (q *idQueue) pop() {
	q.buf[q.head] = nil
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
}

// shardTrack knows, for one shard of the index held, the tasks taken and
// not finished, in position order, and where reading has got to. Its
// watermark is the position below which every task of the index is done:
// the first unfinished task, or the position after the last message read.
// Its mark (what a checkpoint records) adds that everything between the
// watermark and the position after the last message read is done but the
// unfinished tasks: a task cut off at a handover, or stuck failing, costs
// only itself. Finished tasks leave the list at once, so its size is the
// number of unfinished tasks (at most MaxPending held whole, and
// MaxWaiting light), however long the first of them keeps failing.
type shardTrack struct {
	next       transport.Position // after the last message read
	head, tail *task              // unfinished, in position order
	n          int
	written    checkpoint.Mark // the mark last written
}

func (s *shardTrack) add(t *task) {
	t.before, t.after = s.tail, nil
	if s.tail != nil {
		s.tail.after = t
	} else {
		s.head = t
	}
	s.tail = t
	s.n++
}

func (s *shardTrack) remove(t *task) {
	if t.before != nil {
		t.before.after = t.after
	} else {
		s.head = t.after
	}
	if t.after != nil {
		t.after.before = t.before
	} else {
		s.tail = t.before
	}
	t.before, t.after = nil, nil
	s.n--
}

func (s *shardTrack) watermark() transport.Position {
	if s.head != nil {
		return s.head.pos
	}
	return s.next
}

// mark is what a checkpoint records of the shard: the watermark, and above
// it every unfinished task (Options.MaxPending bounds them), so that a
// handover does again only what was not finished.
func (s *shardTrack) mark() checkpoint.Mark {
	if s.head == nil {
		return checkpoint.Mark{Low: s.next, High: s.next}
	}
	m := checkpoint.Mark{Low: s.head.pos, High: s.next}
	if s.n > 1 {
		m.Undone = make([]transport.Position, 0, s.n-1)
	}
	for t := s.head.after; t != nil; t = t.after {
		m.Undone = append(m.Undone, t.pos)
	}
	return m
}

func sameMark(a, b checkpoint.Mark) bool {
	return a.Low == b.Low && a.High == b.High && slices.Equal(a.Undone, b.Undone)
}

// parkHeap orders parked ids by retry time.
type parkHeap []*idQueue

func (h parkHeap) Len() int           { return len(h) }
func (h parkHeap) Less(i, j int) bool { return h[i].retryAt.Before(h[j].retryAt) }
func (h parkHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = i, j
}
func (h *parkHeap) Push(x any) {
	q := x.(*idQueue)
	q.slot = len(*h)
	*h = append(*h, q)
}
func (h *parkHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.slot = -1
	return q
}

// fifo is a queue of ids that reuses its array.
type fifo struct {
	q    []*idQueue
	head int
}

func (f *fifo) len() int { return len(f.q) - f.head }

func (f *fifo) push(q *idQueue) {
	if f.head > 0 && len(f.q) == cap(f.q) { // full: move to the front instead of growing
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	f.q = append(f.q, q)
}

// pushFront puts q first in line, before the ids already waiting.
func (f *fifo) pushFront(q *idQueue) {
	if f.head > 0 {
		f.head--
		f.q[f.head] = q
		return
	}
	f.q = append(f.q, nil)
	copy(f.q[1:], f.q)
	f.q[0] = q
}

func (f *fifo) pop() *idQueue {
	q := f.q[f.head]
	f.q[f.head] = nil
	f.head++
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	}
	return q
}
