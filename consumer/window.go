package consumer

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/partition"
)

// pauseLead is how much earlier than MinTaskTime before the deadline
// intake and task starts pause: with the default MinTaskTime (the gap),
// the pause then begins before the renewing registration is sent, so no
// task starts in the instant a registration may end the term.
const pauseLead = time.Millisecond

// startWindow says when work may start under one term: while the term
// takes work, the group is not paused, and the term's deadline is more
// than MinTaskTime away (a deadline the renewal has not moved yet). The
// term's lifecycle moves it at each renewal (renewed) and ends it (end);
// reading (intake) and running (attempts) only ask it. Its per-task check
// (mayStartAt) reads atomics and the monotonic clock only. An attempt that
// finds it shut gives its task back to the book (resNotNow), which gives
// nothing more until the runner, waiting here (mayStart), opens it.
type startWindow struct {
	t       *partition.Term
	pause   *pauser         // the group's, as this worker last read it
	taking  context.Context // ends when the term stops taking
	minTask time.Duration   // Options.MinTaskTime

	over    atomic.Bool  // taking has ended
	pauseAt atomic.Int64 // unix ns: from then until a renewal, nothing starts
	// base and pauseAfter are pauseAt for the per-task check: time.Since
	// reads only the monotonic clock (one vDSO call), and a timer that
	// fires late on a busy process cannot let a task start past it.
	base       time.Time
	pauseAfter atomic.Int64 // ns since base
}

func newStartWindow(t *partition.Term, pause *pauser, taking context.Context, minTask time.Duration) *startWindow {
	w := &startWindow{t: t, pause: pause, taking: taking, minTask: minTask, base: time.Now()}
	w.renewed()
	return w
}

// renewed moves the pause to the term's deadline now.
func (w *startWindow) renewed() {
	at := w.t.Deadline().Add(-w.minTask - pauseLead)
	w.pauseAt.Store(at.UnixNano())
	w.pauseAfter.Store(int64(at.Sub(w.base)))
}

// end closes the window for good: the term stopped taking.
func (w *startWindow) end() { w.over.Store(true) }

// closesAt is when the window closes unless a renewal moves it.
func (w *startWindow) closesAt() time.Time { return time.Unix(0, w.pauseAt.Load()) }

// since is the time since the window's base, on the monotonic clock.
func (w *startWindow) since() time.Duration { return time.Since(w.base) }

// ended reports whether the term itself has ended (its lease moved on),
// which a call into user code checks once more inside the drain gate.
func (w *startWindow) ended() bool { return isDone(w.t.Done()) }

// mayStartAt reports whether work may start at now (time since base), the
// common case, small enough to inline: the term takes work and is not in
// its pause, on the monotonic clock.
func (w *startWindow) mayStartAt(now time.Duration) bool {
	if w.over.Load() || w.pause.on.Load() || isDone(w.t.Done()) {
		return false
	}
	return int64(now) < w.pauseAfter.Load()
}

// mayStart reports whether work may start now: the term takes work, the
// group is not paused (then it waits for the resume), and it is not within
// MinTaskTime of a deadline the renewal has not moved yet (then it waits
// for the renewal). The common case is mayStartAt.
func (w *startWindow) mayStart() bool {
	if w.mayStartAt(w.since()) {
		return true
	}
	if w.pause.on.Load() { // the group is paused: wait for the resume, holding the lease
		if !w.pause.wait(w.taking) {
			return false
		}
		return w.mayStart()
	}
	// Strictly more than the lead must be left, as mayStartAt asks (now
	// before pauseAt): at exactly the lead, Room would say yes while
	// mayStartAt and intake's fetch deadline say no, and intake would
	// loop without waiting until the clock moved (on fake time, forever).
	return !w.over.Load() && w.t.Room(w.taking, w.minTask+pauseLead+time.Nanosecond) && !w.over.Load()
}
