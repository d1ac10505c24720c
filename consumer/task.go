package consumer

import (
	"context"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// task is one owned message of a term, from intake until it finishes or
// the term hands it back unfinished.
//
// A task waiting behind an id whose first task is failing may be held
// light: m is nil, and only its place (shard, pos) and id are kept; the
// message is read again from the log (transport.Rereader) when its turn
// comes (see book.lighten and attempts.refill).
type task struct {
	m     *transport.Message // nil while light
	id    uint64
	err   error              // a permanent failure known at intake (Message.Err, an ID error)
	taken mono               // when this worker first took it
	shard int                // m.Shard, kept while light
	pos   transport.Position // m.Position, kept while light
	f     *failure           // nil until its first failure
	q     *idQueue           // its id's queue in the book, once taken

	before, after *task // its shard's unfinished list (the book's)
}

// failure is a task's failure policy state, from its first failure on,
// used by the goroutine running its attempts.
type failure struct {
	attempts int
	dlTries  int // DeadLetter's failures in a row
	lastErr  error
	// ctx is the context the last attempt is reported with: what its
	// handler gave SetTaskContext (its trace), else the term's.
	ctx     context.Context
	dead    bool // gone to the dead-letter path: DeadLetter is what is retried
	failing bool // counted in shared.failingTasks
}

// failures returns t's failure state, making it at the first failure.
func (t *task) failures() *failure {
	if t.f == nil {
		t.f = &failure{}
	}
	return t.f
}

// mono is a reading of the monotonic clock: the time since monoBase.
type mono time.Duration

var monoBase = time.Now()

func monoNow() mono                         { return mono(time.Since(monoBase)) }
func (m mono) since(now mono) time.Duration { return time.Duration(now - m) }

func (rd *reading) initTask(t *task, m *transport.Message, id uint64, err error, now mono) {
	*t = task{m: m, id: id, err: err, taken: rd.sh.firstTakenAt(m.Shard, m.Position, now), shard: m.Shard, pos: m.Position}
}

// account does the accounting of an attempt that ended while its worker
// was not detached (counts, the acknowledgement of a finished task); the
// book is then told the same result (runner.runFrom).
func (a *attempts) account(t *task, r result) {
	switch r {
	case resHandled:
		a.sh.stats.handled.Add(1)
	case resDeadLettered:
		a.sh.stats.deadLetters.Add(1)
	case resSkipped:
		a.sh.stats.skipped.Add(1)
	}
	if !r.finished() {
		return
	}
	a.notFailing(t)
	if t.m.Ack != nil {
		t.m.Ack()
	}
}

// abandon hands back tasks the term did not finish: queued, waiting to
// retry, cut off by the lease, or overdue. A log reads them again from the
// checkpoint (which never passed them); other sources have given them up.
func (a *attempts) abandon(ts []*task) {
	for _, t := range ts {
		a.sh.stats.abandoned.Add(1)
		a.notFailing(t)
		if t.m != nil && t.m.Ack != nil {
			t.m.Ack()
		}
	}
}
