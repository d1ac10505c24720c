package partition

import (
	"context"
	"sync"
	"time"
)

// Assignment is a held share of the work: the tasks with
// id % Replicas == Index.
type Assignment struct {
	Index, Replicas int

	// Token is a fencing token: successive holders of any task hold
	// strictly increasing tokens, so a store that remembers the highest
	// token it accepted for a task can refuse a write from a holder that
	// woke up late. It is the server time, in milliseconds since the Unix
	// epoch, at which the interval the term began in started; it stays the
	// same through renewals, and keeps growing across changes of Interval
	// and steps back of the server's clock (see docs/PROTOCOL.md).
	Token int64
}

// Owns reports whether the task with this id belongs to the assignment.
// The zero Assignment owns nothing.
func (a Assignment) Owns(id uint64) bool {
	return a.Replicas > 0 && id%uint64(a.Replicas) == uint64(a.Index)
}

// A Term is one continuous holding of an Assignment: from its acquisition,
// through any number of renewals, to its end. All methods are safe for
// concurrent use, and no channel of a Term ever blocks the lease.
type Term struct {
	a       Assignment
	clock   Clock
	start   time.Time // on clock
	done    chan struct{}
	renewed chan time.Time // capacity 1, holds the latest deadline

	mu       sync.Mutex
	deadline time.Time // on clock
	err      error
	renewal  chan struct{} // closed and replaced at each renewal, closed at the end
	// kept is why the term is no longer renewed (its mapping changed, or
	// its worker leaves): it is handed over, kept to its cap, and ends
	// there with kept. Nil while it is renewed.
	kept error

	// provisional: taken at a change of count from one closed interval,
	// fenced by its user's ledger, until a registration confirms it.
	provisional bool
	// released: its user released it (Release); wake tells the runner.
	released bool
	wake     chan<- struct{}

	// m is the interval of the registration that issued or last renewed
	// the term; only the lease's runner uses it.
	m int64
}

func newTerm(a Assignment, clock Clock, start, deadline time.Time) *Term {
	return &Term{a: a, clock: clock, start: start, deadline: deadline, done: make(chan struct{}),
		renewed: make(chan time.Time, 1), renewal: make(chan struct{})}
}

// Assignment is what the term holds.
func (t *Term) Assignment() Assignment { return t.a }

// Start is when the term began, on the host's clock (time.Now's).
func (t *Term) Start() time.Time { return t.clock.Host(t.start) }

// Deadline is when the term runs out unless renewed first, on the host's
// clock (time.Now's, with a monotonic reading): compare it with time.Now
// or pass it to context.WithDeadline. Each renewal moves it later.
func (t *Term) Deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.clock.Host(t.deadline)
}

// Deadlines receives the new deadline at each renewal. It keeps only the
// latest one: a reader that falls behind sees the newest deadline, never a
// stale one. One reader drains it; for any number of waiters, use
// Renewal.
func (t *Term) Deadlines() <-chan time.Time { return t.renewed }

// Renewal returns a channel that is closed at the term's next renewal, or
// when the term ends: a broadcast that any number of goroutines can wait
// on, unlike Deadlines, which one reader drains. Call it again after it
// is closed for the renewal after that.
func (t *Term) Renewal() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.renewal
}

// Room waits until at least d is left before the term's deadline (at
// once when it is; otherwise at the renewal that moves the deadline) and
// reports true; it reports false when the term ends, or its deadline
// passes unrenewed, or ctx ends first. Work that needs d to finish starts
// only after Room: package consumer before each task, a Watermill
// middleware before each handler.
func (t *Term) Room(ctx context.Context, d time.Duration) bool {
	for {
		renewal := t.Renewal()
		if !t.Held() {
			return false
		}
		if time.Until(t.Deadline()) >= d {
			return true
		}
		select {
		case <-renewal:
		case <-ctx.Done():
			return false
		}
	}
}

