package consumer

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// runnerRig drives a runner as a term does, on fake time (synctest): it
// submits batches as intake would and, at Concurrency 1, runs the retries
// as they come due as intake's loop does. Its exec fails some tasks a
// number of times, each retried after a backoff, and records what ran.
type runnerRig struct {
	r        *runner
	conc     int
	fails    map[string]int           // key: failures before success
	backoff  time.Duration            // the wait before each retry
	mu       sync.Mutex               // guards what follows
	ran      map[uint64][]string      // per id, the keys run to success, in order
	attempts map[string][]time.Time   // per key, when each attempt started
	running  map[uint64]bool          // ids with an attempt in progress
	overlap  []string                 // two attempts of an id at once
	early    []string                 // a retry before its time
	parked   map[string]time.Time     // per key, its retry time
	block    map[string]chan struct{} // keys whose handler blocks until closed
	msgs     map[transport.Position]*transport.Message
}

func newRunnerRig(conc, capacity int) *runnerRig {
	g := &runnerRig{conc: conc, fails: map[string]int{}, backoff: 250 * time.Millisecond, ran: map[uint64][]string{},
		attempts: map[string][]time.Time{}, running: map[uint64]bool{}, parked: map[string]time.Time{}, block: map[string]chan struct{}{},
		msgs: map[transport.Position]*transport.Message{}}
	// Tasks behind a failing id are held light (as on a log that reads
	// them again): they leave the room to the other ids.
	b := newBook(capacity, 1000, true)
	b.open([]*shardTrack{{}}, true)
	workers := conc
	if conc == 1 {
		workers = 0 // inline, as a term at Concurrency 1
	}
	g.r = newRunner(b, newWorker(context.Background()), workers, func() *worker { return newWorker(context.Background()) }, g.exec, alwaysOpen{}, func(f func()) { go f() }, 1_000_000, make(chan struct{}, 1))
	return g
}

func (g *runnerRig) exec(w *worker, t *task) (result, time.Duration) {
	if t.m == nil { // light: read it again, as attempts.refill does
		g.r.view(func(b *book) {
			ts := b.lightRun(t, refillBatch)
			ms := make([]*transport.Message, len(ts))
			g.mu.Lock()
			for i, u := range ts {
				ms[i] = g.msgs[u.pos]
			}
			g.mu.Unlock()
			b.refilled(ts, ms)
		})
	}
	key := t.m.Key
	g.mu.Lock()
	now := time.Now()
	if g.running[t.id] {
		g.overlap = append(g.overlap, key)
	}
	if at, ok := g.parked[key]; ok && now.Before(at) {
		g.early = append(g.early, fmt.Sprintf("%s at %v, due %v", key, now, at))
	}
	g.running[t.id] = true
	g.attempts[key] = append(g.attempts[key], now)
	fail := len(g.attempts[key]) <= g.fails[key]
	block := g.block[key]
	g.mu.Unlock()
	if block != nil {
		w.begin(t)
		<-block
		if !w.end() {
			return resDetached, 0
		}
	}
	time.Sleep(time.Millisecond) // the handler's work
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[t.id] = false
	if fail {
		g.parked[key] = time.Now().Add(g.backoff) // the runner's due time is no earlier
		return resRetry, g.backoff
	}
	g.ran[t.id] = append(g.ran[t.id], key)
	return resHandled, 0
}

// submit gives the runner a batch: keys "id/n", one shard, positions
// continuing from pos.
func (g *runnerRig) submit(t *testing.T, pos *uint64, keys ...string) {
	var ms []*transport.Message
	var ts []*task
	var at []int
	for i, k := range keys {
		var id uint64
		fmt.Sscanf(k, "%d/", &id)
		m := &transport.Message{Key: k, Position: transport.Offset(*pos)}
		*pos++
		g.mu.Lock()
		g.msgs[m.Position] = m
		g.mu.Unlock()
		ms = append(ms, m)
		ts = append(ts, &task{m: m, id: id, pos: m.Position})
		at = append(at, i)
	}
	if ok, back := g.r.submit(ms, ts, at); !ok || len(back) > 0 {
		t.Fatalf("submit: ok %v, %d handed back", ok, len(back))
	}
}

// settle runs what is due until nothing is parked (intake's loop at
// Concurrency 1; the timer goroutine with the pool), then waits for the
// workers to be idle.
func (g *runnerRig) settle() {
	for rounds := 0; ; rounds++ {
		if rounds == 100_000 { // each round runs something due: unbounded means a bug
			panic("runnerRig.settle: 100,000 rounds and tasks still pending")
		}
		synctest.Wait()
		var pending int
		g.r.view(func(b *book) { pending = b.pending() })
		if pending == 0 {
			return
		}
		if d := g.r.nextDue(); !d.IsZero() {
			time.Sleep(time.Until(d))
			g.r.runDue()
			continue
		}
		time.Sleep(time.Millisecond)
	}
}

