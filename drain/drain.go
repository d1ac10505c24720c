package drain

import (
	"context"
	"sync"
	"sync/atomic"
)

// Gate admits tasks until stopped and tells when the admitted ones are
// done. The zero Gate is open and ready to use; it must not be copied after
// first use. All methods are safe for concurrent use.
//
// Enter and Leave are one atomic operation each while nobody waits (no
// lock: they run once per task); a Wait registers itself in the same word,
// so the Leave that empties the gate knows to wake it.
type Gate struct {
	state atomic.Int64  // stoppedBit, waitingBit, and the number in flight
	mu    sync.Mutex    // guards idle
	idle  chan struct{} // made by a Wait while work is in flight, closed when it drops to zero
}

const (
	stoppedBit = 1 << 62        // Enter fails
	waitingBit = 1 << 61        // a Wait may be blocked: the Leave that empties the gate wakes it
	countMask  = waitingBit - 1 // tasks in flight
)

// Enter admits one task, unless the gate is stopped. A task admitted must
// call Leave exactly once when it is done.
func (g *Gate) Enter() bool {
	for {
		s := g.state.Load()
		if s&stoppedBit != 0 {
			return false
		}
		if g.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// Leave marks one admitted task done.
func (g *Gate) Leave() {
	s := g.state.Add(-1)
	if s&countMask == countMask {
		g.state.Add(1)
		panic("drain: Leave without Enter")
	}
	if s&countMask == 0 && s&waitingBit != 0 {
		g.wake()
	}
}

// wake closes the channel the waiters block on (they look again: tasks
// admitted after this Leave, only possible while the gate is open, are
// waited for too).
func (g *Gate) wake() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.And(^int64(waitingBit))
	if g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// Stop stops taking: every Enter from now on fails until Resume. It
// returns the number of tasks in flight at the moment the gate closed.
func (g *Gate) Stop() int {
	return int(g.state.Or(stoppedBit) & countMask)
}

// Resume opens the gate again.
func (g *Gate) Resume() {
	g.state.And(^int64(stoppedBit))
}

// Stopped reports whether the gate is stopped.
func (g *Gate) Stopped() bool {
	return g.state.Load()&stoppedBit != 0
}

// InFlight returns the number of admitted tasks that have not left.
func (g *Gate) InFlight() int {
	return int(g.state.Load() & countMask)
}

// Wait blocks until no task is in flight, or ctx ends; then it returns
// ctx's error, and InFlight tells how many tasks are still running. Wait
// does not stop the gate: with the gate open it may never return before
// ctx ends.
//
// Enter and Leave allocate nothing: the channel Wait blocks on is made only
// when a Wait finds work in flight.
func (g *Gate) Wait(ctx context.Context) error {
	g.mu.Lock()
	// Registered before the count is read: a Leave that empties the gate
	// after this sees the bit and wakes us (under mu, so after idle is set).
	if g.state.Or(waitingBit)&countMask == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		// Tasks admitted after the one that emptied the gate (only
		// possible while it is open) are waited for too.
		return g.Wait(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops taking and waits for the work in flight, by ctx: the
// first two steps of a handover, with nothing at the end. The gate stays
// stopped.
func (g *Gate) Shutdown(ctx context.Context) error {
	g.Stop()
	return g.Wait(ctx)
}

// Handover runs the four steps: stop taking, wait for the work in flight
// (by ctx), apply, resume. If the wait ends with ctx's error, apply is not
// called and the gate stays stopped: work that outlived its deadline is
// still running, and resuming under a new mapping beside it is what the
// handover exists to prevent. If apply fails the gate stays stopped too.
// Either way the error is returned and the caller decides.
func (g *Gate) Handover(ctx context.Context, apply func() error) error {
	if err := g.Shutdown(ctx); err != nil {
		return err
	}
	if apply != nil {
		if err := apply(); err != nil {
			return err
		}
	}
	g.Resume()
	return nil
}
