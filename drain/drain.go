package drain

import (
	"context"
	"sync"
)

// Gate admits tasks until stopped and tells when the admitted ones are
// done. The zero Gate is open and ready to use; it must not be copied after
// first use. All methods are safe for concurrent use.
type Gate struct {
	mu       sync.Mutex
	stopped  bool
	inFlight int
	idle     chan struct{} // made by a Wait while work is in flight, closed when it drops to zero
}

// Enter admits one task, unless the gate is stopped. A task admitted must
// call Leave exactly once when it is done.
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.inFlight++
	return true
}

// Leave marks one admitted task done.
func (g *Gate) Leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight == 0 {
		panic("drain: Leave without Enter")
	}
	g.inFlight--
	if g.inFlight == 0 && g.idle != nil {
		close(g.idle) // wakes every Wait
		g.idle = nil
	}
}

// Stop stops taking: every Enter from now on fails until Resume. It
// returns the number of tasks in flight at the moment the gate closed.
func (g *Gate) Stop() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	return g.inFlight
}

// Resume opens the gate again.
func (g *Gate) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = false
}

// Stopped reports whether the gate is stopped.
func (g *Gate) Stopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopped
}

// InFlight returns the number of admitted tasks that have not left.
func (g *Gate) InFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight
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
	if g.inFlight == 0 {
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