// On fake time, at Concurrency 1 (intake's goroutine) and 4 (the pool),
// with room for 4 tasks: every task runs to success once, each id's in
// order, never two of an id at once, and every retry at its time, not
// before; a failing id's retries (3 failures, 250ms apart) cost the others
// nothing: everything else is done within the first millisecond of each
// batch, and the whole run takes the failing id's 750ms.
func TestRunnerOnFakeTime(t *testing.T) {
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprintf("Concurrency=%d", conc), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRunnerRig(conc, 4)
				g.fails["7/0"] = 3
				g.fails["3/1"] = 1
				start := time.Now()
				var pos uint64
				for n := range 3 {
					var batch []string
					for id := range 10 {
						batch = append(batch, fmt.Sprintf("%d/%d", id, n))
					}
					g.submit(t, &pos, batch...)
				}
				g.settle()
				took := time.Since(start)
				g.r.close()
				if back := g.r.join(); len(back) != 0 {
					t.Fatalf("%d tasks handed back after everything finished", len(back))
				}
				if len(g.overlap) > 0 || len(g.early) > 0 {
					t.Fatalf("overlaps %v; early retries %v", g.overlap, g.early)
				}
				for id := range uint64(10) {
					var w []string
					for n := range 3 {
						w = append(w, fmt.Sprintf("%d/%d", id, n))
					}
					if fmt.Sprint(g.ran[id]) != fmt.Sprint(w) {
						t.Errorf("id %d ran %v; want %v, once each, in order", id, g.ran[id], w)
					}
				}
				if a := g.attempts["7/0"]; len(a) != 4 || a[1].Sub(a[0]) < g.backoff || a[3].Sub(a[2]) < g.backoff {
					t.Errorf("7/0 attempts at %v; want 4, %v apart", a, g.backoff)
				}
				// 7's three retries set the pace: 3 backoffs and its 3 tasks'
				// work, nothing else waits for them.
				if lim := 3*g.backoff + 100*time.Millisecond; took > lim {
					t.Errorf("the run took %v; want about %v (7's retries), under %v", took, 3*g.backoff, lim)
				}
				for id, keys := range g.ran {
					if id == 7 || id == 3 {
						continue
					}
					last := g.attempts[keys[len(keys)-1]]
					if d := last[0].Sub(start); d > 100*time.Millisecond {
						t.Errorf("id %d's last task started %v in: held up by a failing id", id, d)
					}
				}
			})
		})
	}
}

// A handler that never returns: close and detach let the term go on
// without it; its task and the tasks of its id behind it are handed back,
// the other ids' done.
func TestRunnerDetachesAStuckWorker(t *testing.T) {
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprintf("Concurrency=%d", conc), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRunnerRig(conc, 16)
				stuck := make(chan struct{})
				g.block["5/0"] = stuck
				var ms []*transport.Message
				var ts []*task
				var at []int
				for i, k := range []string{"1/0", "5/0", "2/0", "5/1", "3/0"} {
					m := &transport.Message{Key: k, Position: transport.Offset(uint64(i))}
					ms, at = append(ms, m), append(at, i)
					ts = append(ts, &task{m: m, id: uint64(k[0] - '0'), pos: m.Position})
				}
				// Intake: at Concurrency 1 it runs the tasks itself, and gets
				// stuck in 5/0; when it returns, detached, submit says so.
				submitted := make(chan struct{})
				go func() {
					defer close(submitted)
					if ok, _ := g.r.submit(ms, ts, at); ok && conc == 1 {
						panic("submit returned ok after intake was detached")
					}
				}()
				for tries := 0; ; tries++ { // until every task but 5's has run, and 5/0 is stuck
					time.Sleep(time.Millisecond)
					synctest.Wait()
					g.mu.Lock()
					n := len(g.attempts)
					g.mu.Unlock()
					if n == 2 && conc == 1 || n == 4 {
						break
					}
					if tries == 10_000 { // 10 s of fake time: a bug, not a slow machine
						t.Fatalf("after 10 s of fake time %d tasks have run; want %d", n, map[bool]int{true: 2, false: 4}[conc == 1])
					}
				}
				defer func() { // the stuck handler returns; nothing is left running
					close(stuck)
					<-submitted
					synctest.Wait()
				}()
				g.r.close()
				var overdue atomic.Int64
				late, n, intake := g.r.detach(&overdue)
				if n != 1 || len(late) != 1 || late[0].m.Key != "5/0" || intake != (conc == 1) {
					t.Fatalf("detached %d workers, tasks %v, intake %v; want 1, [5/0], %v", n, keys(late), intake, conc == 1)
				}
				back := g.r.join()
				got := map[string]bool{}
				for _, tk := range back {
					got[tk.m.Key] = true
				}
				wantBack := map[string]bool{"5/0": true, "5/1": true}
				if conc == 1 { // intake was stuck before it reached 2/0 and 3/0: they are handed back
					wantBack["2/0"], wantBack["3/0"] = true, true
				}
				if fmt.Sprint(got) != fmt.Sprint(wantBack) {
					t.Errorf("handed back %v; want %v", got, wantBack)
				}
			})
		})
	}
}

