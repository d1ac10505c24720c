package drain

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// An Enter that begins after Stop has returned must fail, however many
// goroutines race for the gate.
func TestNoTaskAdmittedAfterStop(t *testing.T) {
	for round := range 200 {
		var g Gate
		var stopped atomic.Bool
		var late atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					after := stopped.Load()
					if g.Enter() {
						if after {
							late.Add(1)
						}
						g.Leave()
					}
				}
			})
		}
		g.Stop()
		stopped.Store(true)
		wg.Wait()
		if n := late.Load(); n != 0 {
			t.Fatalf("round %d: %d tasks admitted after Stop returned", round, n)
		}
		if n := g.InFlight(); n != 0 {
			t.Fatalf("round %d: %d in flight after every task left", round, n)
		}
	}
}

func TestWaitReturnsAtTheDeadlineWithTheInFlightCount(t *testing.T) {
	var g Gate
	release := make(chan struct{})
	var done sync.WaitGroup
	for range 3 {
		if !g.Enter() {
			t.Fatal("an open gate refused a task")
		}
		done.Go(func() {
			<-release
			g.Leave()
		})
	}
	if n := g.Stop(); n != 3 {
		t.Errorf("Stop reported %d in flight; want 3", n)
	}
	if g.Enter() {
		t.Fatal("a stopped gate admitted a task")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with work still running = %v; want the context's error", err)
	}
	if n := g.InFlight(); n != 3 {
		t.Fatalf("after the deadline InFlight = %d; want 3 (work still running is not forgotten)", n)
	}
	close(release)
	if err := g.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after the work finished = %v", err)
	}
	done.Wait()
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d after every task left", n)
	}
}

func TestHandoverAppliesOnlyAfterTheWorkIsDone(t *testing.T) {
	var g Gate
	g.Enter()
	left := make(chan struct{})
	go func() {
		time.Sleep(10 * time.Millisecond)
		g.Leave()
		close(left)
	}()
	applied := false
	err := g.Handover(context.Background(), func() error {
		if n := g.InFlight(); n != 0 {
			t.Errorf("apply ran with %d tasks in flight", n)
		}
		if !g.Stopped() {
			t.Error("apply ran with the gate open")
		}
		applied = true
		return nil
	})
	<-left
	if err != nil || !applied {
		t.Fatalf("Handover = %v, applied %v; want nil, true", err, applied)
	}
	if g.Stopped() {
		t.Fatal("the gate is still stopped after a handover")
	}
}

func TestHandoverPastItsDeadlineNeitherAppliesNorResumes(t *testing.T) {
	var g Gate
	g.Enter()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := g.Handover(ctx, func() error {
		t.Error("apply ran while a task was still in flight")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Handover = %v; want the context's error", err)
	}
	if !g.Stopped() {
		t.Fatal("the gate resumed beside work that outlived its deadline")
	}
	g.Leave()
	boom := errors.New("boom")
	if err := g.Handover(context.Background(), func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Handover with a failing apply = %v; want its error", err)
	}
	if !g.Stopped() {
		t.Fatal("the gate resumed after apply failed")
	}
}

// Enter and Leave allocate nothing: the consumer calls them for every
// attempt.
func TestEnterLeaveAllocateNothing(t *testing.T) {
	var g Gate
	if n := testing.AllocsPerRun(1000, func() { g.Enter(); g.Leave() }); n != 0 {
		t.Errorf("Enter+Leave allocate %v times; want 0", n)
	}
}

// Wait returns once the last task has left, never before and never
// missing the Leave that empties the gate, however Leaves and Waits
// interleave (Enter and Leave take no lock: a Wait registers in the same
// word that Leave changes).
func TestWaitSeesTheLastLeave(t *testing.T) {
	for round := range 2000 {
		var g Gate
		const n = 4
		for range n {
			g.Enter()
		}
		var left atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if round%2 == 0 {
					time.Sleep(time.Duration(round%7) * time.Microsecond)
				}
				left.Add(1)
				g.Leave()
			})
		}
		waiters := make(chan int64, 2)
		for range 2 {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := g.Wait(ctx); err != nil {
					waiters <- -1 // a lost wakeup
					return
				}
				waiters <- left.Load()
			}()
		}
		for range 2 {
			if got := <-waiters; got != n {
				t.Fatalf("round %d: Wait returned with %d of %d tasks left (-1: never woken)", round, got, n)
			}
		}
		wg.Wait()
		if g.InFlight() != 0 || g.Stopped() {
			t.Fatalf("round %d: in flight %d, stopped %v", round, g.InFlight(), g.Stopped())
		}
	}
}

func TestLeaveWithoutEnterPanicsAndKeepsTheGate(t *testing.T) {
	var g Gate
	g.Stop()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Leave without Enter did not panic")
			}
		}()
		g.Leave()
	}()
	if !g.Stopped() || g.InFlight() != 0 {
		t.Fatalf("after the panic: stopped %v, in flight %d; want true, 0", g.Stopped(), g.InFlight())
	}
}

func BenchmarkEnterLeave(b *testing.B) {
	var g Gate
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.Enter()
			g.Leave()
		}
	})
}