// Done is closed when the term ends. Err then says why.
func (t *Term) Done() <-chan struct{} { return t.done }

// Err is nil while the term is live and then one of ErrMappingChanged,
// ErrExpired, ErrGenerationChanged or ErrStopped (match with errors.Is).
func (t *Term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Held reports whether the term holds at this instant: it has not ended and
// its deadline has not passed on the monotonic clock. A process that was
// paused past the deadline sees false here before any goroutine of the
// lease has run.
func (t *Term) Held() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err == nil && t.clock.Now().Before(t.deadline)
}

func (t *Term) renew(deadline time.Time) {
	t.mu.Lock()
	if t.err != nil || !deadline.After(t.deadline) {
		t.mu.Unlock()
		return
	}
	t.deadline = deadline
	close(t.renewal)
	t.renewal = make(chan struct{})
	t.mu.Unlock()
	select {
	case <-t.renewed:
	default:
	}
	t.renewed <- t.clock.Host(deadline)
}

// HandingOver reports whether the term is being handed over: the
// mapping changed, so it is no longer renewed and is kept to its cap
// (Deadline), half a gap before the new mapping's holders may start. Its
// holder serves it until then, draining MinTaskTime before it (package
// consumer).
func (t *Term) HandingOver() bool { return t.keptFor() != nil }

// Provisional reports whether the term is provisional: taken at a change
// of the group's count from that one closed interval, before the next
// registration confirms it (two agreeing closed intervals: from then on an
// ordinary term, and Provisional reports false). Its exclusivity is not
// the lease's timing but its user's fence: it may serve only what every
// former holder has released (package consumer's ledger:
// checkpoint.OpenRequest.Provisional). Only a lease whose user fences its
// terms issues provisional terms: package consumer's, over a log with
// checkpoints (docs/PROTOCOL.md, "The fenced handoff").
func (t *Term) Provisional() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.provisional
}

// Release ends a term that is handed over (HandingOver) before its cap:
// its user has drained it and released it in its ledger, so the lease may
// begin the next mapping's provisional term at once. The term ends with
// the reason it was handed over. It does nothing to a term that is not
// handed over, or has ended.
func (t *Term) Release() {
	t.mu.Lock()
	ok := t.kept != nil && t.err == nil && t.wake != nil
	t.released = t.released || ok
	t.mu.Unlock()
	if !ok {
		return
	}
	select {
	case t.wake <- struct{}{}:
	default: // a wake-up is pending: the runner looks at the live term then
	}
}

// releasedFor is why a term its user released was handed over; nil if it
// was not released.
func (t *Term) releasedFor() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.released {
		return nil
	}
	return t.kept
}

// keptFor is why the term is handed over, nil while it is renewed.
func (t *Term) keptFor() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.kept
}

// keepTo hands the term over for why and moves its deadline to cap, if
// later.
func (t *Term) keepTo(cap time.Time, why error) {
	t.mu.Lock()
	if t.kept == nil && t.err == nil {
		// Say so to Renewal's waiters even when the cap does not move the
		// deadline (a slot at the end of the window): the handover begins.
		t.kept = why
		close(t.renewal)
		t.renewal = make(chan struct{})
	}
	t.kept = why
	t.mu.Unlock()
	t.renew(cap)
}

// resume renews a term an agreeing registration from m holds again (the
// mapping changed back): it is no longer handed over.
func (t *Term) resume(m int64, deadline time.Time) {
	t.mu.Lock()
	t.kept = nil
	t.provisional = false // a provisional term confirmed
	t.mu.Unlock()
	t.m = m
	t.renew(deadline)
}

// end ends the term with err; it reports whether this call ended it.
func (t *Term) end(err error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return false
	}
	t.err = err
	close(t.done)
	close(t.renewal) // not replaced: no renewal comes after the end
	return true
}

// localDeadline is the deadline on the lease's own clock.
func (t *Term) localDeadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadline
}