func keys(ts []*task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.m.Key)
	}
	return out
}

// BenchmarkOneWorkerDriving runs tasks that do nothing through a runner
// of one worker, driven two ways: by intake's own goroutine (inline, how
// Concurrency 1 runs) and by a pool of one worker goroutine that intake
// feeds (how every other Concurrency runs). The difference is the
// hand-off per task, which is why Concurrency 1 stays inline (issue 52).
//
//	go test -run '^$' -bench OneWorkerDriving ./consumer/
func BenchmarkOneWorkerDriving(b *testing.B) {
	for _, c := range []struct {
		name    string
		workers int
	}{{"inline", 0}, {"pool of one", 1}} {
		b.Run(c.name, func(b *testing.B) {
			bk := newBook(512, 1000, false)
			bk.open([]*shardTrack{{}}, true)
			var ran atomic.Int64
			exec := func(*worker, *task) (result, time.Duration) {
				ran.Add(1)
				return resHandled, 0
			}
			newW := func() *worker { return newWorker(context.Background()) }
			r := newRunner(bk, newW(), c.workers, newW, exec, alwaysOpen{}, func(f func()) { go f() }, 1<<30, make(chan struct{}, 1))
			const batch = 512
			ms := make([]*transport.Message, batch)
			at := make([]int, batch)
			var pos uint64
			b.ResetTimer()
			for sent := 0; sent < b.N; sent += batch {
				ts := r.tasks(nil, batch)
				slab := make([]transport.Message, batch) // the pool may still run the last batch's
				for i := range batch {
					slab[i] = transport.Message{Position: transport.Offset(pos)}
					ms[i], at[i] = &slab[i], i
					*ts[i] = task{m: ms[i], id: pos, pos: ms[i].Position}
					pos++
				}
				if ok, back := r.submit(ms, ts, at); !ok || len(back) > 0 {
					b.Fatalf("submit: ok %v, %d handed back", ok, len(back))
				}
			}
			for ran.Load() < int64(pos) {
				runtime.Gosched()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pos), "ns/task")
			r.close()
			r.join()
		})
	}
}

// alwaysOpen is a start window that is never shut: the runner's own tests
// are about the book and the workers.
type alwaysOpen struct{}

func (alwaysOpen) mayStart() bool { return true }

// gateWindow is a start window shut until open is closed.
type gateWindow struct{ open chan struct{} }

func (g gateWindow) mayStart() bool { <-g.open; return true }

// A shut start window keeps every task in the book, none on a worker: the
// attempt that meets it gives its task back (resNotNow), every worker goes
// idle (inline, intake waits for the window instead of reading on),
// nothing more is tried, and once the window opens every task runs.
func TestAShutWindowKeepsTasksInTheBook(t *testing.T) {
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const n = 10
				win := gateWindow{open: make(chan struct{})}
				var shut atomic.Bool
				shut.Store(true)
				var mu sync.Mutex
				var met, ran []string
				exec := func(_ *worker, tk *task) (result, time.Duration) {
					mu.Lock()
					defer mu.Unlock()
					if shut.Load() {
						met = append(met, tk.m.Key)
						if len(met) > 100 { // tried again and again: a bug, not a slow machine; stop the spin
							return resLeave, 0
						}
						return resNotNow, 0
					}
					ran = append(ran, tk.m.Key)
					return resHandled, 0
				}
				bk := newBook(64, 0, false)
				bk.open([]*shardTrack{{}}, true)
				newW := func() *worker { return newWorker(context.Background()) }
				r := newRunner(bk, newW(), workers, newW, exec, win, func(f func()) { go f() }, 1<<30, make(chan struct{}, 1))
				var ms []*transport.Message
				var ts []*task
				var at []int
				for i := range n {
					m := &transport.Message{Key: fmt.Sprint(i), Position: transport.Offset(uint64(i))}
					ms, ts, at = append(ms, m), append(ts, &task{m: m, id: uint64(i), pos: m.Position}), append(at, i)
				}
				submitted := make(chan struct{})
				go func() { // inline, submit runs the tasks: it waits for the window
					defer close(submitted)
					if ok, back := r.submit(ms, ts, at); !ok || len(back) > 0 {
						t.Errorf("submit: ok %v, %d handed back", ok, len(back))
					}
				}()
				synctest.Wait()
				r.mu.Lock()
				idle := r.idle
				r.mu.Unlock()
				mu.Lock()
				if len(met) != 1 || len(ran) != 0 || idle != workers {
					t.Fatalf("while shut: %d attempts met the window (%v), %d ran, %d of %d workers idle; want 1, 0, all", len(met), met, len(ran), idle, workers)
				}
				shut.Store(false)
				mu.Unlock()
				close(win.open)
				<-submitted
				synctest.Wait()
				mu.Lock()
				if len(ran) != n {
					t.Errorf("after the window opened: ran %v; want all %d", ran, n)
				}
				mu.Unlock()
				r.close()
				r.join()
			})
		})
	}
}
