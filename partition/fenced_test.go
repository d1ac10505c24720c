package partition

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// releaser plays a fencing user (package consumer over a log): it
// releases each term handed over at once, as if drained in no time.
func releaser(w *simWorker, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-w.l.Changed():
		case <-time.After(time.Millisecond):
		}
		if t := w.l.Term(); t != nil && t.HandingOver() {
			t.Release()
		}
	}
}

// With the fenced handoff, a join gives every worker its share of the new
// mapping an interval earlier than the lease's timing: at the
// registration that shows the count changed, each releases its old term
// and takes a provisional one, which the next registration confirms (the
// same term, no longer provisional). Without the fence (the lease's
// timing), the new mapping is held two intervals after the join.
func TestFencedJoinTakesTheNewMappingAnIntervalEarly(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		name := "timed"
		if fenced {
			name = "fenced"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, simOpts, 17)
				stop := make(chan struct{})
				join := func() *simWorker {
					w := s.join()
					w.l.fenced.Store(fenced)
					go releaser(w, stop)
					return w
				}
				for range 4 {
					join()
				}
				s.advance(5 * simOpts.Interval)
				if err := s.settled(); err != nil {
					t.Fatal(err)
				}
				iv := simOpts.Interval
				s.advance(time.Duration(time.Now().UnixNano())%iv + iv/2) // mid-window
				joined := time.Now()
				join()
				// Every worker holds a term of 5, provisional or not.
				var all time.Duration
				for all == 0 && time.Since(joined) < 4*iv {
					s.advance(iv / 100)
					n := 0
					for _, w := range s.sorted() {
						if a, ok := w.l.Current(); ok && a.Replicas == 5 {
							n++
						}
					}
					if n == 5 {
						all = time.Since(joined)
					}
				}
				if all == 0 {
					t.Fatal("the group never held 5 shares")
				}
				t.Logf("%s: every worker holds its share of 5 %.2f intervals after the join", name, all.Seconds()/iv.Seconds())
				want := func(lo, hi float64) {
					if x := all.Seconds() / iv.Seconds(); x < lo || x > hi {
						t.Errorf("the new mapping held after %.2f intervals; want %.2f to %.2f", x, lo, hi)
					}
				}
				terms := map[int]*Term{}
				for _, w := range s.sorted() {
					terms[w.id] = w.l.Term()
				}
				if fenced {
					want(0.5, 1.3)
					for id, tm := range terms {
						if !tm.Provisional() && id != 5 {
							t.Errorf("worker %d's term of 5 is not provisional an interval early", id)
						}
					}
				} else {
					want(1.5, 2.3)
				}
				// A registration later, every term is confirmed: the same
				// terms, ordinary, the group settled.
				s.advance(iv + iv/4)
				for _, w := range s.sorted() {
					if tm := w.l.Term(); tm != terms[w.id] || tm.Provisional() {
						t.Errorf("worker %d: term %p (provisional %v) an interval on; want the same term %p, confirmed", w.id, tm, tm != nil && tm.Provisional(), terms[w.id])
					}
				}
				if err := s.settled(); err != nil {
					t.Error(err)
				}
				close(stop)
				s.stopAll()
				if len(s.bad) > 0 {
					t.Fatalf("ordinary leases overlapped:\n%s", strings.Join(s.bad, "\n"))
				}
			})
		})
	}
}
